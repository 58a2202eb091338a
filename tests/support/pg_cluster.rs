//! A throwaway PostgreSQL cluster for tests: `initdb` in a temporary directory, the
//! server listening on a Unix socket only (no TCP), no system service. Shared by the
//! unit tests (`roles::db`) and the integration tests (`tests/it`).
//!
//! One cluster per test process, started on first use; each test takes a database of
//! its own ([`fresh_database`]). As root the server runs as the `postgres` user (made
//! by Debian's package) or `nobody`, through `runuser`. A watchdog shell holds a pipe
//! from the test process: when the process exits, however it exits, the pipe closes
//! and the watchdog stops the server and removes the directory.
//!
//! A test of TLS to PostgreSQL takes a cluster of its own with [`private_ssl_cluster`]:
//! it also listens on 127.0.0.1 (a free port) with `ssl = on` and the certificate the
//! test made, and its `pg_hba.conf` has `hostssl` lines only, so the server itself
//! refuses plain text over TCP (the Unix socket stays open to the tests' admin work).
//!
//! Binaries are looked for in `$SALTPETER_PG_BINDIR`, `/usr/lib/postgresql/*/bin`
//! (newest first) and `$PATH`. Without PostgreSQL the tests fail saying what is missing,
//! unless `SALTPETER_TEST_SKIP` names `postgres` (`components.rs`): then they skip.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// A running cluster.
pub struct PgCluster {
    /// Directory of the socket (the `host` of a URL).
    pub socket_dir: PathBuf,
    pub data_dir: PathBuf,
    pub bin_dir: PathBuf,
    /// The user the server runs as, when started by root.
    pub run_as: Option<String>,
    /// The TCP port on 127.0.0.1 (clusters with TLS only); also the socket's port.
    pub tcp_port: Option<u16>,
    /// Kept open: closing it (process exit) makes the watchdog stop the server.
    _watchdog: Mutex<ChildStdin>,
}

/// Shared with the integration tests, which reach it as `pg_cluster::components`.
#[path = "components.rs"]
pub mod components;

/// The directory holding `initdb`, `pg_ctl` and `postgres`.
pub fn find_bin_dir() -> Option<PathBuf> {
    let has = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Ok(dir) = std::env::var("SALTPETER_PG_BINDIR") {
        let dir = PathBuf::from(dir);
        return has(&dir).then_some(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, dir)| has(dir))
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Some(dir);
    }
    std::env::var_os("PATH").and_then(|path| std::env::split_paths(&path).find(|dir| has(dir)))
}

/// A cluster of the caller's own (for a test that stops and restarts the server),
/// stopped when dropped; `None` as [`cluster`].
pub fn private_cluster() -> Option<PgCluster> {
    match start(None) {
        Ok(cluster) => Some(cluster),
        Err(why) => {
            skip_or_fail(&why);
            None
        }
    }
}

/// The server's certificate chain and key, PEM, for [`private_ssl_cluster`].
pub struct Ssl {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A cluster of the caller's own with TLS on 127.0.0.1 and `hostssl` only (see the
/// module's note); `None` as [`cluster`].
pub fn private_ssl_cluster(ssl: &Ssl) -> Option<PgCluster> {
    match start(Some(ssl)) {
        Ok(cluster) => Some(cluster),
        Err(why) => {
            skip_or_fail(&why);
            None
        }
    }
}

fn skip_or_fail(why: &str) {
    components::present_or_skipped(
        "postgres",
        || false,
        &format!("PostgreSQL is needed but {why}; install the Debian package `postgresql`"),
    );
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "stop"]);
    }
}

/// The cluster of this process, started on first use; `None` when PostgreSQL is not
/// installed and not required (the caller skips, saying so).
pub fn cluster() -> Option<&'static PgCluster> {
    static CLUSTER: OnceLock<Result<PgCluster, String>> = OnceLock::new();
    match CLUSTER.get_or_init(|| start(None)) {
        Ok(cluster) => Some(cluster),
        Err(why) => {
            skip_or_fail(why);
            None
        }
    }
}

