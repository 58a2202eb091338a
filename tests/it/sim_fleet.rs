//! The simulated fleet of `scripts/bench fleet` (`examples/bench/simfleet/`), small: 20
//! minions and a forger behind a stand-in salt bridge, through the whole daemon path
//! (match, deployment, the launch publish, TLS, minion-key proofs, `go` at the slot,
//! output, exits). And the guard around it: a daemon not started with
//! `SALTPETER_SIMULATED_FLEET=1` refuses a bridge that says it is simulated.
//!
//! The stand-in bridge must be an executable the daemon can start. It is this test
//! binary: `python3-simfleet` is a shell script that runs it with only the ignored test
//! `stand_in_salt_bridge` selected, answers on fd 3 (libtest prints on stdout). The
//! generator's code is the bench driver's own module, included with `#[path]`, so the
//! test needs no other build than `cargo nextest run` makes.

#[path = "../../examples/bench/simfleet/mod.rs"]
mod simfleet;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::util::*;
use simfleet::{Fleet, keys};

const SIM_HANG: Duration = Duration::from_secs(120);

/// The stand-in salt bridge, when the shim starts this binary for it; otherwise
/// nothing (it is ignored in the normal run).
#[test]
#[ignore = "the simulated fleet's salt bridge, started by the sim_fleet tests' shim"]
fn stand_in_salt_bridge() {
    let (Ok(script), Ok(master)) = (
        std::env::var("SIMFLEET_SCRIPT"),
        std::env::var("SIMFLEET_MASTER"),
    ) else {
        return;
    };
    let answers = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/fd/3")
        .expect("fd 3 for the answers");
    let code = simfleet::bridge_main(&[script, master], Box::new(answers));
    std::process::exit(code);
}

/// `python3-simfleet`: this binary as the bridge, its answers on fd 3.
fn shim() -> String {
    let me = std::env::current_exe().expect("the test binary");
    format!(
        "#!/bin/sh\n# The simulated fleet's salt bridge: the sim_fleet test binary.\n\
         exec 3>&1 1>&2\n\
         SIMFLEET_SCRIPT=\"$1\" SIMFLEET_MASTER=\"$2\" exec '{}' \
         sim_fleet::stand_in_salt_bridge --exact --ignored --nocapture --test-threads=1\n",
        me.display()
    )
}

/// Keys of `minions` (cached across runs: RSA keys take a while to make).
fn key_cache(minions: &[String]) -> PathBuf {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("simfleet-keys");
    keys::ensure_keys(&cache, minions, 2).expect("minion keys");
    cache
}

/// A daemon on a simulated fleet of `minions` (plus `forger`, whose accepted key is
/// another minion's), a job on all of them every 10 s, pre-staged.
fn sim_daemon(minions: &[String], simulated_allowed: bool) -> (Daemon, PathBuf) {
    let mut all = minions.to_vec();
    all.push("forger".into());
    let cache = key_cache(&all);
    let mut d = Daemon::prepare(&[]);
    let fleet = Fleet {
        minions: all,
        keys: cache.clone(),
        output_bytes: 32,
    };
    let mut accepted = keys::own_keys(&cache, minions);
    accepted.push((
        "forger".into(),
        cache.join(format!("{}.pem.pub", minions[0])),
    ));
    let shim = shim();
    let master = keys::write_master(
        &d.root.path().join("sim"),
        &fleet,
        &accepted,
        keys::Generator::Script(&shim),
    )
    .expect("simulated master");
    let config = format!(
        "saltpeter_config:\n  executor: salt\n  tls: true\n  salt_bin: {}\n  \
         salt_config_dir: {}\n  default_wrapper_path: {WRAPPER}\n  heartbeat: 1\n  \
         pickup_timeout: 5\n  ping_timeout: 10\n  prestage_cap: 8\n\
         everyone:\n  targets: '*'\n  command: 'true'\n  sec: '*/10'\n  min: '*'\n  \
         hour: '*'\n  dom: '*'\n  mon: '*'\n  dow: '*'\n",
        master.salt_bin.display(),
        master.config_dir.display(),
    );
    d.write_config("20-sim.yaml", &config);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&d.log)
        .expect("log file");
    let mut cmd = d.command();
    if simulated_allowed {
        cmd.env("SALTPETER_SIMULATED_FLEET", "1");
    } else {
        cmd.env_remove("SALTPETER_SIMULATED_FLEET");
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("start daemon");
    d.child = Some(child);
    d.wait_ready();
    let bridge_log = d.state_dir().join("salt-bridge.log");
    (d, bridge_log)
}

