//! Scenario 6, original: the original Python Saltpeter and this daemon one after the other,
//! on the same job text: idle CPU and memory with 0, 100 and 1,000 jobs, then on the Salt
//! testbed slot → command on 3 minions, the output throughput of `seq 1 3000000` and a
//! 10-minion `sleep 1` fan-out (`measure.rs`; the original's process and log: `setup.rs`).

mod measure;
mod setup;

use std::time::{Duration, Instant};

use super::{Env, Scenario};
use crate::BenchError;
use crate::harness::Daemon;
use crate::procstat;
use crate::results::{ScenarioResult, number};
use crate::stats::{percentile, sorted};
use measure::{Ours, Subject};
use setup::{Original, OriginalSetup};

pub const SCENARIO: Scenario = Scenario {
    name: "original",
    title: "6. Beside the original Saltpeter",
    about: "The original `saltpeter` 0.9.32 from PyPI in its own virtualenv and this daemon, \
            one after the other, each reading the same job text in the original's YAML format \
            from its own job directory; ratios are original ÷ this daemon. Set-up \
            (`scripts/bench`): the wheel, `websockets` (imported, not declared), and the \
            Salt testbed's packages (Salt, aiohttp) through a `.pth` file. **Idle**: CPU of \
            each whole process tree over 20 s after 10 s of settling, and its resident \
            memory, with 0, 100 and 1,000 far-future jobs. **On the Salt testbed** \
            (`scripts/salt-testbed`, 10 minions on this machine), per daemon: first a \
            `sleep 1` job on 10 minions firing every 20 s, from the slot to all 10 results \
            seen stored, over 3 firings after a first one (which loads code, or deploys \
            this daemon's wrapper); then a job on 3 minions firing every 15 s whose command \
            appends its start time (`date +%s%3N`) to a file, slot → that time over 5 \
            firings after the first; then `seq 1 3000000` (22,888,896 bytes) as one job on \
            one minion, which first writes its start time: from there to its result seen \
            stored with all its output, whose size is checked (this daemon is given \
            `output_limit: 16777216` for it, which the original ignores; it keeps \
            everything). A result counts as stored when the daemon shows it: this daemon in \
            `saltpeterctl runs` (the target has an exit code), the original in \
            `{logdir}/{job}.log` (the `####### END` line closing the result it writes once \
            the result is in its state); both are polled every 50 ms (20 ms for `seq`), so \
            the times are that coarse. The original's deadline for `seq` is \
            `SP_BENCH_ORIGINAL_SEQ_S` (600 s); cut off, it reports how far `seq` got. \
            **What the original needs here**: its wrapper comes from the 0.9.32 sdist (the \
            wheel has none), with the one-line fix 0.9.31 had and 0.9.32 lost: \
            `retcode = process.poll()` put back at the top of the main loop of \
            `run_command_and_stream` (after `# Check if process has finished`, as in \
            0.9.30); without it every command ends in `UnboundLocalError` (\"cannot access \
            local variable 'retcode'\") before its output is read. Nothing else of the \
            original is changed. Bench accommodations, not fixes: the wrapper is started \
            through a shim that sets `SP_MACHINE_ID` to the minion id from the \
            configuration of the `salt-minion` that started it (the wrapper would name \
            itself `socket.getfqdn()`, the same for every testbed minion), and puts its \
            lockfile in that minion's directory (its default `/tmp/sp_wrapper_JOB.lock` \
            would be shared by minions on one host); `main.py` reads the master \
            configuration from the fixed path `/etc/salt/master` (line 759; `LocalClient()` \
            with its default path at line 904), so it runs in a private mount namespace \
            where the testbed's file is bound there (with an overlay on /etc when that path \
            does not exist; the host's /etc is not touched); the one-off `seq` job fires \
            at a second and minute of every hour, as an expired schedule would end the \
            original's main loop.",
    sizes_side_by_side: false,
    table: None,
    run,
};

const SETTLE: Duration = Duration::from_secs(10);
const WINDOW: Duration = Duration::from_secs(20);

