//! `saltpeter-executor-ssh` against a real OpenSSH server (tests/support/sshd.rs), run as
//! the daemon runs it: `PluginSpec::command` (clean environment, own process group) and
//! `runner::run` with the request on stdin, its output read by `protocol::read_output`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use saltpeter::executor::protocol::{self, Op, PluginLine, RawOutput, Reading};
use saltpeter::executor::runner;
use saltpeter::executor::spec::PluginSpec;
use serde_json::{Value, json};

use crate::sshd::{self, Sshd};
use crate::util::{DAEMON, HANG, alive, wait_until};

const PLUGIN: &str = env!("CARGO_BIN_EXE_saltpeter-executor-ssh");

fn plugin(config: &Value) -> PluginSpec {
    PluginSpec {
        name: "ssh".to_string(),
        path: PathBuf::from(PLUGIN),
        sha256: None,
        config: config.to_string(),
        timeout_s: 60,
    }
}

/// One operation as the daemon runs it; it must keep the protocol.
fn op(config: &Value, op: Op, args: Value) -> (Reading, RawOutput) {
    let spec = plugin(config);
    let request = protocol::request_line(op, "ssh", &spec.config_value(), args);
    let raw = runner::run(
        spec.command(Path::new(DAEMON)),
        request.as_bytes(),
        spec.deadline(op, 10),
    )
    .expect("start the plugin");
    let reading = protocol::read_output(op, &raw);
    assert_eq!(
        reading.breach,
        None,
        "{op}: stdout {}\nstderr {}",
        String::from_utf8_lossy(&raw.stdout),
        String::from_utf8_lossy(&raw.stderr)
    );
    (reading, raw)
}

/// Each machine's progress lines as `kind` or `kind: reason`.
fn progress(reading: &Reading) -> BTreeMap<String, Vec<String>> {
    let mut by_machine: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in &reading.progress {
        let (machine, said) = match line {
            PluginLine::Launched { machine } => (machine, "launched".to_string()),
            PluginLine::Deployed { machine } => (machine, "deployed".to_string()),
            PluginLine::Reachable { machine } => (machine, "reachable".to_string()),
            PluginLine::Killed { machine } => (machine, "killed".to_string()),
            PluginLine::Failed { machine, reason } => (machine, format!("failed: {reason}")),
            PluginLine::Unreachable { machine, reason } => {
                (machine, format!("unreachable: {reason}"))
            }
            other => panic!("not a progress line: {other:?}"),
        };
        by_machine.entry(machine.clone()).or_default().push(said);
    }
    by_machine
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    crate::util::free_port()
}

#[test]
fn run_by_hand_it_says_what_it_is_and_exits_2() {
    let out = Command::new(PLUGIN)
        .env_remove("SALTPETER_EXECUTOR_PROTOCOL")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("saltpeter-executor-ssh")
            && stderr.contains("a Saltpeter executor plugin, protocol 1, run by saltpeter-daemon"),
        "{stderr}"
    );
}

#[test]
fn describe_lists_the_keys_and_target_types() {
    if !sshd::available() {
        return;
    }
    let (reading, _) = op(&json!({}), Op::Describe, json!({}));
    let hello = reading.hello.clone().expect("hello");
    assert_eq!(hello.name, "ssh");
    assert_eq!(hello.capabilities, vec!["deploy", "kill"]);
    let result = reading.outcome().expect("describe");
    let keys: Vec<&str> = result
        .keys
        .iter()
        .flatten()
        .map(|k| k.name.as_str())
        .collect();
    for key in [
        "identity_file",
        "known_hosts_file",
        "user",
        "port",
        "ssh_options",
        "inventory",
        "connect_timeout",
        "parallel",
        "ssh_bin",
    ] {
        assert!(keys.contains(&key), "{key} not in {keys:?}");
    }
    assert!(result.keys.iter().flatten().all(|k| !k.doc.is_empty()));
    assert_eq!(
        result.target_types,
        Some(vec![
            "list".to_string(),
            "glob".to_string(),
            "file".to_string()
        ])
    );
}

