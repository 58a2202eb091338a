//! Jobs whose executor is a plugin (docs/executors.md), end to end with a real daemon:
//! the Python example plugin (`examples/executors/saltpeter-executor-pyexec`, which
//! starts the wrapper on this host) proves the protocol language-neutral, and the
//! features of a run work through it: output and exit codes, unreachable machines and
//! `retry_unreachable` through `ping`, batches, kill and timeout through the wrapper, a
//! plugin that refuses its configuration or hangs, the launch token kept out of sight.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::util::*;

const PYEXEC_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/executors");

/// `saltpeter_config` naming the example plugin's directory and its `config`.
fn plugins(config: &str) -> String {
    format!(
        "saltpeter_config:\n  executor_path: [{PYEXEC_DIR}]\n  executors:\n    pyexec:\n      \
         config: {config}\n"
    )
}

/// A pyexec job on `targets` running `command`, with `extra` keys.
fn job(name: &str, targets: &str, command: &str, extra: &str) -> String {
    format!(
        "{name}:\n  schedule: '@yearly'\n  executor: pyexec\n  targets: [{targets}]\n  \
         target_type: list\n  wrapper_path: {WRAPPER}\n  command: '{command}'\n{extra}"
    )
}

fn start(config: &str, jobs: &str) -> Daemon {
    Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-plugins.yaml", &plugins(config)),
        ("jobs.yaml", jobs),
    ])
}

#[test]
fn a_python_plugin_runs_the_job_with_output_exit_codes_and_unreachable_machines() {
    let d = start(
        "{down: [m3]}",
        &job("p", "m1, m2, m3", "echo hi from $SP_MACHINE; exit 3", ""),
    );
    let (r, _) = d.run_wait("p");
    let id = r["id"].as_u64().expect("id");
    for m in ["m1", "m2"] {
        assert_eq!(target(&r, m)["exit_code"], 3, "{r}");
        assert_eq!(d.output(id, m), format!("hi from {m}\n"));
    }
    assert_eq!(target(&r, "m3")["exit_code"], 255, "{r}");
    assert_eq!(target(&r, "m3")["reason"], "unreachable", "{r}");
    let log = d.log_text();
    assert!(
        log.contains("m3 is unreachable: executor pyexec: listed in config.down"),
        "{log}"
    );
}

