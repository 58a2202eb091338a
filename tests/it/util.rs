//! Test harness: temporary directories, a real daemon process, `saltpeterctl` runs.

#![allow(dead_code)]

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const DAEMON: &str = env!("CARGO_BIN_EXE_saltpeter-daemon");
pub const CTL: &str = env!("CARGO_BIN_EXE_saltpeterctl");
pub const CLEANUP: &str = env!("CARGO_BIN_EXE_saltpeter-cleanup");
pub const WRAPPER: &str = env!("CARGO_BIN_EXE_saltpeter-wrapper");

/// Generous deadline used only to detect hangs.
pub const HANG: Duration = Duration::from_secs(60);

/// `saltpeter_config` every test daemon uses: an ephemeral wrapper port, the local
/// executor, fast heartbeats.
pub const BASE_CONFIG: &str = "saltpeter_config:\n  machines_ws_port: 0\n  machines_ws_bind_addr: 127.0.0.1\n  default_saltpeter_server_host: 127.0.0.1\n  executor: local\n  tls: false\n";

pub struct Daemon {
    pub root: tempfile::TempDir,
    pub child: Option<Child>,
    notify: UnixDatagram,
    pub log: PathBuf,
}

/// The time `v[key]` holds (RFC 3339), to compare as a time, not as text: a time on a
/// whole second is written without its `.000`.
pub fn time_at(v: &Value, key: &str) -> chrono::DateTime<chrono::FixedOffset> {
    let text = v[key].as_str().unwrap_or_else(|| panic!("{key}: {v}"));
    chrono::DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

pub fn wait_until<T>(what: &str, deadline: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Daemon {
    pub fn config_dir(&self) -> PathBuf {
        self.root.path().join("config")
    }
    pub fn state_dir(&self) -> PathBuf {
        self.root.path().join("state")
    }
    pub fn runtime_dir(&self) -> PathBuf {
        self.root.path().join("run")
    }
    pub fn socket(&self) -> PathBuf {
        self.runtime_dir().join("admin.sock")
    }

    /// A fresh directory with `files` (name, YAML) in its config dir; not started yet.
    pub fn prepare(files: &[(&str, &str)]) -> Daemon {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(root.path().join("config")).expect("config dir");
        std::fs::write(root.path().join("config/00-base.yaml"), BASE_CONFIG).expect("base");
        for (name, text) in files {
            std::fs::write(root.path().join("config").join(name), text).expect("config file");
        }
        let notify = UnixDatagram::bind(root.path().join("notify.sock")).expect("notify socket");
        notify
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        let log = root.path().join("daemon.log");
        Daemon {
            root,
            child: None,
            notify,
            log,
        }
    }

    pub fn start(files: &[(&str, &str)]) -> Daemon {
        let mut d = Daemon::prepare(files);
        d.spawn();
        d.wait_ready();
        d
    }

    pub fn command(&self) -> Command {
        let mut cmd = Command::new(DAEMON);
        cmd.arg("--config")
            .arg(self.config_dir())
            .arg("--state-dir")
            .arg(self.state_dir())
            .arg("--runtime-dir")
            .arg(self.runtime_dir())
            .env("NOTIFY_SOCKET", self.root.path().join("notify.sock"))
            .env_remove("INVOCATION_ID")
            .env_remove("JOURNAL_STREAM")
            .env("RUST_LOG", "debug");
        cmd
    }

    pub fn spawn(&mut self) {
        self.spawn_with_env(&[]);
    }

    /// As [`Daemon::spawn`], with `env` added to the daemon's environment (its local
    /// wrappers inherit it).
    pub fn spawn_with_env(&mut self, env: &[(&str, &str)]) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let err = log.try_clone().expect("log clone");
        let child = self
            .command()
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .expect("start daemon");
        self.child = Some(child);
    }

    /// Wait for READY=1 on the notify socket; returns how long it took.
    pub fn wait_ready(&mut self) -> Duration {
        let start = Instant::now();
        let mut buf = [0u8; 4096];
        loop {
            if let Ok(n) = self.notify.recv(&mut buf)
                && String::from_utf8_lossy(&buf[..n])
                    .lines()
                    .any(|l| l == "READY=1")
            {
                return start.elapsed();
            }
            if let Some(status) = self.try_status() {
                panic!(
                    "daemon exited before READY ({status}):\n{}",
                    self.log_text()
                );
            }
            assert!(start.elapsed() < HANG, "no READY=1:\n{}", self.log_text());
        }
    }

    /// The lines the daemon sent to its notify socket within `wait` (after READY=1).
    pub fn notify_lines(&self, wait: Duration) -> Vec<String> {
        let start = Instant::now();
        let mut lines = Vec::new();
        let mut buf = [0u8; 4096];
        while start.elapsed() < wait {
            if let Ok(n) = self.notify.recv(&mut buf) {
                lines.extend(
                    String::from_utf8_lossy(&buf[..n])
                        .lines()
                        .map(str::to_string),
                );
            }
        }
        lines
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the daemon's log, for a failure message.
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).expect("started")
    }

    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn wait_exit(&mut self) -> ExitStatus {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.try_status() {
                break status;
            }
            assert!(
                start.elapsed() < HANG,
                "timed out waiting for daemon exit:\n{}",
                self.log_tail(60)
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        self.child = None;
        status
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, sig).expect("signal daemon");
    }

    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(CTL)
            .arg("--socket")
            .arg(self.socket())
            .args(args)
            .output()
            .expect("run saltpeterctl")
    }

    /// Run `saltpeterctl --json ARGS`, expect success, parse the JSON.
    pub fn ctl_json(&self, args: &[&str]) -> Value {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = self.ctl(&full);
        assert!(
            out.status.success(),
            "saltpeterctl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log_text()
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "saltpeterctl {args:?} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// The pid of the daemon's process of `role` (`supervisor`, `hub`, ...).
    pub fn pid_of(&self, role: &str) -> u32 {
        self.processes()
            .into_iter()
            .find(|(r, _)| r == role)
            .map(|(_, pid)| pid)
            .unwrap_or_else(|| panic!("no {role} process"))
    }

    /// `(role, pid)` of every process, from `status --json`.
    pub fn processes(&self) -> Vec<(String, u32)> {
        let status = self.ctl_json(&["status"]);
        status["processes"]
            .as_array()
            .expect("processes array")
            .iter()
            .map(|p| {
                (
                    p["role"].as_str().expect("role").to_string(),
                    p["pid"].as_u64().expect("pid") as u32,
                )
            })
            .collect()
    }

    /// Run `saltpeter-cleanup` on this daemon's directories (as ExecStartPre would).
    pub fn cleanup(&self) -> Output {
        Command::new(CLEANUP)
            .arg("--config")
            .arg(self.config_dir())
            .arg("--state-dir")
            .arg(self.state_dir())
            .arg("--runtime-dir")
            .arg(self.runtime_dir())
            .output()
            .expect("run saltpeter-cleanup")
    }

    /// `saltpeter-cleanup`, which must succeed (its stderr is the failure message).
    pub fn cleaned_up(&self) {
        let out = self.cleanup();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Back after a stop or a crash, as systemd brings it: cleanup, start, until ready.
    pub fn start_again(&mut self) {
        self.cleaned_up();
        self.spawn();
        self.wait_ready();
    }

    pub fn write_config(&self, name: &str, text: &str) {
        std::fs::write(self.config_dir().join(name), text).expect("write config");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(15) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if !matches!(child.try_wait(), Ok(Some(_))) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // Local wrappers outlive their daemon by design (a day at most, holding an exit
        // they could not report): the test's own go with it, and their commands too.
        let state = format!("{}/", self.root.path().display());
        for pid in pids_with(&state) {
            let is_wrapper = std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("saltpeter-wrapper"));
            if is_wrapper {
                // The command leads a process group of its own.
                for group in children_of(pid).into_iter().chain([pid]) {
                    let group = nix::unistd::Pid::from_raw(group as i32);
                    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
                    let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
                }
            }
        }
    }
}

/// The parent of `pid`, from `/proc/PID/stat`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The processes whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| parent_of(*pid) == Some(parent))
        .collect()
}

