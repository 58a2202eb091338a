//! A throwaway OpenSSH server for tests: Debian's `/usr/sbin/sshd` with a configuration
//! of its own (`-f`), in the foreground (`-D -e`), on loopback only, with a throwaway host
//! key and user key made by `ssh-keygen` in a temporary directory. The user key is
//! authorized for whoever runs the tests (root in CI; any user works: `StrictModes no`,
//! `UsePAM no`, the pid file in the temporary directory).
//!
//! [`Sshd::start`] serves one host, [`Sshd::start_hosts`] several: the same free port on
//! 127.0.0.1, 127.0.0.2, ... (loopback answers on all of 127/8), so each host is a
//! machine of its own name (`127.0.0.2:PORT`). The known-hosts file holds the host key for
//! every one of them (`[127.0.0.N]:PORT`); [`Sshd::executor_config`] is the ssh
//! executor's configuration that uses both files with strict host-key checking.
//!
//! [`Sshd::stop`] stops the listener (sessions already open go on, as they would on a
//! real host) and [`Sshd::start_again`] serves the same port with the same keys, for the
//! "sshd stopped in the middle of a run" scenarios. A watchdog shell holds a pipe from
//! the test process and stops the server when the process exits however it exits; drop
//! stops it too.
//!
//! Without sshd, ssh or ssh-keygen the tests fail saying what is missing, unless
//! `SALTPETER_TEST_SKIP` names `ssh` (`components.rs`): then they skip.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::components;

/// A running (or stopped) test sshd.
pub struct Sshd {
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// The loopback addresses it listens on.
    addrs: Vec<String>,
    sshd_bin: PathBuf,
    child: Option<Child>,
    watchdog: Option<Child>,
}

/// Where Debian puts the server (off a normal user's PATH).
fn find_sshd() -> Option<PathBuf> {
    let debian = PathBuf::from("/usr/sbin/sshd");
    if debian.is_file() {
        return Some(debian);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("sshd"))
        .find(|p| p.is_file())
}

fn in_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Whether the ssh tests run: `false` when `SALTPETER_TEST_SKIP` names `ssh`; fails the
/// test when sshd, ssh or ssh-keygen is missing.
pub fn available() -> bool {
    components::present_or_skipped(
        "ssh",
        || find_sshd().is_some() && in_path("ssh") && in_path("ssh-keygen"),
        "the ssh tests need /usr/sbin/sshd, ssh and ssh-keygen (Debian: apt-get install \
         openssh-server openssh-client)",
    )
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn keygen(path: &Path) {
    run(Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "saltpeter-test",
            "-f",
        ])
        .arg(path));
}

/// A port free on every address.
fn free_port(addrs: &[String]) -> u16 {
    for _ in 0..50 {
        let first = std::net::TcpListener::bind((addrs[0].as_str(), 0)).expect("bind");
        let port = first.local_addr().expect("addr").port();
        let all_free = addrs[1..]
            .iter()
            .all(|a| std::net::TcpListener::bind((a.as_str(), port)).is_ok());
        if all_free {
            return port;
        }
    }
    panic!("no port free on all of {addrs:?}");
}

impl Sshd {
    /// One host, 127.0.0.1 on a free port; `None` when the ssh tests are skipped.
    pub fn start() -> Option<Sshd> {
        Sshd::start_hosts(1)
    }

