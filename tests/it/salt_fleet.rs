//! The Salt launch path as a fleet needs it, against the real testbed: one publish per
//! batch, nothing on salt's command line or in the daemon's log that gets a welcome,
//! minion-key proofs (a forged signature, another minion's key and a key the master has
//! not accepted are refused and recorded), a reconnect after a network cut proven with a
//! new signature, and the first slot after a start pre-staged in time.
//!
//! Every test uses job names of its own and does not stop any minion, so they run
//! concurrently with the other Salt tests.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tungstenite::Message;

use crate::salt::testbed;
use crate::util::*;

/// A hang detector for runs on a loaded machine, not a timing goal.
const SALT_HANG: Duration = Duration::from_secs(180);

/// A daemon on the real testbed with `extra` lines in its `saltpeter_config` and `salt_bin`
/// as given (the real one, or a shim in front of it).
fn fleet_daemon(root: &Path, salt_bin: &str, extra: &str, jobs: &str) -> Daemon {
    let wrapper_dir = tempfile::Builder::new()
        .prefix("wrapper-")
        .tempdir_in(root.join("var"))
        .expect("wrapper dir")
        .keep();
    let heartbeat = if extra.contains("heartbeat:") {
        ""
    } else {
        "  heartbeat: 1\n"
    };
    let config = format!(
        "saltpeter_config:\n  executor: salt\n  salt_bin: {salt_bin}\n  salt_config_dir: {}\n  \
         ping_timeout: 10\n  pickup_timeout: 20\n  \
         default_wrapper_path: {}/saltpeter-wrapper\n{heartbeat}{extra}",
        root.join("master").display(),
        wrapper_dir.display()
    );
    Daemon::start(&[("02-salt.yaml", &config), ("jobs.yaml", jobs)])
}

/// A `salt` in front of the real one that appends each invocation's arguments to `log`
/// (one line per invocation, arguments separated by the unit separator). It is a Python
/// script with the real one's interpreter, like `salt` itself, so the salt bridge runs
/// with it too (and any command line it falls back to is logged).
fn logging_salt(dir: &Path, real: &str, log: &Path) -> String {
    let head = std::fs::read_to_string(real).expect("read salt_bin");
    let shebang = head.lines().next().expect("shebang");
    let path = dir.join("salt-logged");
    let script = format!(
        "{shebang}\nimport sys\nwith open({log:?}, 'a') as f:\n    \
         f.write('\\x1f'.join(sys.argv[1:]) + '\\n')\n\
         from salt.scripts import salt_main\nsys.exit(salt_main())\n",
        log = log.display().to_string()
    );
    std::fs::write(&path, script).expect("write salt shim");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.to_string_lossy().into_owned()
}

fn invocations(log: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split('\x1f').map(str::to_string).collect())
        .collect()
}

fn calls_of(invocations: &[Vec<String>], function: &str) -> usize {
    invocations
        .iter()
        .filter(|argv| argv.iter().any(|a| a == function))
        .count()
}

fn send(ws: &mut tungstenite::WebSocket<TcpStream>, msg: Value) {
    ws.send(Message::text(msg.to_string())).expect("send");
}

fn hello(run: u64, machine: &str, field: &str, value: &str) -> Value {
    let mut msg = json!({"type": "hello", "v": 1, "run": run, "machine": machine,
                         "wrapper_version": "test", "pid": 1, "resume_from": null});
    msg[field] = json!(value);
    msg
}

/// What the hub answers a hello presenting `value` as `field` for (run, machine).
fn answer_to(port: u16, run: u64, machine: &str, field: &str, value: &str) -> Value {
    let mut ws = wrapper_ws(port);
    send(&mut ws, hello(run, machine, field, value));
    next_json(&mut ws).unwrap_or(Value::Null)
}

/// A minion-key hello for (run, machine) whose challenge is answered by `sign`.
pub(crate) fn prove(port: u16, run: u64, machine: &str, sign: impl Fn(&str) -> String) -> Value {
    let mut ws = wrapper_ws(port);
    let mut msg = hello(run, machine, "minion_key", "");
    msg["minion_key"] = json!(true);
    send(&mut ws, msg);
    let challenge = next_json(&mut ws).expect("an answer to a minion-key hello");
    assert_eq!(challenge["type"], "challenge", "{challenge}");
    let nonce = challenge["nonce"].as_str().expect("nonce").to_string();
    send(&mut ws, json!({"type": "proof", "signature": sign(&nonce)}));
    next_json(&mut ws).unwrap_or(Value::Null)
}