pub fn alive(pid: u32) -> bool {
    // A zombie is dead for our purposes.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// `saltpeterctl config check` on a directory holding `file` with `text`: whether it
/// passed, and everything it printed.
pub fn config_check(file: &str, text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(dir.path().join(file), text).expect("write the configuration");
    let out = Command::new(CTL)
        .args(["config", "check"])
        .arg(dir.path())
        .output()
        .expect("run saltpeterctl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Timing settings for job tests: fast heartbeats and pickup.
pub const FAST: &str =
    "saltpeter_config:\n  heartbeat: 1\n  pickup_timeout: 5\n  hello_timeout: 2\n";

impl Daemon {
    /// Runs of `job`, newest first, as `runs --json` prints them.
    pub fn runs(&self, job: &str) -> Vec<Value> {
        let v = self.ctl_json(&["runs", job, "--limit", "5000"]);
        v.as_array().cloned().unwrap_or_default()
    }

    /// Wait until `job` has `n` runs in a final state; returns them oldest first.
    pub fn wait_final_runs(&self, job: &str, n: usize) -> Vec<Value> {
        wait_until(&format!("{n} finished runs of {job}"), HANG, || {
            let mut done: Vec<Value> = self.runs(job).into_iter().filter(is_final).collect();
            done.reverse();
            (done.len() >= n).then_some(done)
        })
    }

    /// Start `job` now and wait for the finished run object.
    pub fn run_wait(&self, job: &str) -> (Value, i32) {
        let out = self.ctl(&["--json", "run", job, "--wait"]);
        let code = out.status.code().unwrap_or(-1);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "run --wait printed no JSON ({e}): {}{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.log_text()
            )
        });
        (v, code)
    }

    /// Start `job` now; returns the run id.
    pub fn run_now(&self, job: &str) -> u64 {
        let v = self.ctl_json(&["run", job]);
        v["run"].as_u64().expect("run id")
    }

    pub fn run_record(&self, run: u64) -> Value {
        self.ctl_json(&["show-run", &run.to_string()])
    }

    pub fn wait_run_final(&self, run: u64) -> Value {
        wait_until(&format!("run {run} to finish"), HANG, || {
            let r = self.run_record(run);
            is_final(&r).then_some(r)
        })
    }

    pub fn output(&self, run: u64, machine: &str) -> String {
        let out = self.ctl(&["output", &run.to_string(), machine]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn wrapper_port(&self) -> u16 {
        self.ctl_json(&["status"])["wrapper_port"]
            .as_u64()
            .expect("wrapper_port") as u16
    }
}

pub fn is_final(run: &Value) -> bool {
    matches!(
        run["state"].as_str(),
        Some("succeeded" | "failed" | "partial" | "canceled" | "skipped")
    )
}

/// The target object of `machine` in a run object.
pub fn target<'a>(run: &'a Value, machine: &str) -> &'a Value {
    run["targets"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["machine"] == machine))
        .unwrap_or_else(|| panic!("no target {machine} in {run}"))
}