/// `n` jobs in the original's format that never fire during the run.
fn jobs_yaml(n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "idle_{i}:\n  year: 2099\n  mon: {}\n  dom: {}\n  hour: {}\n  min: {}\n  sec: 0\n  \
             dow: '*'\n  targets: 'minion-01'\n  target_type: glob\n  command: 'true'\n",
            1 + i % 12,
            1 + i % 28,
            i % 24,
            i % 60
        ));
    }
    text
}

/// CPU share and RSS of a process tree: (% of a core, MiB).
fn measure_tree(root: u32) -> (f64, f64) {
    std::thread::sleep(SETTLE);
    let pids = procstat::tree(root);
    let before: u64 = pids.iter().map(|p| procstat::cpu_ns(*p)).sum();
    let start = Instant::now();
    std::thread::sleep(WINDOW);
    let after: u64 = pids.iter().map(|p| procstat::cpu_ns(*p)).sum();
    let share = after.saturating_sub(before) as f64 / 1e9 / start.elapsed().as_secs_f64() * 100.0;
    let rss: u64 = procstat::tree(root)
        .iter()
        .map(|p| procstat::rss_kib(*p))
        .sum();
    (share, rss as f64 / 1024.0)
}

fn run(env: &Env) -> Result<ScenarioResult, BenchError> {
    let exe = std::env::var("SP_BENCH_ORIGINAL").map_err(|_| {
        BenchError::Setup(
            "SP_BENCH_ORIGINAL (the original's `saltpeter` executable) is not set: run \
             through scripts/bench, which installs it"
                .into(),
        )
    })?;
    let mut result = env.result("original");
    result.sizes = "0, 100 and 1,000 idle jobs; process trees".into();
    idle(env, &exe, &mut result)?;
    match Testbed::from_env() {
        Ok(testbed) => {
            result.sizes.push_str(&format!(
                "; Salt testbed: 3 minions (slot → command), 1 (`seq`), {} (fan-out)",
                testbed.minions.len().min(10)
            ));
            on_testbed(env, &exe, &testbed, &mut result)?;
        }
        Err(why) => result.note(format!("not measured on the Salt testbed: {why}")),
    }
    Ok(result)
}

fn idle(env: &Env, exe: &str, result: &mut ScenarioResult) -> Result<(), BenchError> {
    let setup = OriginalSetup {
        exe,
        wrapper: None,
        salt_master: None,
    };
    for jobs in [0usize, 100, 1000] {
        let dir = tempfile::Builder::new()
            .prefix("sp-bench-original-")
            .tempdir()
            .map_err(BenchError::io("temporary directory"))?;
        let (orig_cpu, orig_rss, console) = {
            let original = Original::start(&setup, dir.path(), &jobs_yaml(jobs))?;
            let (cpu, rss) = measure_tree(original.pid());
            (cpu, rss, original.console())
        };
        let d = Daemon::start(&env.bins, &[("10-jobs.yaml", &jobs_yaml(jobs))])?;
        let (ours_cpu, ours_rss) = measure_tree(d.pid());
        drop(d);
        let count = number(jobs as f64);
        for (key, what, value, unit) in [
            ("orig_cpu", "original, idle CPU", orig_cpu, "% of a core"),
            ("ours_cpu", "this daemon, idle CPU", ours_cpu, "% of a core"),
            (
                "orig_rss",
                "original, RSS of all processes",
                orig_rss,
                "MiB",
            ),
            (
                "ours_rss",
                "this daemon, RSS of all processes",
                ours_rss,
                "MiB",
            ),
        ] {
            result.figure(
                &format!("{key}_{jobs}"),
                &format!("{what}, {count} jobs"),
                value,
                unit,
                None,
            );
        }
        result.figure(
            &format!("cpu_ratio_{jobs}"),
            &format!("idle CPU ratio original ÷ this daemon, {count} jobs (above 1: this daemon uses less)"),
            orig_cpu / ours_cpu.max(1e-6),
            "×",
            None,
        );
        result.figure(
            &format!("rss_ratio_{jobs}"),
            &format!(
                "RSS ratio original ÷ this daemon, {count} jobs (above 1: this daemon uses less)"
            ),
            orig_rss / ours_rss.max(1e-6),
            "×",
            None,
        );
        note_traceback(result, &format!("with {jobs} idle jobs"), &console);
    }
    Ok(())
}