#[test]
fn a_simulated_fleet_runs_every_target_once_with_proven_minion_keys() {
    // Over 100 targets: the run lets db hold its stream of states, output and exits
    // (`ActiveRun::write_due`), and every one of them must still be recorded.
    let minions = keys::minion_names(120);
    let (d, bridge_log) = sim_daemon(&minions, true);
    // The first run (newest first: the last one) once it ended.
    let run = wait_until("the first run of the simulated fleet", SIM_HANG, || {
        d.runs("everyone").pop().filter(is_final)
    });
    let record = d.run_record(run["id"].as_u64().expect("run id"));
    let bridge = std::fs::read_to_string(&bridge_log).unwrap_or_default();
    let context = format!(
        "{record:#}\n--- bridge:\n{bridge}\n--- daemon:\n{}",
        d.log_text()
    );
    for m in &minions {
        let t = target(&record, m);
        assert_eq!(t["exit_code"], 0, "{m}: {context}");
        assert!(t["started"].is_string(), "{m} started: {context}");
        assert!(
            d.output(run["id"].as_u64().unwrap(), m)
                .starts_with(&format!("simulated run {} on {m}", run["id"])),
            "{m}: one result with its output: {context}"
        );
    }
    // The forger signs with its own key; the master accepted another one for it.
    let forger = target(&record, "forger");
    assert_ne!(forger["exit_code"], 0, "{context}");
    assert!(forger["started"].is_null(), "{context}");
    let refused = d.ctl_json(&["events", "--kind", "wrapper_refused", "--limit", "100"]);
    let text = refused.to_string();
    assert!(
        text.contains("signature does not match the key the master accepted for forger"),
        "{refused:#}\n{context}"
    );
    assert!(
        !minions.iter().any(|m| text.contains(&format!("\"{m}\""))),
        "only the forger is refused: {refused:#}"
    );
    // No hello carried a token: each welcome was a proof checked against the accepted
    // key, and each proven hello recorded its minion's wrapper build (this one).
    let status = d.ctl_json(&["wrapper", "status"]);
    let recorded: Vec<&str> = status["minions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["current"] == true)
        .filter_map(|m| m["minion"].as_str())
        .collect();
    for m in &minions {
        assert!(recorded.contains(&m.as_str()), "{m}: {status:#}");
    }
    let log = d.log_text();
    assert!(log.contains("SIMULATED fleet"), "the warning: {log}");
}

#[test]
fn a_daemon_refuses_a_simulated_bridge_unless_told_otherwise() {
    let minions = keys::minion_names(2);
    let (d, bridge_log) = sim_daemon(&minions, false);
    let log = wait_until("the simulated bridge refused", SIM_HANG, || {
        let log = d.log_text();
        log.contains("using the salt command line").then_some(log)
    });
    assert!(
        log.contains("simulated fleet's stand-in bridge") && log.contains("refused"),
        "{log}"
    );
    assert!(!log.contains("SIMULATED fleet"), "{log}");
    // No request is written before the ready line is accepted: the command line took the
    // calls, and nothing was ever launched.
    let bridge = std::fs::read_to_string(&bridge_log).unwrap_or_default();
    assert!(!bridge.contains("simfleet: publish"), "{bridge}");
    let runs: Vec<Value> = d.runs("everyone");
    for run in runs.iter().filter(|r| is_final(r)) {
        let record = d.run_record(run["id"].as_u64().unwrap());
        for t in record["targets"].as_array().into_iter().flatten() {
            assert!(t["started"].is_null(), "nothing ran: {record:#}");
        }
    }
}
