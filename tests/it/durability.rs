//! Crash-only behaviour: nothing lost and no slot run twice across crashes and restarts.

use std::collections::HashSet;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::util::*;

/// 60 numbered lines over about 6 s, then exit 3.
const COUNTER: &str = "for i in $(seq 1 60); do echo line-$i; sleep 0.1; done; exit 3";

fn expected_counter() -> String {
    (1..=60).map(|i| format!("line-{i}\n")).collect()
}

fn kill_pids(pids: &[u32]) {
    for pid in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), Signal::SIGKILL);
    }
}

/// Start a COUNTER run, crash the daemon the way `crash` says mid-run, restart it, and
/// check the run finished with the exact output and exit code.
fn crash_mid_run(machine: &str, crash: impl FnOnce(&mut Daemon, &[(String, u32)])) {
    let mut d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-port.yaml", &fixed_port_config()),
        (
            "jobs.yaml",
            &format!(
                "counter:\n  schedule: '@yearly'\n  targets: [{machine}]\n  command: '{COUNTER}'\n"
            ),
        ),
    ]);
    let id = d.run_now("counter");
    wait_until("some output", HANG, || {
        d.output(id, machine).contains("line-10\n").then_some(())
    });
    let procs = d.processes();
    crash(&mut d, &procs);
    let _ = d.wait_exit();
    for (_, pid) in &procs {
        wait_until("daemon process gone", HANG, || (!alive(*pid)).then_some(()));
    }
    d.cleaned_up();
    d.spawn();
    d.wait_ready();
    let run = d.wait_run_final(id);
    let t = target(&run, machine);
    assert_eq!(t["exit_code"], 3, "{run}\n{}", d.log_text());
    assert_eq!(t["reason"], "exit");
    assert_eq!(
        d.output(id, machine),
        expected_counter(),
        "{}",
        d.log_text()
    );
}

#[test]
fn kill_9_of_the_whole_daemon_mid_run_loses_nothing() {
    crash_mid_run("crash-all", |_, procs| {
        let pids: Vec<u32> = procs.iter().map(|(_, p)| *p).collect();
        kill_pids(&pids);
    });
}

#[test]
fn kill_9_of_each_role_mid_run_loses_nothing() {
    for role in ["hub", "main", "db", "blocking"] {
        crash_mid_run(&format!("crash-{role}"), |_, procs| {
            let pid = procs
                .iter()
                .find(|(r, _)| r == role)
                .map(|(_, p)| *p)
                .expect("role pid");
            kill_pids(&[pid]);
        });
    }
}

#[test]
fn no_slot_runs_twice_across_a_crash() {
    let mut d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "jobs.yaml",
            "often:\n  schedule: '*/2 * * * * *'\n  targets: [often]\n  command: 'sleep 1'\n",
        ),
    ]);
    d.wait_final_runs("often", 2);
    let pids: Vec<u32> = d.processes().into_iter().map(|(_, p)| p).collect();
    kill_pids(&pids);
    let _ = d.wait_exit();
    d.cleaned_up();
    std::thread::sleep(Duration::from_millis(500));
    d.spawn();
    d.wait_ready();
    let before = d.runs("often").len();
    wait_until("more runs after the restart", HANG, || {
        (d.runs("often").iter().filter(|r| is_final(r)).count() >= before + 2).then_some(())
    });
    let runs = d.runs("often");
    let mut seen = HashSet::new();
    for r in &runs {
        let slot = r["slot"].as_str().expect("slot").to_string();
        assert!(
            seen.insert(slot.clone()),
            "slot {slot} recorded twice: {runs:?}"
        );
    }
    // Every run in flight at the crash was finished after it.
    assert!(runs.iter().all(is_final) || runs.iter().filter(|r| !is_final(r)).count() <= 1);
}

#[test]
fn a_7_mb_output_keeps_head_and_tail_exactly() {
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "jobs.yaml",
            "big:\n  schedule: '@yearly'\n  targets: [big]\n  command: 'seq 1 1000000'\n",
        ),
    ]);
    let (run, code) = d.run_wait("big");
    assert_eq!(code, 0, "{run}");
    let expected: String = (1..=1_000_000).map(|i| format!("{i}\n")).collect();
    assert!(expected.len() > 6_000_000);
    let id = run["id"].as_u64().expect("id");
    let shown = d.output(id, "big");
    let omitted = expected.len() - 2 * 1024 * 1024;
    let marker = format!("\n[saltpeter: {omitted} bytes of output left out here (output_limit)]\n");
    let (head, tail) = shown.split_once(&marker).expect("elision marker");
    assert_eq!(head, &expected[..1024 * 1024]);
    assert_eq!(tail, &expected[expected.len() - 1024 * 1024..]);
}

