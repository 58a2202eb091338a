//! Limits on real processes: the scope's arguments (no systemd here to run them), the
//! setrlimit stand-in, and, where the host lets root make control groups, a memory limit
//! that really kills, a CPU quota that really slows and a task limit that really refuses
//! forks. Without control groups these fail, unless `SALTPETER_TEST_SKIP` names
//! `cgroups`.

use std::io::Read;
use std::path::Path;

use super::*;
use crate::config::resources::{IoClass, IoNice};
use crate::wire::wrapper::JobSpec;
use crate::wrapper::command::{exit_fields, spawn};

fn job(command: &str, limits: Limits) -> JobSpec {
    JobSpec {
        name: "limited".into(),
        command: command.into(),
        user: None,
        cwd: None,
        env: Default::default(),
        timeout_s: 0,
        kill_grace_s: 5,
        heartbeat_s: 5,
        overlap_lock: false,
        splay_s: 0,
        timeout_counts_suspended: true,
        limits: Box::new(limits),
        staged_heartbeat_s: 0,
    }
}

/// Runs `command` under `limits` the way `way` applies them: (exit code, signal, stdout,
/// stderr, the plan after the end).
fn run(
    command: &str,
    limits: Limits,
    way: Way,
) -> (Option<i32>, Option<i32>, String, String, Plan) {
    let plan = Plan::prepare(&limits, 1, "limits-test", way, None);
    let j = job(command, limits);
    let env: Vec<_> = std::env::vars_os().collect();
    let mut sp = spawn(&j, env, None, &plan).expect("spawn");
    let (mut out, mut err) = (String::new(), String::new());
    sp.stdout.set_nonblocking(false).expect("blocking stdout");
    sp.stderr.set_nonblocking(false).expect("blocking stderr");
    sp.stdout.read_to_string(&mut out).expect("stdout");
    sp.stderr.read_to_string(&mut err).expect("stderr");
    let status = sp.child.wait().expect("wait");
    let (code, signal) = exit_fields(status);
    (code, signal, out, err, plan)
}

/// Whether root may make control groups here (systemd is not needed: the wrapper makes
/// them directly when systemd does not run the host).
fn cgroups_present() -> bool {
    if std::env::var("SALTPETER_TEST_SKIP")
        .unwrap_or_default()
        .split(',')
        .any(|c| c.trim() == "cgroups")
    {
        eprintln!("SKIPPED: SALTPETER_TEST_SKIP names cgroups");
        return false;
    }
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "the control group tests need root (SALTPETER_TEST_SKIP=cgroups skips them)"
    );
    true
}

fn limited(memory_max: Option<u64>, cpu_quota: Option<u32>, tasks_max: Option<u64>) -> Limits {
    Limits {
        memory_max,
        cpu_quota,
        tasks_max,
        ..Limits::default()
    }
}

#[test]
fn the_scope_carries_every_group_limit_as_a_property() {
    let limits = limited(Some(64 << 20), Some(50), Some(32));
    let id = Identity {
        uid: 1000,
        gid: 100,
    };
    let argv: Vec<String> = scope_argv(
        Path::new("/usr/bin/systemd-run"),
        "sp-1",
        &limits,
        Some(&id),
    )
    .into_iter()
    .map(|a| a.to_string_lossy().into_owned())
    .collect();
    for want in [
        "--scope",
        "--unit=sp-1",
        "MemoryMax=67108864",
        "MemorySwapMax=0",
        "CPUQuota=50%",
        "TasksMax=32",
        "--uid=1000",
        "--gid=100",
    ] {
        assert!(
            argv.iter().any(|a| a == want),
            "{want} missing from {argv:?}"
        );
    }
    assert_eq!(argv.last().map(String::as_str), Some("--"));
}

#[test]
fn nice_and_ionice_reach_the_command() {
    let limits = Limits {
        nice: Some(7),
        ionice: Some(IoNice {
            class: IoClass::BestEffort,
            level: 6,
        }),
        ..Limits::default()
    };
    let (code, _, out, err, plan) = run("nice; ionice -p $$", limits, Way::Auto);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"7"), "{out}");
    assert_eq!(lines.get(1), Some(&"best-effort: prio 6"), "{out}");
    assert_eq!(
        plan.applied.as_deref(),
        Some("nice 7; ionice best-effort:6")
    );
}