#[test]
fn check_config_names_each_bad_key_and_job() {
    if !sshd::available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let inventory = dir.path().join("inventory");
    std::fs::write(&inventory, "web1\nweb2:2222\n").expect("inventory");
    let key = dir.path().join("id");
    std::fs::write(&key, "not really a key").expect("key");
    let jobs = json!({"jobs": [
        {"name": "web", "target": "web*", "target_type": "glob"},
        {"name": "listed", "target": "a,root@b:22", "target_type": "list"},
    ]});
    let good = json!({
        "identity_file": key, "inventory": inventory, "user": "deploy", "port": 22,
        "ssh_options": ["StrictHostKeyChecking=yes"], "connect_timeout": 3, "parallel": 8,
    });
    let (reading, _) = op(&good, Op::CheckConfig, jobs);
    assert_eq!(reading.outcome().expect("check").errors, Some(vec![]));

    let bad = json!({
        "identity_file": dir.path().join("missing"), "port": 70000, "colour": "blue",
        "ssh_options": ["ProxyCommand=x\nevil=y"], "ssh_bin": "/nonexistent/ssh",
    });
    let jobs = json!({"jobs": [
        {"name": "globbed", "target": "web*", "target_type": "glob"},
        {"name": "listed", "target": "a,-oops", "target_type": "list"},
        {"name": "filed", "target": dir.path().join("nofile"), "target_type": "file"},
        {"name": "grained", "target": "x", "target_type": "grain"},
    ]});
    let (reading, _) = op(&bad, Op::CheckConfig, jobs);
    let errors = reading
        .outcome()
        .expect("check")
        .errors
        .clone()
        .expect("errors");
    let found: Vec<(Option<&str>, Option<&str>)> = errors
        .iter()
        .map(|e| (e.job.as_deref(), e.key.as_deref()))
        .collect();
    for expected in [
        (None, Some("config.identity_file")),
        (None, Some("config.port")),
        (None, Some("config.colour")),
        (None, Some("config.ssh_options")),
        (None, Some("config.ssh_bin")),
        (Some("globbed"), Some("target_type")),
        (Some("listed"), Some("target")),
        (Some("filed"), Some("target")),
        (Some("grained"), Some("target_type")),
    ] {
        assert!(found.contains(&expected), "{expected:?} not in {errors:#?}");
    }
    assert_eq!(errors.len(), 9, "{errors:#?}");
}

#[test]
fn resolve_reads_lists_files_and_globs_over_the_inventory() {
    if !sshd::available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let inventory = dir.path().join("inventory");
    std::fs::write(
        &inventory,
        "# web\nweb1\nroot@web2:2222\n[::1]:2200\ndb1 # database\n",
    )
    .expect("inventory");
    let config = json!({"inventory": inventory});
    let resolve = |target: &str, target_type: &str| -> Result<Vec<String>, String> {
        let (reading, _) = op(
            &config,
            Op::Resolve,
            json!({"target": target, "target_type": target_type}),
        );
        reading
            .outcome()
            .map(|r| r.machines.clone().unwrap_or_default())
    };
    assert_eq!(
        resolve(" a , b:22,a", "list"),
        Ok(vec!["a".to_string(), "b:22".to_string()])
    );
    assert_eq!(
        resolve("web*", "glob"),
        Ok(vec!["web1".to_string(), "root@web2:2222".to_string()])
    );
    assert_eq!(resolve("nothing*", "glob"), Ok(vec![]));
    assert_eq!(
        resolve(inventory.to_str().expect("utf-8"), "file").map(|m| m.len()),
        Ok(4)
    );
    let error = resolve("a,b c", "list").expect_err("bad host");
    assert!(error.starts_with("target: item 2:"), "{error}");
    let error = resolve("x", "compound").expect_err("bad type");
    assert!(error.starts_with("target_type:"), "{error}");
}

#[test]
fn ping_tells_reachable_from_unreachable() {
    let Some(sshd) = Sshd::start_hosts(2) else {
        return;
    };
    let closed = format!("127.0.0.1:{}", closed_port());
    let mut machines = sshd.hosts();
    machines.push(closed.clone());
    machines.push("bad host".to_string());
    let (reading, _) = op(
        &sshd.executor_config(),
        Op::Ping,
        json!({"machines": machines, "timeout_s": 10}),
    );
    reading.outcome().expect("ping");
    let said = progress(&reading);
    for host in sshd.hosts() {
        assert_eq!(said[&host], vec!["reachable"], "{said:?}\n{}", sshd.log());
    }
    let refused = &said[&closed][0];
    assert!(
        refused.starts_with("unreachable: ssh exited 255") && refused.contains("refused"),
        "{refused}"
    );
    assert!(said["bad host"][0].starts_with("unreachable: not a host spec"));

    // A host key that is not the known one: unreachable, the operator's policy holds.
    let mut config = sshd.executor_config();
    config["known_hosts_file"] = json!("/dev/null");
    let (reading, _) = op(
        &config,
        Op::Ping,
        json!({"machines": [sshd.host()], "timeout_s": 10}),
    );
    let said = progress(&reading);
    assert!(
        said[&sshd.host()][0].contains("Host key verification failed"),
        "{said:?}"
    );
}

