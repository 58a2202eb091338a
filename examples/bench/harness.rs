//! A real daemon for one scenario: its own directories under a temporary root, the release
//! binaries, READY=1 on a notify socket, `saltpeterctl --json` for questions, SIGTERM at
//! the end. Everything a scenario measures goes through these public interfaces.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::BenchError;

/// The settings every benchmark daemon uses: loopback ports, plain WebSocket (both ends
/// are on this machine), the local executor, logs at `info`.
pub const BASE_CONFIG: &str = "saltpeter_config:\n  machines_ws_port: 0\n  \
machines_ws_bind_addr: 127.0.0.1\n  default_saltpeter_server_host: 127.0.0.1\n  \
executor: local\n  tls: false\n";

/// Where the binaries under test are.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub dir: PathBuf,
}

impl Binaries {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn check(&self) -> Result<(), BenchError> {
        for name in ["saltpeter-daemon", "saltpeterctl", "saltpeter-wrapper"] {
            let p = self.path(name);
            if !p.is_file() {
                return Err(BenchError::Setup(format!(
                    "{} is missing (build with `cargo build --release --bins`)",
                    p.display()
                )));
            }
        }
        Ok(())
    }
}

pub struct Daemon {
    pub root: tempfile::TempDir,
    bins: Binaries,
    child: Option<Child>,
    notify: UnixDatagram,
    pub log: PathBuf,
    /// More environment for the daemon (e.g. `SALTPETER_SIMULATED_FLEET=1`).
    pub env: Vec<(String, String)>,
}

/// A TCP port free right now on loopback (for a daemon that keeps its wrapper port
/// across a restart, as a production daemon does).
pub fn free_port() -> Result<u16, BenchError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(BenchError::io("free port"))
}