#[test]
fn without_a_group_setrlimit_stands_in_and_says_what_it_misses() {
    let limits = Limits {
        nice: Some(5),
        ionice: Some(IoNice {
            class: IoClass::Idle,
            level: 0,
        }),
        memory_max: Some(64 << 20),
        cpu_quota: Some(50),
        tasks_max: None,
    };
    // 256 MiB in one buffer: the address space limit refuses it, nothing is killed.
    let (code, signal, _, err, plan) = run(
        "dd if=/dev/zero of=/dev/null bs=256M count=1",
        limits,
        Way::Rlimit,
    );
    let text = plan.applied.clone().unwrap_or_default();
    assert!(
        text.starts_with("setrlimit: memory_max=64 MiB as RLIMIT_AS"),
        "{text}"
    );
    assert!(text.contains("cpu_quota=50% NOT applied"), "{text}");
    assert!(text.ends_with("nice 5; ionice idle"), "{text}");
    assert_eq!(signal, None);
    assert_ne!(
        code,
        Some(0),
        "dd got its 256 MiB under a 64 MiB RLIMIT_AS: {err}"
    );
    assert!(err.contains("memory"), "{err}");
    assert!(!plan.memory_killed());
    assert!(
        Plan::prepare(&Limits::default(), 1, "m", Way::Auto, None)
            .applied
            .is_none()
    );
}

#[test]
fn a_memory_limit_really_kills_and_says_so() {
    if !cgroups_present() {
        return;
    }
    let (code, signal, _, err, plan) = run(
        "dd if=/dev/zero of=/dev/null bs=256M count=1",
        limited(Some(32 << 20), None, None),
        Way::Auto,
    );
    let text = plan.applied.clone().unwrap_or_default();
    assert!(text.contains("memory_max=32 MiB"), "{text}");
    assert!(
        !text.starts_with("setrlimit"),
        "no control group was made: {text}"
    );
    // The shell reports its child's KILL as 137 (a single command may be exec'd: KILL).
    assert!(
        code == Some(137) || signal == Some(9),
        "{code:?} {signal:?}: {err}"
    );
    assert!(plan.memory_killed(), "the group counts no OOM kill: {text}");
    drop(plan);
    // Within the limit the same command is not killed.
    let (code, _, _, err, plan) = run(
        "dd if=/dev/zero of=/dev/null bs=4M count=1",
        limited(Some(32 << 20), None, None),
        Way::Auto,
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(!plan.memory_killed());
    drop(plan);
}

#[test]
fn a_cpu_quota_really_slows_and_a_task_limit_really_refuses_forks() {
    if !cgroups_present() {
        return;
    }
    // Two seconds of a busy shell at 20% of one CPU: at most ~0.4 s of CPU time.
    let busy = "end=$(($(date +%s) + 2)); while [ $(date +%s) -lt $end ]; do :; done; times";
    let (code, _, out, err, plan) = run(busy, limited(None, Some(20), None), Way::Auto);
    let applied = plan.applied.clone().unwrap_or_default();
    drop(plan);
    assert_eq!(code, Some(0), "{err}");
    let cpu = cpu_seconds(&out);
    println!("cpu_quota 20%: {cpu:.2} CPU-s in 2 s ({applied})");
    assert!(cpu < 0.8, "20% of a CPU for 2 s used {cpu} CPU-s: {out}");
    // Eight sleepers under tasks_max 4: some forks fail.
    let forks = "for i in 1 2 3 4 5 6 7 8; do sleep 1 & done 2>&1; wait; echo done";
    let (_, _, out, err, plan) = run(forks, limited(None, None, Some(4)), Way::Auto);
    drop(plan);
    let text = format!("{out}{err}");
    assert!(
        text.contains("fork") || text.contains("Resource temporarily unavailable"),
        "eight forks under tasks_max 4 all worked: {text}"
    );
}

/// User plus system time of the shell and its children, from `times`' two lines.
fn cpu_seconds(times: &str) -> f64 {
    times
        .lines()
        .rev()
        .take(2)
        .flat_map(|l| l.split_whitespace())
        .filter_map(|t| {
            let (m, s) = t.trim_end_matches('s').split_once('m')?;
            Some(m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
        })
        .sum()
}