/// A URL for a new, empty database of this process's cluster (`None`: skip the test).
pub fn fresh_database() -> Option<String> {
    Some(cluster()?.fresh_database())
}

impl PgCluster {
    /// A URL for a new, empty database of this cluster.
    pub fn fresh_database(&self) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let cluster = self;
        let name = format!(
            "sp_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut admin = postgres::Client::connect(&cluster.url("postgres"), postgres::NoTls)
            .unwrap_or_else(|e| panic!("connecting to the test cluster: {e}"));
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("creating database {name}: {e}"));
        cluster.url(&name)
    }
}

impl PgCluster {
    /// `postgres://` URL of `database` over the Unix socket.
    pub fn url(&self, database: &str) -> String {
        let host: String = self
            .socket_dir
            .to_string_lossy()
            .bytes()
            .map(|b| match b {
                b'/' => "%2F".to_string(),
                b => (b as char).to_string(),
            })
            .collect();
        match self.tcp_port {
            Some(port) => format!("postgres://saltpeter@{host}:{port}/{database}"),
            None => format!("postgres://saltpeter@{host}/{database}"),
        }
    }

    /// `postgres://` URL of `database` over TCP to `host` (a cluster with TLS), with
    /// `params` (`sslmode=…`) as its query.
    pub fn tcp_url(&self, host: &str, database: &str, params: &str) -> String {
        let port = self.tcp_port.expect("a cluster with TLS listens on TCP");
        format!("postgres://saltpeter@{host}:{port}/{database}?{params}")
    }