/// Poll `f` every 50 ms until it answers or `deadline` passes.
pub fn wait_until<T>(
    what: &str,
    deadline: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Result<T, BenchError> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if start.elapsed() > deadline {
            return Err(BenchError::Timeout(what.to_string()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Daemon {
    /// A fresh root with `files` (name, YAML) in its configuration directory.
    pub fn prepare(bins: &Binaries, files: &[(&str, &str)]) -> Result<Daemon, BenchError> {
        let root = tempfile::Builder::new()
            .prefix("sp-bench-")
            .tempdir()
            .map_err(|e| BenchError::Setup(format!("temporary directory: {e}")))?;
        let config = root.path().join("config");
        std::fs::create_dir_all(&config).map_err(BenchError::io("config dir"))?;
        std::fs::write(config.join("00-base.yaml"), BASE_CONFIG)
            .map_err(BenchError::io("config"))?;
        for (name, text) in files {
            std::fs::write(config.join(name), text).map_err(BenchError::io("config"))?;
        }
        let notify = UnixDatagram::bind(root.path().join("notify.sock"))
            .map_err(BenchError::io("notify socket"))?;
        notify
            .set_read_timeout(Some(Duration::from_millis(200)))
            .map_err(BenchError::io("notify socket"))?;
        let log = root.path().join("daemon.log");
        Ok(Daemon {
            root,
            bins: bins.clone(),
            child: None,
            notify,
            log,
            env: Vec::new(),
        })
    }

    pub fn start(bins: &Binaries, files: &[(&str, &str)]) -> Result<Daemon, BenchError> {
        let mut d = Daemon::prepare(bins, files)?;
        d.spawn()?;
        d.wait_ready()?;
        Ok(d)
    }

    pub fn config_dir(&self) -> PathBuf {
        self.root.path().join("config")
    }

    pub fn dir(&self) -> &Path {
        self.root.path()
    }

    pub fn write_config(&self, name: &str, text: &str) -> Result<(), BenchError> {
        std::fs::write(self.config_dir().join(name), text).map_err(BenchError::io("config"))
    }

    pub fn spawn(&mut self) -> Result<(), BenchError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(BenchError::io("daemon log"))?;
        let err = log.try_clone().map_err(BenchError::io("daemon log"))?;
        let root = self.root.path();
        let child = Command::new(self.bins.path("saltpeter-daemon"))
            .arg("--config")
            .arg(root.join("config"))
            .arg("--state-dir")
            .arg(root.join("state"))
            .arg("--runtime-dir")
            .arg(root.join("run"))
            .env("NOTIFY_SOCKET", root.join("notify.sock"))
            .env_remove("INVOCATION_ID")
            .env_remove("JOURNAL_STREAM")
            .env(
                "RUST_LOG",
                std::env::var("SP_BENCH_RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(BenchError::io("start saltpeter-daemon"))?;
        self.child = Some(child);
        Ok(())
    }

    /// Wait for READY=1; returns how long it took.
    pub fn wait_ready(&mut self) -> Result<Duration, BenchError> {
        let start = Instant::now();
        let mut buf = [0u8; 4096];
        loop {
            if let Ok(n) = self.notify.recv(&mut buf)
                && String::from_utf8_lossy(&buf[..n])
                    .lines()
                    .any(|l| l == "READY=1")
            {
                return Ok(start.elapsed());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(BenchError::Daemon(format!(
                    "exited before READY ({status}); log: {}",
                    self.log_tail()
                )));
            }
            if start.elapsed() > Duration::from_secs(120) {
                return Err(BenchError::Timeout("READY=1".into()));
            }
        }
    }

    /// The last lines of the daemon's log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    pub fn ctl(&self, args: &[&str]) -> Result<Output, BenchError> {
        Command::new(self.bins.path("saltpeterctl"))
            .arg("--socket")
            .arg(self.root.path().join("run/admin.sock"))
            .args(args)
            .output()
            .map_err(BenchError::io("run saltpeterctl"))
    }

    /// `saltpeterctl --json ARGS`, parsed.
    pub fn ctl_json(&self, args: &[&str]) -> Result<Value, BenchError> {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = self.ctl(&full)?;
        if !out.status.success() {
            return Err(BenchError::Daemon(format!(
                "saltpeterctl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        serde_json::from_slice(&out.stdout)
            .map_err(|e| BenchError::Daemon(format!("saltpeterctl {args:?} printed no JSON: {e}")))
    }

    /// `(role, pid)` of every daemon process, the supervisor included.
    pub fn processes(&self) -> Result<Vec<(String, u32)>, BenchError> {
        let status = self.ctl_json(&["status"])?;
        let mut out = Vec::new();
        for p in status["processes"].as_array().into_iter().flatten() {
            if let (Some(role), Some(pid)) = (p["role"].as_str(), p["pid"].as_u64()) {
                out.push((role.to_string(), pid as u32));
            }
        }
        if !out.iter().any(|(_, p)| *p == self.pid()) {
            out.insert(0, ("supervisor".to_string(), self.pid()));
        }
        Ok(out)
    }

    pub fn pid_of(&self, role: &str) -> Result<u32, BenchError> {
        self.processes()?
            .into_iter()
            .find(|(r, _)| r == role)
            .map(|(_, p)| p)
            .ok_or_else(|| BenchError::Daemon(format!("no {role} process in `status`")))
    }

    pub fn wrapper_port(&self) -> Result<u16, BenchError> {
        self.ctl_json(&["status"])?["wrapper_port"]
            .as_u64()
            .map(|p| p as u16)
            .ok_or_else(|| BenchError::Daemon("`status` has no wrapper_port".into()))
    }

    /// Start `job` now; the run id.
    pub fn run_now(&self, job: &str) -> Result<u64, BenchError> {
        self.ctl_json(&["run", job])?["run"]
            .as_u64()
            .ok_or_else(|| BenchError::Daemon(format!("`run {job}` printed no run id")))
    }

    pub fn run_record(&self, run: u64) -> Result<Value, BenchError> {
        self.ctl_json(&["show-run", &run.to_string()])
    }

    /// Runs of `job`, newest first.
    pub fn runs(&self, job: &str) -> Result<Vec<Value>, BenchError> {
        Ok(self
            .ctl_json(&["runs", job, "--limit", "5000"])?
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// Wait for run `run` to end; returns its record.
    pub fn wait_run_final(&self, run: u64, deadline: Duration) -> Result<Value, BenchError> {
        wait_until(&format!("run {run} to finish"), deadline, || {
            self.run_record(run).ok().filter(is_final)
        })
    }

    /// An ordered stop: SIGTERM, and KILL if it has not exited within `grace`. The
    /// wrappers it launched are left alone (a restart on the same state takes them back).
    /// Ok(false) when it had to be killed.
    pub fn terminate(&mut self, grace: Duration) -> Result<bool, BenchError> {
        let Some(mut child) = self.child.take() else {
            return Ok(true);
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < grace {
            match child.try_wait() {
                Ok(Some(_)) => return Ok(true),
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(BenchError::io("wait for saltpeter-daemon")(e)),
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        Ok(false)
    }

    /// Stop with SIGTERM (KILL after 20 s), then end the wrappers it left.
    pub fn stop(&mut self) {
        let _ = self.terminate(Duration::from_secs(20));
        // Wrappers outlive their daemon by design (they retry for a day); the ones this
        // daemon started log under its root, and a benchmark leaves none behind.
        let root = self.root.path().to_string_lossy().into_owned();
        for pid in crate::procstat::pids_with(&root) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
        // SP_BENCH_KEEP_LOGS=DIR: keep each daemon's log there (its temporary root goes).
        if let Some(dir) = std::env::var_os("SP_BENCH_KEEP_LOGS") {
            let dir = PathBuf::from(dir);
            let name = self
                .root
                .path()
                .file_name()
                .map(|n| format!("{}.log", n.to_string_lossy()))
                .unwrap_or_else(|| "daemon.log".into());
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::copy(&self.log, dir.join(name));
        }
    }
}

pub fn is_final(run: &Value) -> bool {
    matches!(
        run["state"].as_str(),
        Some("succeeded" | "failed" | "partial" | "canceled" | "skipped")
    )
}

/// Unix milliseconds of an RFC 3339 field.
pub fn ms(v: &Value) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.timestamp_millis())
}