/// Pids of processes whose command line contains `needle`.
pub fn pids_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) && alive(pid) {
                out.push(pid);
            }
        }
    }
    out
}

/// Pids of wrappers of `run` on `machine` (from their environment).
pub fn wrapper_pids(run: u64, machine: &str) -> Vec<u32> {
    pids_with("saltpeter-wrapper")
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| {
                    let env = String::from_utf8_lossy(&env);
                    env.split('\0').any(|v| v == format!("SP_RUN={run}"))
                        && env
                            .split('\0')
                            .any(|v| v == format!("SP_MACHINE={machine}"))
                })
                .unwrap_or(false)
        })
        .collect()
}

/// A TCP port free right now (for daemons that must keep their wrapper port across a
/// restart, as a production daemon does).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `saltpeter_config` with a fixed wrapper port.
pub fn fixed_port_config() -> String {
    format!("saltpeter_config:\n  machines_ws_port: {}\n", free_port())
}

/// A TCP proxy between wrappers and the daemon that can cut every connection (and refuse
/// new ones) for a while.
pub struct Proxy {
    pub port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Proxy {
    pub fn start(upstream: u16) -> Proxy {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let port = listener.local_addr().expect("addr").port();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (c, o) = (cut.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if c.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let pipe = |mut from: std::net::TcpStream, mut to: std::net::TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                };
                if let (Ok(c1), Ok(s1)) = (client.try_clone(), server.try_clone()) {
                    if let Ok(mut list) = o.lock() {
                        list.push(c1);
                        list.push(s1);
                    }
                    pipe(
                        client.try_clone().expect("clone"),
                        server.try_clone().expect("clone"),
                    );
                    pipe(server, client);
                }
            }
        });
        Proxy { port, cut, open }
    }

    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Ok(mut list) = self.open.lock() {
            for s in list.drain(..) {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    pub fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A TCP connection to `port` from a chosen loopback source address (127.0.0.0/8 is all
/// local on Linux), so a test can be two clients.
pub fn connect_from(src: std::net::Ipv4Addr, port: u16) -> std::net::TcpStream {
    use nix::libc;
    use std::net::{Ipv4Addr, TcpStream};
    use std::os::fd::FromRawFd;
    let sockaddr = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor this function owns, with addresses that
    // live across the calls; the TcpStream takes the descriptor over at the end.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket");
        let from = sockaddr(src, 0);
        let rc = libc::bind(fd, (&raw const from).cast(), len);
        assert_eq!(rc, 0, "bind {src}");
        let to = sockaddr(Ipv4Addr::LOCALHOST, port);
        let rc = libc::connect(fd, (&raw const to).cast(), len);
        assert_eq!(rc, 0, "connect to port {port}");
        TcpStream::from_raw_fd(fd)
    }
}

/// A plain-text WebSocket client on a daemon's wrapper port (the tests run with
/// `tls: false`).
pub fn wrapper_ws(port: u16) -> tungstenite::WebSocket<std::net::TcpStream> {
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("tcp connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let url = format!("ws://127.0.0.1:{port}/wrapper/v1");
    let (ws, _) = tungstenite::client(url, stream).expect("websocket handshake");
    ws
}

/// The next control message from the hub, skipping pings; `None` once the link closed.
pub fn next_json(ws: &mut tungstenite::WebSocket<std::net::TcpStream>) -> Option<Value> {
    loop {
        match ws.read() {
            Ok(tungstenite::Message::Text(t)) => return serde_json::from_str(t.as_str()).ok(),
            Ok(tungstenite::Message::Close(_)) | Err(_) => return None,
            Ok(_) => continue,
        }
    }
}

/// When `@yearly` fires next, by the same calendar rule (1 January, 00:00 UTC), as the
/// API prints it: after `before` (read before the daemon answered) or, if the year turned
/// meanwhile, after now.
pub fn next_yearly(before: chrono::DateTime<chrono::Utc>) -> [String; 2] {
    use chrono::Datelike;
    let after = |t: chrono::DateTime<chrono::Utc>| format!("{}-01-01T00:00:00Z", t.year() + 1);
    [after(before), after(chrono::Utc::now())]
}