#[test]
fn a_30_second_network_cut_loses_nothing() {
    let wrapper_port = free_port();
    let proxy = Proxy::start(wrapper_port);
    let config = format!(
        "saltpeter_config:\n  machines_ws_port: {wrapper_port}\n  \
         default_saltpeter_server_host: '127.0.0.1:{}'\n",
        proxy.port
    );
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-proxy.yaml", &config),
        (
            "jobs.yaml",
            "talker:\n  schedule: '@yearly'\n  targets: [cut1]\n  \
             command: 'for i in $(seq 1 450); do echo line-$i; sleep 0.1; done'\n",
        ),
    ]);
    let id = d.run_now("talker");
    wait_until("output flowing", HANG, || {
        d.output(id, "cut1").contains("line-30\n").then_some(())
    });
    proxy.cut();
    std::thread::sleep(Duration::from_secs(30));
    proxy.restore();
    // Declared lost during the cut, then reconciled when the wrapper came back.
    let run = wait_until("the real exit recorded", Duration::from_secs(150), || {
        let r = d.run_record(id);
        (target(&r, "cut1")["reason"] == "exit" && is_final(&r)).then_some(r)
    });
    assert_eq!(target(&run, "cut1")["exit_code"], 0, "{run}");
    let expected: String = (1..=450).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(d.output(id, "cut1"), expected);
    assert_eq!(run["state"], "succeeded");
    assert!(
        d.log_text().contains("came back after being declared lost"),
        "{}",
        d.log_text()
    );
}

fn db_bytes(d: &Daemon) -> u64 {
    ["saltpeter.db", "saltpeter.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(d.state_dir().join(f)).ok())
        .map(|m| m.len())
        .sum()
}

#[test]
fn retention_removes_old_runs_and_the_file_shrinks() {
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "02-retention.yaml",
            "saltpeter_config:\n  retention:\n    runs: 100\n",
        ),
        (
            "jobs.yaml",
            "bulky:\n  schedule: '@yearly'\n  targets: [ret1]\n  \
             command: 'head -c 1500000 /dev/zero | tr \"\\\\0\" x'\n",
        ),
    ]);
    for _ in 0..6 {
        let (run, code) = d.run_wait("bulky");
        assert_eq!(code, 0, "{run}");
    }
    assert_eq!(d.runs("bulky").len(), 6);
    let before = db_bytes(&d);
    d.write_config(
        "02-retention.yaml",
        "saltpeter_config:\n  retention:\n    runs: 1\n",
    );
    assert!(d.ctl(&["reload"]).status.success());
    wait_until("old runs pruned", HANG, || {
        (d.runs("bulky").len() == 1).then_some(())
    });
    let after = wait_until("the file shrinks", HANG, || {
        let now = db_bytes(&d);
        (now < before / 2).then_some(now)
    });
    println!("database {before} bytes before retention, {after} after");
}

#[test]
fn a_full_database_records_no_new_run_and_loses_no_output() {
    let port = free_port();
    let capped =
        format!("saltpeter_config:\n  machines_ws_port: {port}\n  database_max_size: 600000\n");
    let mut d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-cap.yaml", &capped),
        (
            "jobs.yaml",
            "filler:\n  schedule: '@yearly'\n  targets: [full1]\n  \
             command: 'head -c 1500000 /dev/urandom | base64 -w 0; sleep 2'\n\
             other:\n  schedule: '@yearly'\n  targets: [full2]\n  command: 'true'\n",
        ),
    ]);
    // Random bytes (as base64): output compression does not shrink them below the cap.
    let id = d.run_now("filler");
    let status = wait_until("the database reported full", HANG, || {
        let s = d.ctl_json(&["status"]);
        s["db_error"].is_string().then_some(s)
    });
    let why = status["db_error"].as_str().unwrap_or("");
    assert!(why.contains("full"), "{why}");
    // A run asked for now is tried (its record is a probe of the database): recorded if
    // its rows still fit, else refused with the database's own word.
    let asked = d.ctl(&["run", "other"]);
    if asked.status.code() != Some(0) {
        let err = String::from_utf8_lossy(&asked.stderr);
        assert!(
            err.contains("could not record the run") && err.contains("full"),
            "{err}"
        );
    }
    // Raise the cap (a start-only setting) and restart: the wrapper kept every byte.
    d.write_config(
        "02-cap.yaml",
        &format!("saltpeter_config:\n  machines_ws_port: {port}\n"),
    );
    d.signal(Signal::SIGTERM);
    assert_eq!(d.wait_exit().code(), Some(0));
    d.spawn();
    d.wait_ready();
    let run = wait_until("the run finished", Duration::from_secs(150), || {
        let r = d.run_record(id);
        is_final(&r).then_some(r)
    });
    assert_eq!(target(&run, "full1")["exit_code"], 0, "{run}");
    let out = d.output(id, "full1");
    assert_eq!(out.len(), 2_000_000);
    assert!(
        out.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
    );
}