fn note_traceback(result: &mut ScenarioResult, when: &str, console: &str) {
    if console.contains("Traceback") {
        result.note(format!(
            "the original printed a traceback {when}: {}",
            console
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .join(" / ")
        ));
    }
}

/// The Salt testbed `scripts/bench` started, and the original's wrapper it prepared.
struct Testbed {
    salt_bin: String,
    master_dir: String,
    root: String,
    minions: Vec<String>,
    wrapper: String,
}

impl Testbed {
    fn from_env() -> Result<Testbed, String> {
        let var = |name: &str| {
            std::env::var(name).map_err(|_| {
                format!("{name} is not set (scripts/bench sets it with the testbed and the original's wrapper)")
            })
        };
        let minions: Vec<String> = var("SALT_MINIONS")?
            .split(',')
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .collect();
        if minions.len() < 3 {
            return Err(format!(
                "the testbed has {} minions, 3 are needed",
                minions.len()
            ));
        }
        Ok(Testbed {
            salt_bin: var("SALT_BIN")?,
            master_dir: var("SALT_CONFIG_DIR")?,
            root: var("SALT_TESTBED_ROOT")?,
            minions,
            wrapper: var("SP_BENCH_ORIGINAL_WRAPPER")?,
        })
    }
}

/// What one daemon measured on the testbed.
struct Measured {
    fan_out: measure::FanOut,
    slot: measure::SlotToCommand,
    seq: measure::Throughput,
}

fn measure_all(
    s: &mut dyn Subject,
    dir: &std::path::Path,
    testbed: &Testbed,
    seq_deadline: Duration,
) -> Result<Measured, BenchError> {
    let fan: Vec<String> = testbed.minions.iter().take(10).cloned().collect();
    let fan_out = measure::fan_out(s, &fan, 3)?;
    let slot = measure::slot_to_command(s, dir, &testbed.minions[..3], 5)?;
    let seq = measure::throughput(s, dir, &testbed.minions[0], seq_deadline)?;
    Ok(Measured { fan_out, slot, seq })
}

fn on_testbed(
    env: &Env,
    exe: &str,
    testbed: &Testbed,
    result: &mut ScenarioResult,
) -> Result<(), BenchError> {
    let dir = tempfile::Builder::new()
        .prefix("sp-bench-original-salt-")
        .tempdir()
        .map_err(BenchError::io("temporary directory"))?;
    let master = format!("{}/master", testbed.master_dir);
    let setup = OriginalSetup {
        exe,
        wrapper: Some(&testbed.wrapper),
        salt_master: Some(&master),
    };
    let seq_deadline = Duration::from_secs(super::size("ORIGINAL_SEQ_S", 600) as u64);
    let orig_dir = dir.path().join("original");
    let orig = {
        let mut original = Original::start(&setup, &orig_dir, &jobs_yaml(1))?;
        std::thread::sleep(Duration::from_secs(5));
        let m = measure_all(&mut original, dir.path(), testbed, seq_deadline)?;
        note_traceback(result, "on the Salt testbed", &original.console());
        m
    };
    let config = format!(
        "saltpeter_config:\n  executor: salt\n  salt_bin: {}\n  salt_config_dir: {}\n  \
         ping_timeout: 30\n  default_wrapper_path: {}/var/bench-wrapper/saltpeter-wrapper\n",
        testbed.salt_bin, testbed.master_dir, testbed.root
    );
    let ours = {
        let d = Daemon::start(
            &env.bins,
            &[("02-salt.yaml", &config), ("jobs.yaml", &jobs_yaml(1))],
        )?;
        let mut ours = Ours(d);
        measure_all(&mut ours, dir.path(), testbed, Duration::from_secs(300))?
    };
    report(result, &orig, &ours);
    Ok(())
}