fn minion_pem(root: &Path, minion: &str) -> PathBuf {
    root.join("pki").join(minion).join("minion.pem")
}

fn wait_running(d: &Daemon, run: u64, machines: &[&str]) {
    wait_until("the targets to run", SALT_HANG, || {
        let r = d.run_record(run);
        machines
            .iter()
            .all(|m| target(&r, m)["state"] == "running")
            .then_some(())
    });
}

/// The publishes the salt bridge of `d` made, by function.
fn bridge_publishes(d: &Daemon, function: &str) -> usize {
    let log =
        std::fs::read_to_string(d.root.path().join("state/salt-bridge.log")).unwrap_or_default();
    log.lines()
        .filter(|l| l.starts_with("publish ") && l.contains(&format!(" fun={function} ")))
        .count()
}

/// What blocking cannot match against the accepted keys itself (here a glob with a class)
/// is matched by the master through the salt bridge: still no ping, no salt process.
#[test]
fn a_glob_with_a_class_is_matched_by_the_master_through_the_bridge() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("salt-argv.log");
    let salt = logging_salt(dir.path(), &bin, &log);
    let d = fleet_daemon(
        &root,
        &salt,
        "",
        "classed:\n  schedule: '@yearly'\n  targets: 'minion-0[12]'\n  \
         command: 'sleep 4; echo done'\n",
    );
    let run = d.run_now("classed");
    wait_running(&d, run, &["minion-01", "minion-02"]);
    let record = d.run_record(run);
    assert_eq!(
        record["targets"].as_array().map(Vec::len),
        Some(2),
        "{record}"
    );
    assert!(invocations(&log).is_empty(), "salt processes were started");
    let bridge_log =
        std::fs::read_to_string(d.root.path().join("state/salt-bridge.log")).unwrap_or_default();
    assert_eq!(bridge_publishes(&d, "test.ping"), 0, "{bridge_log}");
    let matches: Vec<&str> = bridge_log
        .lines()
        .filter(|l| l.starts_with("match "))
        .collect();
    assert_eq!(matches, ["match tgt_type=glob minions=2"], "{bridge_log}");
    // The run ends before the daemon does: its wrappers report and exit instead of
    // reconnecting to a daemon that is gone (as a started wrapper must, for a day).
    let done = d.wait_run_final(run);
    assert_eq!(done["state"], "succeeded", "{done}");
}