    /// Runs `pg_ctl ARGS` as the server's user.
    pub fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = as_user(self.run_as.as_deref(), &self.bin_dir.join("pg_ctl"));
        cmd.arg("-D").arg(&self.data_dir).args(args);
        cmd.output()
            .unwrap_or_else(|e| panic!("running pg_ctl {args:?}: {e}"))
    }

    /// Stops the server at once (as a crash would); [`PgCluster::start_again`] brings it
    /// back on the same socket.
    pub fn stop_immediately(&self) {
        let out = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        assert!(
            out.status.success(),
            "pg_ctl stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn start_again(&self) {
        let out = self.pg_ctl(&start_args(&self.socket_dir, &self.data_dir, self.tcp_port));
        assert!(
            out.status.success(),
            "pg_ctl start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn start_args<'a>(
    socket_dir: &'a Path,
    data_dir: &'a Path,
    tcp_port: Option<u16>,
) -> Vec<&'static str> {
    let listen = match tcp_port {
        Some(port) => format!("-c listen_addresses=127.0.0.1 -p {port}"),
        None => "-c listen_addresses=''".to_string(),
    };
    let options = format!(
        "-k {} {listen} -c fsync=off -c max_connections=200",
        socket_dir.display()
    );
    let log = format!(
        "{}/server.log",
        data_dir.parent().unwrap_or(data_dir).display()
    );
    // Leaked: a handful of short strings per process, for `&'static` arguments.
    vec![
        "-w",
        "-t",
        "60",
        "-l",
        Box::leak(log.into_boxed_str()),
        "-o",
        Box::leak(options.into_boxed_str()),
        "start",
    ]
}

/// `program` run directly, or through `runuser -u USER --` when started as root.
fn as_user(user: Option<&str>, program: &Path) -> Command {
    match user {
        Some(user) => {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", user, "--"]).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

/// `ssl = on` with `ssl`'s certificate and key (the key 0600, owned by the server's
/// user, as PostgreSQL demands), and `pg_hba.conf` with `hostssl` lines only.
fn configure_ssl(data_dir: &Path, run_as: Option<&str>, ssl: &Ssl) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let write = |name: &str, text: &str, mode: u32| -> Result<(), String> {
        let path = data_dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("chmod {}: {e}", path.display()))?;
        if let Some(user) = run_as {
            let owner = nix::unistd::User::from_name(user)
                .ok()
                .flatten()
                .ok_or(format!("user {user} vanished"))?;
            nix::unistd::chown(&path, Some(owner.uid), Some(owner.gid))
                .map_err(|e| format!("chown {}: {e}", path.display()))?;
        }
        Ok(())
    };
    write("server.crt", &ssl.cert_pem, 0o644)?;
    write("server.key", &ssl.key_pem, 0o600)?;
    write(
        "pg_hba.conf",
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n",
        0o600,
    )?;
    let conf = data_dir.join("postgresql.conf");
    let mut text =
        std::fs::read_to_string(&conf).map_err(|e| format!("{}: {e}", conf.display()))?;
    text.push_str("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
    std::fs::write(&conf, text).map_err(|e| format!("{}: {e}", conf.display()))
}

/// A free TCP port on 127.0.0.1 (free when asked; the server binds it right after).
fn free_tcp_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free TCP port: {e}"))
}

fn start(ssl: Option<&Ssl>) -> Result<PgCluster, String> {
    if components::skipped("postgres") {
        return Err("SALTPETER_TEST_SKIP names postgres".to_string());
    }
    let bin_dir = find_bin_dir().ok_or("no PostgreSQL server binaries (initdb, pg_ctl) found")?;
    let root = nix::unistd::geteuid().is_root();
    let run_as = if root {
        let user = ["postgres", "nobody"]
            .into_iter()
            .find(|u| nix::unistd::User::from_name(u).ok().flatten().is_some())
            .ok_or("running as root, and neither the user postgres nor nobody exists")?;
        Some(user.to_string())
    } else {
        None
    };
    let base = tempfile::Builder::new()
        .prefix("sp-pg-")
        .tempdir()
        .map_err(|e| format!("cannot make a directory for the cluster: {e}"))?
        .keep();
    let data_dir = base.join("data");
    let socket_dir = base.join("sock");
    std::fs::create_dir_all(&socket_dir).map_err(|e| format!("{}: {e}", socket_dir.display()))?;
    if let Some(user) = &run_as {
        let owner = nix::unistd::User::from_name(user)
            .ok()
            .flatten()
            .ok_or(format!("user {user} vanished"))?;
        for dir in [&base, &socket_dir] {
            nix::unistd::chown(dir.as_path(), Some(owner.uid), Some(owner.gid))
                .map_err(|e| format!("chown {}: {e}", dir.display()))?;
        }
    }
    let out = as_user(run_as.as_deref(), &bin_dir.join("initdb"))
        .arg("-D")
        .arg(&data_dir)
        .args([
            "-U",
            "saltpeter",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ])
        .output()
        .map_err(|e| format!("cannot run initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let tcp_port = match ssl {
        Some(ssl) => {
            configure_ssl(&data_dir, run_as.as_deref(), ssl)?;
            Some(free_tcp_port()?)
        }
        None => None,
    };
    // The watchdog: stops the server and removes the directory when our end of its
    // stdin closes, that is when this process exits.
    let pg_ctl = bin_dir.join("pg_ctl");
    let stop = match &run_as {
        Some(user) => format!(
            "runuser -u {user} -- {} -D {} -m immediate stop",
            pg_ctl.display(),
            data_dir.display()
        ),
        None => format!(
            "{} -D {} -m immediate stop",
            pg_ctl.display(),
            data_dir.display()
        ),
    };
    let mut watchdog = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "read _; {stop} >/dev/null 2>&1; rm -rf {}",
            base.display()
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the cluster's watchdog: {e}"))?;
    let stdin = watchdog.stdin.take().ok_or("watchdog without stdin")?;
    let cluster = PgCluster {
        socket_dir,
        data_dir,
        bin_dir,
        run_as,
        tcp_port,
        _watchdog: Mutex::new(stdin),
    };
    let out = cluster.pg_ctl(&start_args(
        &cluster.socket_dir,
        &cluster.data_dir,
        cluster.tcp_port,
    ));
    if !out.status.success() {
        let log = std::fs::read_to_string(base.join("server.log")).unwrap_or_default();
        return Err(format!(
            "the server did not start: {} {}",
            String::from_utf8_lossy(&out.stderr).trim(),
            log.trim()
        ));
    }
    Ok(cluster)
}
