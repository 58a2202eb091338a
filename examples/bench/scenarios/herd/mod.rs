//! Scenario 8, herd: the Salt path as fleets run it. J salt jobs on the same schedule
//! (every 20 s) and the same 10 minions, firing in the same second, first on a fleet that
//! never had the wrapper, then after an ordered restart; for each J of
//! `SP_BENCH_HERD_JOBS`.
//!
//! Outline, per J (`herd_once`):
//! 1. A fresh directory: the wrapper path under it (deleted on the fleet, with the
//!    minions' cached copies), a fresh state directory, a fixed wrapper port (the staged
//!    wrappers reconnect to it after the restart), TLS and the salt bridge as default.
//! 2. `fresh`: start, serve `SP_BENCH_HERD_SLOTS` slots (until their runs are final, or
//!    a deadline), then SIGTERM between two slots.
//! 3. `restart`: start again on the same state, serve as many slots, stop.
//! 4. Count (`tally.rs`): the runs of each phase's slots, the master's publishes while
//!    each daemon ran (its job cache, `testbed.rs`), the CPU of the daemon and of the
//!    testbed.
//!
//! Every wait is bounded; the daemon and the wrappers it launched are stopped however a
//! herd ends (the testbed is `scripts/bench`'s).

mod table;
mod tally;
mod testbed;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Env, Scenario};
use crate::BenchError;
use crate::harness::{Daemon, free_port, is_final, ms};
use crate::procstat;
use crate::results::ScenarioResult;
use tally::{Observed, Phase};
use testbed::{Publish, SaltCpu, Testbed, herd_minions_count};

pub const SCENARIO: Scenario = Scenario {
    name: "herd",
    title: "8. Herd: many salt jobs in the same second, and a restart",
    about: "For each J of `SP_BENCH_HERD_JOBS` (1, 5, 20, 50): J salt jobs in the \
            original's format (`sec: '*/20'`), all on the same 10 minions of the Salt \
            testbed (`'*'`; `scripts/bench` starts 10), command `echo herd`, release \
            build, salt bridge and TLS as default, one wrapper port kept across the \
            restart. **fresh**: a fresh state directory and a fleet that never had the \
            wrapper (its file at the jobs' `wrapper_path`, under the scenario's own \
            directory, and the minions' cached copies deleted); the daemon runs \
            `SP_BENCH_HERD_SLOTS` (5) slots, until their runs are final, and is stopped \
            with SIGTERM between two slots. **restart**: started again on the same state, \
            the wrapper deployed, for as many slots. Per phase: the runs of the slots it \
            ran (slot after its start, up to its stop); **command lateness** is the \
            target's recorded start minus its slot, over every target of the slots from \
            30 s after a fresh start (15 s after a restart) for p50, p99 and max, and \
            over every slot for the full-range max; **false failures** are targets that \
            ended 254 or 255 (every testbed minion is alive); **skipped slots** are runs \
            recorded skipped, their reasons in the notes. **Publishes** come from the \
            master's job cache (`salt-run jobs.list_jobs`), all those made while the \
            daemon ran, `saltutil.find_job` included; a **deployment** is a publish of \
            `state.single` or `file.manage_file` to a minion; **launch publishes** are \
            those of `cmd.run_all` or `cmd.run_bg`. Per-slot figures divide by the \
            slots the daemon started or staged runs for (a slot staged before the stop \
            counts for the daemon that launched it). **CPU**: the daemon's processes \
            (utime + stime + those of the children they reaped, from /proc, just before \
            the SIGTERM), the salt bridge listed as well; and separately the testbed's \
            salt-master and its 10 salt-minions (their process trees, with the job \
            processes they fork and reap), from the start to the SIGTERM. That second \
            part is the one-host testbed: the master's share is what a master would \
            spend, the minions' is 10 hosts' worth spent on this one. Goals (the issue, \
            for 20 jobs × 10 minions every 20 s, fresh and after a restart): 0 false \
            failures, 0 skipped slots, at most 1 deployment per minion per build and 0 \
            after a restart, at most 2 launch publishes per slot, command lateness p99 \
            ≤ 50 ms.",
    sizes_side_by_side: true,
    table: Some(table::markdown),
    run,
};

const PERIOD_MS: i64 = 20_000;
/// How long after its slot a run may take before the phase goes on without it.
const RUN_DEADLINE_MS: i64 = 60_000;
/// The daemon stops at least this long before the next slot (else just after it).
const STOP_MARGIN_MS: i64 = 6_000;
const STOP_GRACE: Duration = Duration::from_secs(30);
/// How long the testbed may take to go quiet between two herds.
const SETTLE: Duration = Duration::from_secs(90);

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The first `n` slots of the herd's schedule after `after_ms`.
fn slots_after(after_ms: i64, n: usize) -> Vec<i64> {
    let first = after_ms - after_ms.rem_euclid(PERIOD_MS) + PERIOD_MS;
    (0..n as i64).map(|i| first + i * PERIOD_MS).collect()
}