#[test]
fn kill_and_timeout_go_through_the_wrapper() {
    let d = start(
        "{}",
        &format!(
            "{}{}",
            job("long", "k1", "sleep 60", ""),
            job(
                "short",
                "t1",
                "echo begin; sleep 30",
                "  timeout: 1\n  kill_grace: 1\n"
            )
        ),
    );
    let id = d.run_now("long");
    wait_until("command running", HANG, || {
        (target(&d.run_record(id), "k1")["state"] == "running").then_some(())
    });
    let out = d.ctl(&["kill", &id.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = d.wait_run_final(id);
    assert_eq!(target(&r, "k1")["exit_code"], 143, "{r}");
    let (r, _) = d.run_wait("short");
    assert_eq!(target(&r, "t1")["exit_code"], 124, "{r}");
    assert_eq!(target(&r, "t1")["reason"], "timeout", "{r}");
}

#[test]
fn an_unreachable_machine_waits_and_runs_when_its_ping_answers() {
    let d = start(
        "{down: [w2]}",
        &job("waits", "w1, w2", "echo ran", "  retry_unreachable: 60s\n"),
    );
    let id = d.run_now("waits");
    wait_until("w2 waiting for its machine", HANG, || {
        let r = d.run_record(id);
        (target(&r, "w2")["state"] == "waiting_unreachable" && target(&r, "w1")["exit_code"] == 0)
            .then_some(())
    });
    // The machine comes back: the plugin's configuration no longer lists it as down.
    d.write_config("02-plugins.yaml", &plugins("{}"));
    let out = d.ctl(&["reload"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = d.wait_run_final(id);
    assert_eq!(target(&r, "w2")["exit_code"], 0, "{r}");
    assert_eq!(d.output(id, "w2"), "ran\n");
}

#[test]
fn batches_of_a_plugin_job_run_one_after_another() {
    let d = start(
        "{}",
        &job("batched", "b1, b2, b3", "sleep 1", "  batch_size: 1\n"),
    );
    let (run, code) = d.run_wait("batched");
    assert_eq!(code, 0, "{run}");
    let mut spans: Vec<_> = run["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| (time_at(t, "started"), time_at(t, "ended")))
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "batches overlap: {spans:?}");
    }
}

#[test]
fn a_plugin_that_refuses_its_configuration_disables_its_jobs_at_their_lines() {
    let d = start(
        "{bogus: 1}",
        &format!(
            "{}{}",
            job("refused", "r1", "true", ""),
            "ghost:\n  schedule: '@yearly'\n  executor: nosuchplugin\n  targets: [g]\n  \
             command: 'true'\n"
        ),
    );
    let out = d.ctl(&["config", "check", &d.config_dir().to_string_lossy()]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("jobs.yaml:3:") && text.contains("config.bogus"),
        "the refusal at the job's executor key: {text}"
    );
    assert!(
        text.contains("saltpeter-executor-nosuchplugin"),
        "the missing plugin named: {text}"
    );
    let out = d.ctl(&["run", "refused"]);
    assert!(!out.status.success(), "a disabled job does not run");
}

/// A plugin that says hello and answers `check_config`, then hangs in every other
/// operation with a child of its own (which the deadline's group kill must end too).
const HANGS_AFTER_CHECK: &str = r#"#!/bin/sh
if [ -z "${SALTPETER_EXECUTOR_PROTOCOL+x}" ]; then echo "stuck: a test plugin" >&2; exit 2; fi
echo '{"saltpeter_executor":1,"type":"hello","protocols":[1],"name":"stuck","version":"0","capabilities":[]}'
read -r line
case "$line" in
  *'"check_config"'*) echo '{"saltpeter_executor":1,"type":"result","ok":true,"errors":[]}'; exit 0;;
esac
sleep 86125 &
sleep 86126
"#;

fn pids_of(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    String::from_utf8_lossy(&cmd)
                        .replace('\0', " ")
                        .contains(needle)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_hanging_plugin_is_killed_at_its_deadline_and_the_schedule_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = dir.path().join("saltpeter-executor-stuck");
    std::fs::write(&plugin, HANGS_AFTER_CHECK).expect("plugin");
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "02-plugins.yaml",
            &format!(
                "saltpeter_config:\n  executors:\n    stuck:\n      path: {}\n      timeout: 2\n",
                plugin.display()
            ),
        ),
        (
            "jobs.yaml",
            "stuck:\n  schedule: '@yearly'\n  executor: stuck\n  targets: [s]\n  command: 'true'\n\
             ticker:\n  schedule: '* * * * * *'\n  targets: [t]\n  command: 'true'\n",
        ),
    ]);
    let started = Instant::now();
    let (r, _) = d.run_wait("stuck");
    assert_eq!(r["state"], "failed", "{r}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "bounded by the deadline"
    );
    let log = d.log_text();
    assert!(
        log.contains("executor stuck: protocol breach deadline"),
        "the breach named: {log}"
    );
    // The plugin and the child it started are gone: killed with their group.
    wait_until(
        "no stuck plugin process left",
        Duration::from_secs(10),
        || (pids_of("sleep 86125").is_empty() && pids_of("sleep 86126").is_empty()).then_some(()),
    );
    // The other job kept firing meanwhile.
    let ticks = d.runs("ticker");
    assert!(ticks.len() >= 2, "the schedule went on: {ticks:?}");
}

/// A plugin that keeps the request it was given (so the test knows the token), then is
/// the example plugin.
fn recording_plugin(dir: &Path) -> String {
    let plugin = dir.join("saltpeter-executor-pyexec");
    let request = dir.join("request.json");
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\ntee {} | exec {PYEXEC_DIR}/saltpeter-executor-pyexec\n",
            request.display()
        ),
    )
    .expect("plugin");
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    dir.display().to_string()
}

