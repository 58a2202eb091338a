//! The first five minutes: `scripts/quickstart` serves the dashboard and tells how to use
//! it, `saltpeterctl` finds its socket from the env file it prints, and `saltpeterctl`
//! writing into a closed pipe (`| head`) ends quietly.

use std::io::{BufRead, BufReader};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use crate::api::client;
use crate::util::*;

struct Quickstart {
    child: Child,
    home: tempfile::TempDir,
    lines: Vec<String>,
}

impl Drop for Quickstart {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Quickstart {
    /// `scripts/quickstart` on the test's binaries and free ports, until it printed its
    /// Ctrl-C line; its output is kept for the checks.
    fn start(api_port: u16) -> Quickstart {
        let home = tempfile::tempdir().expect("tempdir");
        let bin_dir = Path::new(DAEMON).parent().expect("bin dir");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/quickstart");
        let mut child = Command::new(script)
            .env("SALTPETER_HOME", home.path())
            .env("SALTPETER_RUN", home.path().join("run"))
            .env("SALTPETER_BIN_DIR", bin_dir)
            .env("SALTPETER_API_PORT", api_port.to_string())
            .env("SALTPETER_WRAPPER_PORT", free_port().to_string())
            .env_remove("SALTPETER_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start scripts/quickstart");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut lines = Vec::new();
        wait_until("the quick start's instructions", HANG, || {
            while let Ok(line) = rx.try_recv() {
                lines.push(line);
            }
            lines.iter().any(|l| l.contains("Ctrl-C")).then_some(())
        });
        Quickstart { child, home, lines }
    }

    fn line_with(&self, needle: &str) -> &str {
        self.lines
            .iter()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in {:?}", self.lines))
    }

    /// `SALTPETER_SOCKET` as the printed env file sets it.
    fn socket_from_env_file(&self) -> PathBuf {
        let env_file = self.home.path().join("env");
        let text = std::fs::read_to_string(&env_file).expect("env file");
        let value = text
            .trim()
            .strip_prefix("export SALTPETER_SOCKET=")
            .unwrap_or_else(|| panic!("env file: {text}"));
        PathBuf::from(value)
    }
}

#[test]
fn quickstart_serves_the_dashboard_and_says_how_to_use_it() {
    let api_port = free_port();
    let qs = Quickstart::start(api_port);
    let url = format!("http://127.0.0.1:{api_port}/");
    assert!(qs.line_with("dashboard:").ends_with(&url), "{:?}", qs.lines);
    let token_file = qs.home.path().join("api-token");
    assert!(
        qs.line_with("log in")
            .contains(&token_file.display().to_string()),
        "{:?}",
        qs.lines
    );
    let token = std::fs::read_to_string(&token_file).expect("token file");
    assert!(token.len() >= 32, "a long random token");
    assert!(
        !qs.lines.iter().any(|l| l.contains(&token)),
        "the token itself is never printed"
    );

    // The dashboard page, as a browser asks for it.
    let page = wait_until("the dashboard page", HANG, || {
        std::net::TcpStream::connect(("127.0.0.1", api_port)).ok()?;
        Some(client::request(api_port, "GET", "/", &[], b""))
    });
    assert_eq!(page.status, 200, "{}", page.text());
    assert!(
        page.text().contains("<title>Saltpeter</title>"),
        "{}",
        page.text()
    );

    // The token logs in: the example jobs are there.
    let auth = format!("Bearer {token}");
    let jobs = client::request(
        api_port,
        "GET",
        "/api/v1/jobs",
        &[("Authorization", &auth)],
        b"",
    );
    assert_eq!(jobs.status, 200, "{}", jobs.text());
    assert!(jobs.text().contains("\"hello\""), "{}", jobs.text());

    // saltpeterctl with the env file's socket and no --socket.
    let socket = qs.socket_from_env_file();
    let out = Command::new(CTL)
        .arg("jobs")
        .env("SALTPETER_SOCKET", &socket)
        .output()
        .expect("saltpeterctl");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("slow_and_batched"), "{stdout}");

    // A reader that is gone: no panic, no message, status 0.
    let out = ctl_into_closed_pipe(&["jobs"], Some(&socket));
    assert_eq!(out.0, Some(0), "stderr: {}", out.1);
    assert_eq!(out.1, "", "nothing on stderr for a closed pipe");
}

/// Runs saltpeterctl with standard output a pipe whose reading end is already closed:
/// every write fails with EPIPE, as after `| head` has read what it wanted.
fn ctl_into_closed_pipe(args: &[&str], socket: Option<&Path>) -> (Option<i32>, String) {
    let (read_end, write_end): (OwnedFd, OwnedFd) = nix::unistd::pipe().expect("pipe");
    drop(read_end);
    let mut cmd = Command::new(CTL);
    cmd.args(args)
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped());
    if let Some(socket) = socket {
        cmd.env("SALTPETER_SOCKET", socket);
    }
    let out = cmd.output().expect("saltpeterctl");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn saltpeterctl_into_a_closed_pipe_ends_quietly() {
    for args in [
        &["completions", "bash"][..],
        &["manpage"][..],
        &["schedule", "next", "--expr", "* * * * *", "--count", "100"][..],
        &["--json", "schedule", "next", "--expr", "* * * * *"][..],
    ] {
        let (code, stderr) = ctl_into_closed_pipe(args, None);
        assert_eq!(code, Some(0), "saltpeterctl {args:?}: {stderr}");
        assert_eq!(stderr, "", "saltpeterctl {args:?}");
    }
}