fn sleep_until(at_ms: i64) {
    let wait = at_ms - now_ms();
    if wait > 0 {
        std::thread::sleep(Duration::from_millis(wait as u64));
    }
}

/// `SP_BENCH_HERD_JOBS`: the herd sizes, comma-separated.
fn herd_sizes() -> Result<Vec<usize>, BenchError> {
    let text = std::env::var("SP_BENCH_HERD_JOBS").unwrap_or_else(|_| "1,5,20,50".into());
    text.split(',')
        .map(|s| match s.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(BenchError::Setup(format!(
                "SP_BENCH_HERD_JOBS: `{s}` is not a number of jobs (e.g. 1,5,20,50)"
            ))),
        })
        .collect()
}

fn run(env: &Env) -> Result<ScenarioResult, BenchError> {
    let testbed = Testbed::from_env()?;
    let sizes = herd_sizes()?;
    let slots = super::size("HERD_SLOTS", 5).max(1);
    let mut result = env.result("herd");
    let list: Vec<String> = sizes.iter().map(usize::to_string).collect();
    result.sizes = format!(
        "{} jobs × {} minions every {} s, {slots} slots fresh and {slots} after a restart",
        list.join(", "),
        herd_minions_count(),
        PERIOD_MS / 1000
    );
    if testbed.minions.len() > herd_minions_count() {
        result.note(format!(
            "the testbed has {} minions: the jobs target the first {} as a list",
            testbed.minions.len(),
            herd_minions_count()
        ));
    }
    if !testbed.settle(SETTLE) {
        result.note(format!(
            "the testbed was still busy {} s after its start",
            SETTLE.as_secs()
        ));
    }
    for jobs in sizes {
        let started = Instant::now();
        let herd = tally::jobs_text(jobs);
        eprintln!("    {herd}: {slots} slots fresh, then {slots} after a restart");
        let [fresh, restart] = herd_once(env, &testbed, jobs, slots, &mut result)?;
        tally::add_figures(&mut result, &fresh);
        tally::add_figures(&mut result, &restart);
        eprintln!(
            "    {herd}: measured in {:.0} s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(result)
}

/// `saltpeter_config` of a herd daemon: the testbed's master, TLS as default, a fixed
/// wrapper port. It replaces the harness's base file (which turns TLS off).
fn base_config(testbed: &Testbed, port: u16) -> String {
    format!(
        "saltpeter_config:\n  machines_ws_port: {port}\n  machines_ws_bind_addr: 127.0.0.1\n  \
         default_saltpeter_server_host: 127.0.0.1\n  executor: salt\n  salt_bin: {}\n  \
         salt_config_dir: {}\n",
        testbed.salt_bin, testbed.master_dir
    )
}

/// `jobs` jobs in the original's format on the herd's minions.
fn jobs_yaml(jobs: usize, targets: &str, wrapper_path: &Path) -> String {
    (0..jobs)
        .map(|i| {
            format!(
                "herd_{i}:\n  sec: '*/20'\n  min: '*'\n  hour: '*'\n  dom: '*'\n  mon: '*'\n  \
                 dow: '*'\n  {targets}\n  wrapper_path: {}\n  command: 'echo herd'\n",
                wrapper_path.display()
            )
        })
        .collect()
}

/// Ends the wrappers a herd launched through Salt, however it ends: a staged wrapper
/// outlives its daemon (it waits for its slot), and Salt started it in a session of its
/// own. Their command lines name the herd's wrapper path.
struct HerdWrappers(PathBuf);

impl Drop for HerdWrappers {
    fn drop(&mut self) {
        for pid in procstat::pids_with(&self.0.to_string_lossy()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// One daemon's life in a phase.
struct Life {
    started_ms: i64,
    stopped_ms: i64,
    daemon_cpu: f64,
    bridge_cpu: Option<f64>,
    salt_cpu: SaltCpu,
    /// Every run recorded when it was stopped.
    runs: Vec<Value>,
    /// The highest run id then.
    last_run: u64,
}

fn herd_once(
    env: &Env,
    testbed: &Testbed,
    jobs: usize,
    slots: usize,
    result: &mut ScenarioResult,
) -> Result<[Observed; 2], BenchError> {
    let dir = tempfile::Builder::new()
        .prefix("sp-bench-herd-")
        .tempdir()
        .map_err(BenchError::io("temporary directory"))?;
    let wrappers = HerdWrappers(dir.path().join("wrapper"));
    let wrapper_path = wrappers.0.join("saltpeter-wrapper");
    testbed.forget_wrapper(&wrapper_path)?;
    let minions = testbed.herd_minions().to_vec();
    let targets = if testbed.minions.len() == minions.len() {
        "targets: '*'".to_string()
    } else {
        format!("targets: '{}'\n  target_type: list", minions.join(","))
    };
    let port = free_port()?;
    let mut d = Daemon::prepare(
        &env.bins,
        &[("jobs.yaml", &jobs_yaml(jobs, &targets, &wrapper_path))],
    )?;
    d.write_config("00-base.yaml", &base_config(testbed, port))?;

    let fresh = life(&mut d, testbed, jobs, slots, result, "fresh")?;
    let restart = life(&mut d, testbed, jobs, slots, result, "restart")?;
    d.stop();
    drop(wrappers);
    let runs = &restart.runs;
    let publishes = testbed.publishes(dir.path())?;
    // Deployments queued on the minions (`state.single` with `queue=True`) may still run
    // after the daemon is gone, and recreate the wrapper's directory: the next herd, and
    // the removal of this one's directory, wait for the testbed to go quiet.
    if !testbed.settle(SETTLE) {
        result.note(format!(
            "{}: the testbed was still busy {} s after the herd",
            tally::jobs_text(jobs),
            SETTLE.as_secs()
        ));
    }

    let missed = runs
        .iter()
        .filter(|r| ms(&r["slot"]).is_some_and(|s| fresh.stopped_ms < s && s <= restart.started_ms))
        .count();
    if missed > 0 {
        result.note(format!(
            "{}: {missed} runs of slots while no daemon ran (the restart took {:.1} s)",
            tally::jobs_text(jobs),
            (restart.started_ms - fresh.stopped_ms) as f64 / 1000.0
        ));
    }
    let observe = |phase: Phase, l: &Life, ids: std::ops::RangeInclusive<u64>| {
        let in_phase: Vec<Value> = runs
            .iter()
            .filter(|r| ms(&r["slot"]).is_some_and(|s| l.started_ms < s && s <= l.stopped_ms))
            .cloned()
            .collect();
        Observed {
            jobs,
            phase,
            minions: minions.clone(),
            started_ms: l.started_ms,
            runs: in_phase,
            slots_handled: slots_handled(runs, ids),
            publishes: publishes_between(&publishes, l.started_ms, l.stopped_ms),
            daemon_cpu: l.daemon_cpu,
            bridge_cpu: l.bridge_cpu,
            salt_cpu: l.salt_cpu,
        }
    };
    Ok([
        observe(Phase::Fresh, &fresh, 0..=fresh.last_run),
        observe(
            Phase::Restart,
            &restart,
            fresh.last_run + 1..=restart.last_run,
        ),
    ])
}

/// Start the daemon, serve `slots` slots, stop it between two slots.
fn life(
    d: &mut Daemon,
    testbed: &Testbed,
    jobs: usize,
    slots: usize,
    result: &mut ScenarioResult,
    phase: &str,
) -> Result<Life, BenchError> {
    let salt_before = testbed.cpu();
    let started_ms = now_ms();
    d.spawn()?;
    d.wait_ready()?;
    let served = slots_after(started_ms, slots);
    // Once the first slot is done: what each later firing costs, without the start.
    wait_slots(d, jobs, &served[..1]);
    let first = (daemon_cpu(d), testbed.cpu(), role_cpu(d));
    wait_slots(d, jobs, &served);
    let next = slots_after(now_ms(), 1)[0];
    if next - now_ms() < STOP_MARGIN_MS {
        sleep_until(next + 1_000);
    }
    let runs = all_runs(d)?;
    let last_run = runs
        .iter()
        .filter_map(|r| r["id"].as_u64())
        .max()
        .unwrap_or(0);
    let (daemon_cpu, bridge_cpu) = daemon_cpu(d);
    let salt_now = testbed.cpu();
    let salt_cpu = salt_now - salt_before;
    if slots > 1 {
        let later = (slots - 1) as f64;
        let salt = salt_now - first.1;
        let bridge = bridge_cpu.unwrap_or(0.0) - first.0.1.unwrap_or(0.0);
        let roles: Vec<String> = role_cpu(d)
            .into_iter()
            .map(|(role, cpu)| {
                let was = first
                    .2
                    .iter()
                    .find(|(r, _)| *r == role)
                    .map_or(0.0, |r| r.1);
                format!("{role} {:.1}", (cpu - was) * 1000.0 / later)
            })
            .collect();
        result.note(format!(
            "{}, {phase}: per slot after the first (no start-up), CPU-ms: daemon {:.1} ({}; \
             the salt bridge {:.1} of blocking's), salt-master {:.1}, salt-minions {:.1}",
            tally::jobs_text(jobs),
            (daemon_cpu - first.0.0) * 1000.0 / later,
            roles.join(", "),
            bridge * 1000.0 / later,
            salt.master * 1000.0 / later,
            salt.minions * 1000.0 / later,
        ));
    }
    let stopped_ms = now_ms();
    if !d.terminate(STOP_GRACE)? {
        result.note(format!(
            "{}, {phase}: the daemon had not exited {} s after SIGTERM and was killed",
            tally::jobs_text(jobs),
            STOP_GRACE.as_secs()
        ));
    }
    Ok(Life {
        started_ms,
        stopped_ms,
        daemon_cpu,
        bridge_cpu,
        salt_cpu,
        runs,
        last_run,
    })
}

/// Every run of the daemon, all jobs.
fn all_runs(d: &Daemon) -> Result<Vec<Value>, BenchError> {
    Ok(d.ctl_json(&["runs", "--limit", "100000"])?
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// Wait until every job has a final run for each of `slots`, or the last slot's
/// deadline has passed (the tally shows what was missing).
fn wait_slots(d: &Daemon, jobs: usize, slots: &[i64]) {
    let last = slots.last().copied().unwrap_or_else(now_ms);
    loop {
        let done = all_runs(d).is_ok_and(|runs| {
            let finals = runs
                .iter()
                .filter(|r| is_final(r) && ms(&r["slot"]).is_some_and(|s| slots.contains(&s)))
                .count();
            finals >= jobs * slots.len()
        });
        if (done && now_ms() > last) || now_ms() > last + RUN_DEADLINE_MS {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// CPU-s of each daemon process (by `--role`, the supervisor without one) with what
/// runs below it.
fn role_cpu(d: &Daemon) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    for p in procstat::tree(d.pid()) {
        let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let role = match args.iter().position(|a| a == "--role") {
            Some(i) => args.get(i + 1).cloned().unwrap_or_default(),
            None if p == d.pid() => "supervisor".to_string(),
            // A child of a role (the salt bridge, a salt command): counted with blocking.
            None => "blocking".to_string(),
        };
        let cpu = procstat::cpu_with_children_secs(p);
        match out.iter_mut().find(|(r, _)| *r == role) {
            Some(entry) => entry.1 += cpu,
            None => out.push((role, cpu)),
        }
    }
    out
}

/// CPU-s of the daemon's processes and the children they reaped, and of its salt bridge.
fn daemon_cpu(d: &Daemon) -> (f64, Option<f64>) {
    let pids = procstat::tree(d.pid());
    let total = pids
        .iter()
        .map(|p| procstat::cpu_with_children_secs(*p))
        .sum();
    let bridge = pids
        .iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("salt-bridge.py"))
        })
        .map(|p| procstat::cpu_with_children_secs(*p))
        .reduce(|a, b| a + b);
    (total, bridge)
}

/// Distinct slots of the runs with ids in `ids`, slots recorded as missed while no daemon
/// ran left out.
fn slots_handled(runs: &[Value], ids: std::ops::RangeInclusive<u64>) -> usize {
    let slots: std::collections::BTreeSet<i64> = runs
        .iter()
        .filter(|r| r["id"].as_u64().is_some_and(|id| ids.contains(&id)))
        .filter(|r| {
            !r["reason"]
                .as_str()
                .is_some_and(|why| why.starts_with("missed"))
        })
        .filter_map(|r| ms(&r["slot"]))
        .collect();
    slots.len()
}

fn publishes_between(all: &[Publish], from_ms: i64, to_ms: i64) -> Vec<Publish> {
    all.iter()
        .filter(|p| from_ms <= p.at_ms && p.at_ms <= to_ms)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_the_schedules_twenty_second_marks() {
        assert_eq!(slots_after(1_000, 2), vec![20_000, 40_000]);
        assert_eq!(slots_after(20_000, 1), vec![40_000]);
    }

    #[test]
    fn herd_jobs_share_schedule_targets_and_wrapper() {
        let text = jobs_yaml(2, "targets: '*'", Path::new("/w/saltpeter-wrapper"));
        assert_eq!(text.matches("sec: '*/20'").count(), 2);
        assert!(text.contains("herd_1:\n") && !text.contains("herd_2:"));
        assert_eq!(
            text.matches("wrapper_path: /w/saltpeter-wrapper\n").count(),
            2
        );
    }

    #[test]
    fn handled_slots_leave_out_missed_ones_and_other_daemons_runs() {
        let run = |id: u64, slot: &str, reason: Option<&str>| serde_json::json!({"id": id, "slot": slot, "reason": reason});
        let runs = vec![
            run(1, "2026-01-01T00:00:20Z", None),
            run(2, "2026-01-01T00:00:20Z", None),
            run(
                3,
                "2026-01-01T00:00:40Z",
                Some("missed: the daemon was not running"),
            ),
            run(4, "2026-01-01T00:01:00Z", None),
        ];
        assert_eq!(slots_handled(&runs, 0..=3), 1);
        assert_eq!(slots_handled(&runs, 3..=4), 1);
    }
}