#[test]
fn one_publish_per_batch_and_nothing_on_salts_argv_or_in_the_log_gets_a_welcome() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    for bridge in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("salt-argv.log");
        let salt = logging_salt(dir.path(), &bin, &log);
        let minions = ["minion-01", "minion-02", "minion-03"];
        let job = format!("fleet_publish_{bridge}");
        let d = fleet_daemon(
            &root,
            &salt,
            &format!("  salt_bridge: {bridge}\n"),
            &format!(
                "{job}:\n  schedule: '@yearly'\n  targets: [minion-01, minion-02, minion-03]\n  \
                 target_type: list\n  env:\n    FLEET_SECRET: hush-fleet-secret\n  \
                 command: 'sleep 4; echo done-$SP_MACHINE'\n"
            ),
        );
        let run = d.run_now(&job);
        wait_running(&d, run, &minions);
        let seen = invocations(&log);
        if bridge {
            // No salt process at all: the listed targets are matched against the master's
            // accepted keys by blocking itself (no publish, not even the bridge's match)
            // and the batch's launch is one publish, through the bridge.
            assert!(seen.is_empty(), "salt processes were started: {seen:?}");
            let bridge_log = std::fs::read_to_string(d.root.path().join("state/salt-bridge.log"))
                .unwrap_or_default();
            assert_eq!(bridge_publishes(&d, "test.ping"), 0, "{bridge_log}");
            assert_eq!(
                bridge_log
                    .lines()
                    .filter(|l| l.starts_with("match "))
                    .count(),
                0,
                "{bridge_log}"
            );
            assert_eq!(bridge_publishes(&d, "cmd.run_all"), 1, "{bridge_log}");
        } else {
            // Target resolution once, one salt process for the whole batch (deployment is
            // a state run of its own on a fresh daemon).
            assert_eq!(calls_of(&seen, "test.ping"), 1, "{seen:?}");
            assert_eq!(calls_of(&seen, "cmd.run_all"), 1, "{seen:?}");
            let launch = seen
                .iter()
                .find(|argv| argv.iter().any(|a| a == "cmd.run_all"))
                .expect("the launch");
            assert!(
                launch.iter().any(|a| a == "minion-01,minion-02,minion-03"),
                "{launch:?}"
            );
        }
        // Every word salt was given or the daemon logged, tried as a launch token and as
        // a resume key for a target whose wrapper is running right now: all refused.
        let bridge_log_path = d.root.path().join("state/salt-bridge.log");
        let bridge_log = std::fs::read_to_string(&bridge_log_path).unwrap_or_default();
        if let Ok(meta) = std::fs::metadata(&bridge_log_path) {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "salt bridge log mode {mode:o}");
        }
        let mut words: Vec<String> = seen
            .iter()
            .flatten()
            .chain([d.log_text(), bridge_log].iter())
            .flat_map(|text| {
                text.split(|c: char| c.is_whitespace() || "'\",={}[]()".contains(c))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .filter(|w| w.len() >= 8)
            .collect();
        words.sort();
        words.dedup();
        assert!(!words.is_empty());
        assert!(
            !words.iter().any(|w| w.contains("hush-fleet-secret")),
            "a job's env value reached salt's argv or a log"
        );
        let port = d.wrapper_port();
        for word in &words {
            for field in ["token", "resume_key"] {
                let answer = answer_to(port, run, "minion-01", field, word);
                assert_eq!(answer["type"], "reject", "{field} {word:?} got {answer}");
            }
        }
        let done = wait_until("the run to finish", SALT_HANG, || {
            let r = d.run_record(run);
            is_final(&r).then_some(r)
        });
        assert_eq!(done["state"], "succeeded", "{done}\n{}", d.log_text());
        for m in minions {
            assert_eq!(d.output(run, m), format!("done-{m}\n"));
        }
    }
}

#[test]
fn forged_foreign_and_unaccepted_minion_keys_are_refused_and_recorded() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    // The master's accepted keys, less minion-03's: to this daemon, minion-03's key is
    // one the master has not accepted.
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = dir.path().join("master-pki");
    std::fs::create_dir_all(pki.join("minions")).expect("pki dir");
    for m in ["minion-01", "minion-02"] {
        std::fs::copy(
            root.join("pki/master/minions").join(m),
            pki.join("minions").join(m),
        )
        .expect("copy an accepted key");
    }
    let d = fleet_daemon(
        &root,
        &bin,
        &format!("  salt_pki_dir: {}\n  pickup_timeout: 10\n", pki.display()),
        "fleet_keys:\n  schedule: '@yearly'\n  targets: [minion-01, minion-03]\n  \
         target_type: list\n  command: 'sleep 5; echo proven'\n",
    );
    let run = d.run_now("fleet_keys");
    wait_running(&d, run, &["minion-01"]);
    let port = d.wrapper_port();
    let sign = |key: &Path, run: u64, machine: &str, nonce: &str| {
        saltpeter::minion_key::sign_proof(key, nonce, run, machine).expect("sign")
    };
    // Another minion's key.
    let other = minion_pem(&root, "minion-02");
    let answer = prove(port, run, "minion-01", |n| {
        sign(&other, run, "minion-01", n)
    });
    assert_eq!(answer["code"], "unknown_run", "{answer}");
    // A forged signature, and a real one made for another run.
    let answer = prove(port, run, "minion-01", |_| "00".repeat(256));
    assert_eq!(answer["code"], "unknown_run", "{answer}");
    let own = minion_pem(&root, "minion-01");
    let answer = prove(port, run, "minion-01", |n| {
        sign(&own, run + 1, "minion-01", n)
    });
    assert_eq!(answer["code"], "unknown_run", "{answer}");
    // A machine not in the run, even with its own real key.
    let answer = prove(port, run, "minion-02", |n| {
        sign(&other, run, "minion-02", n)
    });
    assert_eq!(answer["code"], "unknown_run", "{answer}");

    let done = wait_until("the run to finish", SALT_HANG, || {
        let r = d.run_record(run);
        is_final(&r).then_some(r)
    });
    assert_eq!(d.output(run, "minion-01"), "proven\n", "{done}");
    // minion-03's own wrapper proved a key the master (as this daemon sees it) never
    // accepted: refused, and the target never picked up.
    let t3 = target(&done, "minion-03");
    assert_eq!(t3["exit_code"], 254, "{done}\n{}", d.log_text());
    let events = d.ctl_json(&["events", "--kind", "wrapper_refused", "--limit", "100"]);
    let text = events.to_string();
    assert!(text.contains("no accepted key for minion-03"), "{events:#}");
    assert!(
        text.contains("does not match the key the master accepted for minion-01"),
        "{events:#}"
    );
    assert!(text.contains("the machine is not its target"), "{events:#}");
}