    /// `hosts` hosts: 127.0.0.1 to 127.0.0.N, on one free port.
    pub fn start_hosts(hosts: usize) -> Option<Sshd> {
        if !available() {
            return None;
        }
        assert!((1..=200).contains(&hosts), "1 to 200 hosts");
        let sshd_bin = find_sshd()?;
        let dir = tempfile::tempdir().expect("tempdir");
        let addrs: Vec<String> = (1..=hosts).map(|n| format!("127.0.0.{n}")).collect();
        let port = free_port(&addrs);
        keygen(&dir.path().join("host_key"));
        keygen(&dir.path().join("id_ed25519"));
        let user_key =
            std::fs::read_to_string(dir.path().join("id_ed25519.pub")).expect("user key");
        std::fs::write(dir.path().join("authorized_keys"), user_key).expect("authorized_keys");
        let host_key = std::fs::read_to_string(dir.path().join("host_key.pub")).expect("host key");
        let host_key: Vec<&str> = host_key.split_whitespace().take(2).collect();
        let known: String = addrs
            .iter()
            .map(|a| format!("[{a}]:{port} {}\n", host_key.join(" ")))
            .collect();
        std::fs::write(dir.path().join("known_hosts"), known).expect("known_hosts");
        let d = dir.path().display();
        // sshd listens on at most 16 sockets (MAX_LISTEN_SOCKS): more hosts share the
        // wildcard address, which every 127.0.0.N reaches (key authentication only).
        let mut config: String = if addrs.len() > 16 {
            format!("ListenAddress 0.0.0.0:{port}\n")
        } else {
            addrs
                .iter()
                .map(|a| format!("ListenAddress {a}:{port}\n"))
                .collect()
        };
        config.push_str(&format!(
            "HostKey {d}/host_key\nPidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\n\
             StrictModes no\nUsePAM no\nPubkeyAuthentication yes\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
             PrintMotd no\nPrintLastLog no\nUseDNS no\nLogLevel VERBOSE\n\
             MaxStartups 200\nMaxSessions 50\n"
        ));
        std::fs::write(dir.path().join("sshd_config"), config).expect("sshd_config");
        if nix::unistd::geteuid().is_root() {
            // sshd's privilege separation directory (systemd-tmpfiles makes it at boot).
            std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
        }
        let mut sshd = Sshd {
            dir,
            port,
            addrs,
            sshd_bin,
            child: None,
            watchdog: None,
        };
        sshd.start_again();
        Some(sshd)
    }

    /// Serve again (after [`Sshd::stop`]) on the same port with the same keys; returns
    /// once every address accepts connections.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "sshd is running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("sshd.log"))
            .expect("log");
        let err = log.try_clone().expect("log");
        // sshd re-executes itself and wants its absolute path.
        let child = Command::new(&self.sshd_bin)
            .args(["-D", "-e", "-f"])
            .arg(self.dir.path().join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .expect("start sshd");
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(format!("read x; kill -TERM {} 2>/dev/null", child.id()))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("watchdog");
        self.child = Some(child);
        self.watchdog = Some(watchdog);
        let started = Instant::now();
        for addr in &self.addrs {
            while std::net::TcpStream::connect((addr.as_str(), self.port)).is_err() {
                if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                    panic!("sshd exited at start ({status}):\n{}", self.log());
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "sshd does not listen on {addr}:{}:\n{}",
                    self.port,
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// The listening sshd's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stop the listener (open sessions go on).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = child.wait();
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }

    /// The host specs, `127.0.0.N:PORT`, one per host.
    pub fn hosts(&self) -> Vec<String> {
        self.addrs
            .iter()
            .map(|a| format!("{a}:{}", self.port))
            .collect()
    }

    /// The first host's spec.
    pub fn host(&self) -> String {
        format!("{}:{}", self.addrs[0], self.port)
    }

    /// The private key authorized for the current user.
    pub fn identity_file(&self) -> PathBuf {
        self.dir.path().join("id_ed25519")
    }

    /// The host key of every host.
    pub fn known_hosts_file(&self) -> PathBuf {
        self.dir.path().join("known_hosts")
    }

    /// The ssh executor's `config` for this server: its key, its known hosts, strict
    /// host-key checking, a short connect timeout.
    pub fn executor_config(&self) -> serde_json::Value {
        serde_json::json!({
            "identity_file": self.identity_file(),
            "known_hosts_file": self.known_hosts_file(),
            "ssh_options": ["StrictHostKeyChecking=yes"],
            "connect_timeout": 5,
        })
    }

    /// The server's log (`-e`: everything it says).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.stop();
    }
}