#[test]
fn ping_follows_the_sshd_stopped_and_started_again() {
    let Some(mut sshd) = Sshd::start() else {
        return;
    };
    let ping = |sshd: &Sshd| {
        let args = json!({"machines": [sshd.host()], "timeout_s": 10});
        let (reading, _) = op(&sshd.executor_config(), Op::Ping, args);
        progress(&reading)[&sshd.host()][0].clone()
    };
    assert_eq!(ping(&sshd), "reachable");
    sshd.stop();
    assert!(ping(&sshd).starts_with("unreachable"));
    sshd.start_again();
    assert_eq!(ping(&sshd), "reachable");
}

/// Every process's argv and environment, as `/proc` shows them.
fn every_argv_and_env() -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        for file in ["cmdline", "environ"] {
            if let Ok(bytes) = std::fs::read(format!("/proc/{pid}/{file}")) {
                out.push((pid, String::from_utf8_lossy(&bytes).replace('\0', " ")));
            }
        }
    }
    out
}

#[test]
fn launch_puts_the_token_on_stdin_only() {
    let Some(sshd) = Sshd::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let got = dir.path().join("token-got");
    let go = dir.path().join("go");
    let token = format!("tok-{}-{}", std::process::id(), rand_suffix());
    // The command keeps running until the test has looked at every process.
    let waiting = r#"cat > "$1"; while [ ! -e "$2" ]; do sleep 0.05; done"#;
    let closed = format!("127.0.0.1:{}", closed_port());
    let args = json!({
        "run": 7, "urls": ["wss://127.0.0.1:1/"],
        "wrapper": {"path": "/nonexistent", "source": "/nonexistent", "sha256": "00"},
        "targets": [
            {"machine": sshd.host(), "token": token,
             "command": ["sh", "-c", waiting, "sh", got, go]},
            {"machine": closed, "token": "other-token", "command": ["true"]},
        ],
    });
    let config = sshd.executor_config();
    let launch = std::thread::spawn(move || op(&config, Op::Launch, args));
    let expected = format!("{token}\n");
    wait_until("the token on the command's stdin", HANG, || {
        (std::fs::read_to_string(&got).ok()? == expected).then_some(())
    });
    let everything = every_argv_and_env();
    // The scan sees the command itself (its argv names the go file).
    let go_text = go.to_string_lossy().into_owned();
    assert!(everything.iter().any(|(_, text)| text.contains(&go_text)));
    let seen: Vec<_> = everything
        .into_iter()
        .filter(|(_, text)| text.contains(&token))
        .collect();
    std::fs::write(&go, "").expect("go");
    let (reading, raw) = launch.join().expect("launch");
    assert!(
        seen.is_empty(),
        "the token in argv or environment: {seen:?}"
    );
    reading.outcome().expect("launch");
    let said = progress(&reading);
    assert_eq!(said[&sshd.host()], vec!["launched"], "{said:?}");
    assert!(
        said[&closed][0].starts_with("unreachable: ssh exited 255"),
        "{said:?}"
    );
    for text in [&raw.stdout, &raw.stderr] {
        assert!(!String::from_utf8_lossy(text).contains(&token));
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[test]
fn a_failing_command_is_failed_with_its_stderr_and_never_the_token() {
    let Some(sshd) = Sshd::start() else {
        return;
    };
    let token = format!("secret-{}", rand_suffix());
    // The command echoes its stdin on stderr: the plugin masks the token.
    let args = json!({
        "run": 8, "urls": [],
        "wrapper": {"path": "/nonexistent", "source": "/nonexistent", "sha256": "00"},
        "targets": [{"machine": sshd.host(), "token": token,
                     "command": ["sh", "-c", "echo \"no good: $(cat)\" >&2; exit 3"]}],
    });
    let (reading, raw) = op(&sshd.executor_config(), Op::Launch, args);
    let said = progress(&reading);
    assert_eq!(
        said[&sshd.host()],
        vec!["failed: the command exited 3: no good: [the token]"]
    );
    assert!(!String::from_utf8_lossy(&raw.stderr).contains(&token));
}

#[test]
fn deploy_installs_the_wrapper_once_per_build() {
    let Some(sshd) = Sshd::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("build/saltpeter-wrapper");
    std::fs::create_dir_all(source.parent().expect("parent")).expect("build dir");
    // A stand-in wrapper: writes the token it reads to the file it is given.
    std::fs::write(&source, "#!/bin/sh\ncat > \"$1\"\n").expect("source");
    let sha256 = saltpeter::executor::spec::sha256_file(&source).expect("hash");
    let installed = dir.path().join("machine/opt/saltpeter/saltpeter-wrapper");
    let launch = |n: u32, sha256: &str| {
        let got = dir.path().join(format!("got-{n}"));
        let args = json!({
            "run": 9, "urls": [],
            "wrapper": {"path": installed, "source": source, "sha256": sha256},
            "targets": [{"machine": sshd.host(), "token": format!("token-{n}"),
                         "command": [installed, got], "deploy": true}],
        });
        let (reading, _) = op(&sshd.executor_config(), Op::Launch, args);
        reading.outcome().expect("launch");
        let said = progress(&reading).remove(&sshd.host()).unwrap_or_default();
        (said, std::fs::read_to_string(&got).unwrap_or_default())
    };
    assert_eq!(
        launch(1, &sha256),
        (
            vec!["deployed".to_string(), "launched".to_string()],
            "token-1\n".to_string()
        )
    );
    assert_eq!(
        std::fs::read(&installed).expect("installed"),
        std::fs::read(&source).expect("source")
    );
    let mode = std::fs::metadata(&installed)
        .expect("meta")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o755);
    // The same build is there: not copied again.
    assert_eq!(
        launch(2, &sha256),
        (vec!["launched".to_string()], "token-2\n".to_string())
    );
    // Another file at the path: replaced.
    std::fs::write(&installed, "#!/bin/sh\nexit 9\n").expect("tamper");
    assert_eq!(launch(3, &sha256).0, vec!["deployed", "launched"]);
    assert_eq!(
        std::fs::read(&installed).expect("installed"),
        std::fs::read(&source).expect("source")
    );
    // A source that is not what the daemon says: failed, nothing sent.
    let (said, _) = launch(4, &"0".repeat(64));
    assert!(
        said[0].starts_with("failed: the wrapper") && said[0].contains("not 000"),
        "{said:?}"
    );
    // No temporary file left beside it.
    let left: Vec<_> = std::fs::read_dir(installed.parent().expect("dir"))
        .expect("dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, vec!["saltpeter-wrapper"]);
}

#[test]
fn kill_signals_the_wrappers_of_the_run_only() {
    let Some(sshd) = Sshd::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // A stand-in wrapper: `sleep` under the wrapper's name.
    let fake = dir.path().join("saltpeter-wrapper");
    std::fs::copy("/bin/sleep", &fake).expect("copy sleep");
    let run = 900_000_000 + u64::from(std::process::id());
    let spawn = |run: u64| {
        Command::new(&fake)
            .arg("300")
            .env("SP_RUN", run.to_string())
            .spawn()
            .expect("fake wrapper")
    };
    let mut target = spawn(run);
    let mut other = spawn(run + 1);
    let kill = || {
        let args = json!({"run": run, "machines": [sshd.host()]});
        let (reading, _) = op(&sshd.executor_config(), Op::Kill, args);
        reading.outcome().expect("kill");
        progress(&reading)[&sshd.host()][0].clone()
    };
    assert_eq!(kill(), "killed");
    let status = target.wait().expect("wait");
    assert_eq!(
        status.signal(),
        Some(nix::sys::signal::Signal::SIGTERM as i32)
    );
    assert!(
        alive(other.id()),
        "the wrapper of another run was signalled"
    );
    // Nothing of that run is left: said so.
    let again = kill();
    assert!(
        again.starts_with("failed: no saltpeter-wrapper of run"),
        "{again}"
    );
    let _ = other.kill();
    let _ = other.wait();
}

#[test]
fn a_hung_host_is_bounded_by_connect_timeout() {
    let Some(sshd) = Sshd::start() else {
        return;
    };
    // A listener that accepts and never speaks: ssh waits for its banner.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let mut config = sshd.executor_config();
    config["connect_timeout"] = json!(1);
    let machine = format!("127.0.0.1:{port}");
    // Within the daemon's deadline (`op` fails on a breach, `deadline` included).
    let (reading, _) = op(
        &config,
        Op::Ping,
        json!({"machines": [machine], "timeout_s": 3}),
    );
    let said = progress(&reading);
    assert_eq!(
        said[&machine],
        vec!["unreachable: ssh exited 255: Connection timed out during banner exchange"]
    );
    drop(silent);
}