/// `original … ratio` figure: original ÷ this daemon, both times (above 1: this daemon
/// takes less).
fn ratio(result: &mut ScenarioResult, key: &str, what: &str, orig: Option<f64>, ours: Option<f64>) {
    if let (Some(o), Some(u)) = (orig, ours) {
        result.figure(
            key,
            &format!("{what}: ratio original ÷ this daemon (above 1: this daemon faster)"),
            o / u.max(1e-9),
            "×",
            None,
        );
    }
}

fn report(result: &mut ScenarioResult, orig: &Measured, ours: &Measured) {
    let who = [("orig", "original", orig), ("ours", "this daemon", ours)];
    // Slot → command on 3 minions.
    let mut p50 = Vec::new();
    for (key, name, m) in who {
        let late = sorted(m.slot.late_ms.clone());
        let (a, b) = (percentile(&late, 0.5), percentile(&late, 0.99));
        if let (Some(a), Some(b)) = (a, b) {
            let n = late.len();
            result.figure(
                &format!("{key}_slot_to_command_p50"),
                &format!("{name}: slot → command running on 3 minions, p50 ({n} starts)"),
                a,
                "ms",
                None,
            );
            result.figure(
                &format!("{key}_slot_to_command_p99"),
                &format!("{name}: slot → command running on 3 minions, p99 ({n} starts)"),
                b,
                "ms",
                None,
            );
        }
        p50.push(a);
        if let Some(n) = &m.slot.note {
            result.note(format!("{name}, slot → command: {n}"));
        }
    }
    ratio(
        result,
        "slot_to_command_ratio",
        "slot → command on 3 minions, p50",
        p50[0],
        p50[1],
    );
    // seq 1 3000000.
    let mut secs = Vec::new();
    for (key, name, m) in who {
        if let Some(s) = m.seq.seconds {
            result.figure(
                &format!("{key}_seq_s"),
                &format!("{name}: `seq 1 3000000`, command start → result and output stored"),
                s,
                "s",
                None,
            );
            let bytes = m.seq.bytes.unwrap_or(0);
            result.figure(
                &format!("{key}_seq_mbps"),
                &format!("{name}: `seq 1 3000000` output throughput to storage"),
                bytes as f64 / 1e6 / s.max(1e-9),
                "MB/s",
                None,
            );
            if bytes != measure::SEQ_BYTES {
                result.note(format!(
                    "{name}: `seq 1 3000000` stored {bytes} bytes of {}",
                    measure::SEQ_BYTES
                ));
            }
        }
        secs.push(m.seq.seconds);
        if let Some(n) = &m.seq.note {
            result.note(format!("{name}, `seq 1 3000000`: {n}"));
        }
    }
    ratio(
        result,
        "seq_ratio",
        "`seq 1 3000000` to storage, time",
        secs[0],
        secs[1],
    );
    // Fan-out.
    let mut medians = Vec::new();
    for (key, name, m) in who {
        let s = sorted(m.fan_out.seconds.clone());
        let median = percentile(&s, 0.5);
        if let Some(v) = median {
            let list: Vec<String> = m
                .fan_out
                .seconds
                .iter()
                .map(|x| format!("{x:.2}"))
                .collect();
            result.figure(
                &format!("{key}_fanout_s"),
                &format!(
                    "{name}: `sleep 1` on {} minions, slot → all results stored, median of {} ({} s)",
                    m.fan_out.minions,
                    s.len(),
                    list.join(", ")
                ),
                v,
                "s",
                None,
            );
        }
        medians.push(median);
        if let Some(n) = &m.fan_out.note {
            result.note(format!("{name}, fan-out: {n}"));
        }
    }
    ratio(
        result,
        "fanout_ratio",
        "`sleep 1` fan-out, median",
        medians[0],
        medians[1],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_in_the_originals_format_are_distinct_and_far_away() {
        let text = jobs_yaml(3);
        assert_eq!(text.matches("year: 2099").count(), 3);
        assert!(text.contains("idle_2:") && !text.contains("idle_3:"));
        assert!(jobs_yaml(0).is_empty());
    }
}