#[test]
fn a_salt_wrapper_reconnects_after_a_network_cut_with_a_new_signature() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let wrapper_port = free_port();
    let proxy = Proxy::start(wrapper_port);
    let d = fleet_daemon(
        &root,
        &bin,
        &format!(
            "  machines_ws_port: {wrapper_port}\n  default_saltpeter_server_host: \
             '127.0.0.1:{}'\n  heartbeat: 5\n",
            proxy.port
        ),
        "fleet_cut:\n  schedule: '@yearly'\n  targets: [minion-02]\n  target_type: list\n  \
         command: 'for i in $(seq 1 60); do echo line-$i; sleep 0.1; done'\n",
    );
    let run = d.run_now("fleet_cut");
    wait_until("output flowing", SALT_HANG, || {
        d.output(run, "minion-02")
            .contains("line-5\n")
            .then_some(())
    });
    // Shorter than three heartbeats: the target is not lost, the wrapper reconnects.
    proxy.cut();
    std::thread::sleep(Duration::from_secs(4));
    proxy.restore();
    let done = wait_until("the run to finish", SALT_HANG, || {
        let r = d.run_record(run);
        is_final(&r).then_some(r)
    });
    assert_eq!(done["state"], "succeeded", "{done}\n{}", d.log_text());
    let expected: String = (1..=60).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(d.output(run, "minion-02"), expected);
    let log = d.log_text();
    let welcomes = log
        .lines()
        .filter(|l| l.contains(&format!("run {run}: wrapper")) && l.ends_with("connected"))
        .count();
    assert!(
        welcomes >= 2,
        "the wrapper should have been welcomed again after the cut\n{}",
        d.log_text()
    );
}

#[test]
fn the_first_slot_after_a_start_further_than_the_cap_is_prestaged_in_time() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    use chrono::Timelike;
    // The slot lies beyond the cap: the run is launched a cap ahead (the lead before any
    // launch was measured), so every wrapper waits for `go` at the slot.
    // Staged 40 s ahead: room for a loaded machine's launch before the slot.
    let slot = chrono::Utc::now() + chrono::Duration::seconds(55);
    let d = fleet_daemon(
        &root,
        &bin,
        "  prestage_cap: 40\n",
        &format!(
            "fleet_first:\n  schedule: '{} {} {} * * *'\n  targets: [minion-01, minion-02]\n  \
             target_type: list\n  command: 'date +%s%3N'\n",
            slot.second(),
            slot.minute(),
            slot.hour()
        ),
    );
    let runs = d.wait_final_runs("fleet_first", 1);
    let run = &runs[0];
    assert_eq!(run["state"], "succeeded", "{run}\n{}", d.log_text());
    let id = run["id"].as_u64().expect("id");
    let slot_ms = slot
        .with_nanosecond(0)
        .expect("whole second")
        .timestamp_millis();
    for m in ["minion-01", "minion-02"] {
        let started: i64 = d.output(id, m).trim().parse().expect("ms timestamp");
        assert!(started >= slot_ms, "{m} started before its slot");
    }
    let log = d.log_text();
    assert!(
        log.contains(&format!(
            "run {id}: slot reached, go to 2 waiting wrapper(s)"
        )),
        "both wrappers should have been waiting for go at the slot\n{log}"
    );
}