#[test]
fn the_launch_token_is_in_no_argv_environment_or_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin_dir = recording_plugin(dir.path());
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "02-plugins.yaml",
            &format!("saltpeter_config:\n  executor_path: [{plugin_dir}]\n"),
        ),
        ("jobs.yaml", &job("secretive", "x1", "env; sleep 3", "")),
    ]);
    let id = d.run_now("secretive");
    wait_until("command running", HANG, || {
        (target(&d.run_record(id), "x1")["state"] == "running").then_some(())
    });
    let request = std::fs::read_to_string(dir.path().join("request.json")).unwrap_or_default();
    let line = request
        .lines()
        .find(|l| l.contains("\"launch\""))
        .expect("the launch request was recorded");
    let v: serde_json::Value = serde_json::from_str(line).expect("json");
    let token = v["args"]["targets"][0]["token"]
        .as_str()
        .expect("a token")
        .to_string();
    assert!(token.len() >= 16, "{token}");
    // While the command runs: no process shows it in its argv or environment.
    for entry in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        for file in ["cmdline", "environ"] {
            let bytes = std::fs::read(format!("/proc/{pid}/{file}")).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(&token),
                "pid {pid}'s {file} holds the token"
            );
        }
    }
    let r = d.wait_run_final(id);
    assert_eq!(target(&r, "x1")["exit_code"], 0, "{r}");
    assert!(!d.output(id, "x1").contains(&token), "the command's env");
    assert!(!d.log_text().contains(&token), "the daemon's log");
    for log in std::fs::read_dir(d.state_dir()).expect("state").flatten() {
        if log.path().is_file() {
            let text = std::fs::read(log.path()).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&text).contains(&token),
                "{} holds the token",
                log.path().display()
            );
        }
    }
}

#[test]
fn a_plugin_whose_file_does_not_match_its_pin_does_not_run() {
    let pinned = format!(
        "saltpeter_config:\n  executors:\n    pyexec:\n      path: {PYEXEC_DIR}/saltpeter-executor-pyexec\n      \
         sha256: {}\n",
        "0".repeat(64)
    );
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-plugins.yaml", &pinned),
        ("jobs.yaml", &job("pinned", "p1", "true", "")),
    ]);
    let out = d.ctl(&["config", "check", &d.config_dir().to_string_lossy()]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("sha256_mismatch"), "{text}");
    let log = d.log_text();
    assert!(
        log.contains("sha256_mismatch"),
        "the daemon says why: {log}"
    );
    assert!(
        !d.ctl(&["run", "pinned"]).status.success(),
        "the job is disabled"
    );
    // The right pin runs it.
    let hash = saltpeter::executor::spec::sha256_file(Path::new(&format!(
        "{PYEXEC_DIR}/saltpeter-executor-pyexec"
    )))
    .expect("hash");
    d.write_config("02-plugins.yaml", &pinned.replace(&"0".repeat(64), &hash));
    assert!(d.ctl(&["reload"]).status.success());
    let (r, code) = d.run_wait("pinned");
    assert_eq!(code, 0, "{r}");
}

#[test]
fn a_scheduled_plugin_job_is_pre_staged_and_its_machines_in_maintenance_stay_out() {
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-plugins.yaml", &plugins("{}")),
        (
            "03-maintenance.yaml",
            "saltpeter_maintenance:\n  machines: [off]\n",
        ),
        (
            "jobs.yaml",
            &format!(
                "ticks:\n  schedule: '*/2 * * * * *'\n  executor: pyexec\n  targets: [on, off]\n  \
                 target_type: list\n  wrapper_path: {WRAPPER}\n  command: 'echo tick'\n"
            ),
        ),
    ]);
    let runs = d.wait_final_runs("ticks", 2);
    let run = &runs[1];
    assert!(run["slot"].is_string(), "a scheduled run: {run}");
    assert_eq!(target(run, "on")["exit_code"], 0, "{run}");
    assert_eq!(target(run, "off")["state"], "skipped_maintenance", "{run}");
    let log = d.log_text();
    assert!(
        log.contains("ticks: pre-staging slot"),
        "launched ahead of its slot: {log}"
    );
}