/// db stalled past main's call timeout (`SP_DB_TIMEOUT_S` shortens it to 2 s): the runs
/// db records once it runs again, after main gave up on their calls, are found and driven
/// within seconds (`run::orphans`); every command that ran is recorded, once.
#[test]
fn runs_recorded_after_their_calls_timed_out_are_driven_and_nothing_is_lost() {
    let ledger_dir = tempfile::tempdir().expect("ledger dir");
    let ledger = ledger_dir.path().join("ledger");
    let mut d = Daemon::prepare(&[
        ("01-fast.yaml", FAST),
        (
            "jobs.yaml",
            &format!(
                "tick:\n  schedule: '* * * * * *'\n  targets: [stall]\n  \
                 command: 'echo \"$SP_JOB_INSTANCE\" >> {}; echo ran'\n",
                ledger.display()
            ),
        ),
    ]);
    d.spawn_with_env(&[("SP_DB_TIMEOUT_S", "2")]);
    d.wait_ready();
    d.wait_final_runs("tick", 2);
    let db = d
        .processes()
        .into_iter()
        .find(|(role, _)| role == "db")
        .map(|(_, pid)| nix::unistd::Pid::from_raw(pid as i32))
        .expect("db process");
    nix::sys::signal::kill(db, Signal::SIGSTOP).expect("SIGSTOP db");
    std::thread::sleep(Duration::from_secs(6));
    nix::sys::signal::kill(db, Signal::SIGCONT).expect("SIGCONT db");
    std::thread::sleep(Duration::from_secs(2));
    let at_return: Vec<u64> = d
        .runs("tick")
        .iter()
        .filter_map(|r| r["id"].as_u64())
        .collect();
    let runs = wait_until(
        "the runs of the stall to be final",
        Duration::from_secs(30),
        || {
            let runs = d.runs("tick");
            runs.iter()
                .filter(|r| r["id"].as_u64().is_some_and(|id| at_return.contains(&id)))
                .all(is_final)
                .then_some(runs)
        },
    );
    let text = std::fs::read_to_string(&ledger).expect("ledger");
    let mut ran = HashSet::new();
    for line in text.lines() {
        assert!(
            ran.insert(line.to_string()),
            "run {line} ran twice:\n{text}"
        );
    }
    let mut slots = HashSet::new();
    for r in runs.iter().filter(|r| is_final(r)) {
        let id = r["id"].as_u64().expect("id").to_string();
        let slot = r["slot"].as_str().expect("slot").to_string();
        assert!(
            slots.insert(slot.clone()),
            "slot {slot} recorded twice: {runs:?}"
        );
        match r["state"].as_str() {
            Some("succeeded") => assert!(ran.contains(&id), "run {id} recorded, not run: {r}"),
            Some("skipped") => assert!(!ran.contains(&id), "run {id} ran, recorded skipped"),
            _ => panic!("run {id}: {r}\n{}", d.log_text()),
        }
    }
    // The stall outlasted the calls: some run was recorded only after main gave up on it.
    let log = d.log_text();
    assert!(
        log.contains("recorded by db after main stopped waiting for it"),
        "{log}"
    );
    // Every command that ran is recorded as run.
    for id in &ran {
        let r = runs
            .iter()
            .find(|r| r["id"].as_u64().map(|i| i.to_string()) == Some(id.clone()));
        assert!(
            r.is_some_and(|r| !is_final(r) || r["state"] == "succeeded"),
            "run {id}: {r:?}"
        );
    }
}