#[test]
fn a_salt_bridge_that_cannot_start_falls_back_to_the_command_line() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    // A `salt` whose interpreter has no Salt to import (the system Python): the bridge
    // dies before it is ready, and the command line (which runs the real salt) does the
    // work instead.
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        panic!("this test needs /usr/bin/python3 (Debian's python3 package)");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let salt = dir.path().join("salt-elsewhere");
    std::fs::write(
        &salt,
        format!(
            "#!{}\nimport os, sys\nos.execv({bin:?}, [{bin:?}] + sys.argv[1:])\n",
            python.display()
        ),
    )
    .expect("write salt");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&salt, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let d = fleet_daemon(
        &root,
        path_str(&salt),
        "",
        "fleet_fallback:\n  schedule: '@yearly'\n  targets: [minion-03]\n  target_type: list\n  \
         command: 'echo fell-back'\n",
    );
    let run = d.run_now("fleet_fallback");
    let done = wait_until("the run to finish", SALT_HANG, || {
        let r = d.run_record(run);
        is_final(&r).then_some(r)
    });
    assert_eq!(done["state"], "succeeded", "{done}\n{}", d.log_text());
    assert_eq!(d.output(run, "minion-03"), "fell-back\n");
    let log = d.log_text();
    assert!(
        log.contains("the salt bridge stopped working")
            && log.contains("using the salt command line"),
        "{log}"
    );
}

#[test]
fn launches_slower_than_the_period_share_publishes_and_their_slots_run_late_not_skipped() {
    // A salt whose launches take 9 s, one at a time (`launch_concurrency: 1`), for a job
    // every 4 s. Before, every other slot was skipped ("the launch of the previous slot is
    // still going"). Now the slots staged while a launch is out join the next launch
    // round: one publish carries several slots' runs, each runs late with its lateness
    // recorded, and no slot is skipped (the backlog does not grow; the rule that skips
    // when it does is `run::rules::launches_behind`, tested on its own).
    let dir = tempfile::tempdir().expect("tempdir");
    let salt = dir.path().join("slow-salt");
    std::fs::write(
        &salt,
        "#!/bin/sh\n\
         case \"$*\" in\n\
         *test.ping*) echo '{\"slowpoke\": true}';;\n\
         *cmd.run_all*) sleep 9; echo '{\"slowpoke\": {\"retcode\": 0, \"stdout\": \"\", \"stderr\": \"\"}}';;\n\
         *file.manage_file*) echo '{\"slowpoke\": {\"result\": true, \"comment\": \"ok\"}}';;\n\
         esac\n",
    )
    .expect("write salt");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&salt, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let d = Daemon::start(&[
        (
            "02-salt.yaml",
            &format!(
                "saltpeter_config:\n  executor: salt\n  salt_bin: {}\n  salt_bridge: false\n  \
                 wrapper_source: salt://saltpeter-wrapper\n  pickup_timeout: 5\n  \
                 launch_concurrency: 1\n",
                salt.display()
            ),
        ),
        (
            "jobs.yaml",
            "slow_launch:\n  schedule: '*/4 * * * * *'\n  targets: [slowpoke]\n  \
             target_type: list\n  command: 'true'\n",
        ),
    ]);
    wait_until("a publish carrying several slots' runs", SALT_HANG, || {
        let log = d.log_text();
        log.lines()
            .any(|l| {
                l.contains("launching run(s) ") && l.contains(',') && l.contains("in one publish")
            })
            .then_some(())
    });
    let runs = wait_until("six slots recorded", SALT_HANG, || {
        let runs = d.runs("slow_launch");
        (runs.len() >= 6).then_some(runs)
    });
    // (The overlap rule may skip a slot whose previous run still waits for its wrapper,
    // which this stand-in never starts; that is not the launch's doing.)
    let skipped: Vec<&serde_json::Value> = runs
        .iter()
        .filter(|r| {
            r["state"] == "skipped"
                && r["reason"]
                    .as_str()
                    .is_none_or(|why| !why.starts_with("overlap:"))
        })
        .collect();
    assert!(skipped.is_empty(), "{skipped:?}\n{}", d.log_text());
    assert!(
        d.log_text().contains("ms after the slot"),
        "the late slots record their lateness\n{}",
        d.log_text()
    );
}
