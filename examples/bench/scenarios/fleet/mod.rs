//! Scenario 9, fleet: one pre-staged salt job on every minion of a simulated fleet
//! (`simfleet`: 1,000 and 10,000 minions, each with its own key), the whole daemon path
//! except Salt itself.
//!
//! Outline, per size:
//! 1. The minions' keys (cached under `target/bench/simfleet-keys/`), a master directory
//!    whose `salt` names this driver (as `python3-simfleet`) as its interpreter, so the
//!    daemon's salt bridge is the simulated fleet; the daemon started with
//!    `SALTPETER_SIMULATED_FLEET=1` and TLS on.
//! 2. A job on `sim*` every period, pre-staged. For each firing: CPU of every daemon
//!    process and of the generator from `/proc` (schedstat) between the end of the
//!    previous run and the end of this one, peak RSS (VmHWM, reset before the firing
//!    through `clear_refs`), db commits (`saltpeter_db_commit_seconds_count` of
//!    `/metrics`: db observes one latency per batch transaction), and from the run's
//!    target records the slot → command started times.
//! 3. Figures: the median firing's CPU per target, by process and in all; start p50,
//!    p99 and max over all firings' targets; peak RSS; commits per firing.

mod measure;
mod table;

use std::time::{Duration, Instant};

use super::{Env, Scenario};
use crate::BenchError;
use crate::harness::Daemon;
use crate::results::{Goal, ScenarioResult, number};
use crate::simfleet::{Fleet, keys};
use crate::stats::{percentile, sorted};
use measure::{Firing, Probe};

pub const SCENARIO: Scenario = Scenario {
    name: "fleet",
    title: "9. Fleet: one job on 1,000 and 10,000 simulated minions",
    about: "A simulated Salt fleet (`examples/bench/simfleet/`): N minions, each with its \
            own RSA-2048 key accepted in a master pki directory; the daemon's salt bridge \
            is a stand-in that answers matches, pings and the launch publish from the \
            minion list and starts one wrapper session per target in one process (TLS \
            pinned, minion-key proof, staged for `go`, `started`, one output frame, \
            `exited` 0). One job on every minion, pre-staged; per firing: daemon CPU per \
            target by process (the generator's own apart), slot → command started, peak \
            RSS, db commits. Goal: daemon CPU ≤ 0.5 ms per target. Sizes: \
            `SP_BENCH_FLEET_SIZES` (1000,10000), firings per size `SP_BENCH_FLEET_FIRINGS` \
            (3; 1 above 2,000 minions unless `SP_BENCH_FLEET_FIRINGS_LARGE`). Above 2,000 \
            minions the first slot is a minute after the daemon's start (then every 3 \
            minutes), so the wrappers wait staged for as long in every measurement.",
    sizes_side_by_side: true,
    table: Some(table::table),
    run,
};

const ROLES: &[&str] = &["supervisor", "hub", "main", "db", "blocking"];

fn run(env: &Env) -> Result<ScenarioResult, BenchError> {
    let sizes: Vec<usize> = std::env::var("SP_BENCH_FLEET_SIZES")
        .unwrap_or_else(|_| "1000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|n| *n > 0)
        .collect();
    let mut result = env.result("fleet");
    let mut described = Vec::new();
    for n in sizes {
        let firings = if n > 2000 {
            super::size("FLEET_FIRINGS_LARGE", 1)
        } else {
            super::size("FLEET_FIRINGS", 3)
        }
        .max(1);
        let started = Instant::now();
        measure_size(env, n, firings, &mut result)?;
        result.note(format!(
            "{} minions: {firings} firing(s) measured in {:.0} s (start, keys, firings, stop).",
            number(n as f64),
            started.elapsed().as_secs_f64()
        ));
        described.push(number(n as f64));
    }
    result.sizes = format!("{} simulated minions", described.join(" and "));
    Ok(result)
}

fn measure_size(
    env: &Env,
    n: usize,
    firings: usize,
    result: &mut ScenarioResult,
) -> Result<(), BenchError> {
    let minions = keys::minion_names(n);
    let cache = crate::repo().join("target/bench/simfleet-keys");
    let t = Instant::now();
    let made = keys::ensure_keys(&cache, &minions, 2).map_err(BenchError::Setup)?;
    if made > 0 {
        eprintln!(
            "    made {made} minion keys in {:.0} s",
            t.elapsed().as_secs_f64()
        );
    }
    // A firing's launches, connections and proofs all fit in the period. Above 2,000
    // the first slot is a minute after the start (every 3 minutes after it), so its
    // wrappers wait staged for as long in every measurement: the lead (150 s) covers it,
    // and a minute is what `prestage_cap` gives a first slot by default.
    let (sec, min, period, lead) = if n <= 2000 {
        (
            "0,30".to_string(),
            "*".to_string(),
            Duration::from_secs(30),
            25,
        )
    } else {
        use chrono::Timelike;
        let first = chrono::Utc::now() + chrono::Duration::seconds(60);
        let (sec, min) = (first.second(), first.minute());
        (
            sec.to_string(),
            format!("{}-59/3", min % 3),
            Duration::from_secs(180),
            150,
        )
    };
    let api_port = crate::harness::free_port()?;
    let mut d = Daemon::prepare(&env.bins, &[])?;
    let fleet = Fleet {
        minions: minions.clone(),
        keys: cache.clone(),
        output_bytes: 64,
    };
    let generator = std::env::current_exe().map_err(BenchError::io("the driver's path"))?;
    let master = keys::write_master(
        &d.dir().join("sim"),
        &fleet,
        &keys::own_keys(&cache, &minions),
        keys::Generator::Link(&generator),
    )
    .map_err(BenchError::Setup)?;
    let config = format!(
        "saltpeter_config:\n  executor: salt\n  tls: true\n  salt_bin: {}\n  \
         salt_config_dir: {}\n  default_wrapper_path: {}\n  max_connections_per_addr: {}\n  \
         pickup_timeout: 600\n  ping_timeout: 60\n  prestage_cap: {lead}\n  \
         api_ws: true\n  api_ws_port: {api_port}\n  api_token: simfleet-bench\n  metrics_auth: false\n\
         fleet:\n  targets: 'sim*'\n  command: 'true'\n  sec: '{sec}'\n  min: '{min}'\n  \
         hour: '*'\n  dom: '*'\n  mon: '*'\n  dow: '*'\n",
        master.salt_bin.display(),
        master.config_dir.display(),
        env.bins.path("saltpeter-wrapper").display(),
        n * 2 + 256,
    );
    d.write_config("20-fleet.yaml", &config)?;
    d.env
        .push(("SALTPETER_SIMULATED_FLEET".to_string(), "1".to_string()));
    d.spawn()?;
    d.wait_ready()?;
    let processes: Vec<(String, u32)> = d
        .processes()?
        .into_iter()
        .filter(|(role, _)| ROLES.contains(&role.as_str()))
        .collect();
    let probe = Probe::new(processes, api_port);
    let mut measured: Vec<Firing> = Vec::new();
    let mut ends = measure::EndWatch::new(&d.log);
    let mut before = probe.snapshot();
    for k in 1..=firings {
        probe.reset_peaks();
        let run = crate::harness::wait_until(
            &format!("firing {k} of the fleet job to end"),
            period * 2 + Duration::from_secs(900),
            || {
                std::thread::sleep(Duration::from_millis(150));
                ends.poll().get(k - 1).copied()
            },
        )?;
        // db reports its commits to main within 2 s.
        std::thread::sleep(Duration::from_millis(2500));
        let after = probe.snapshot();
        let record = d.run_record(run)?;
        let firing = Firing::new(&before, &after, &record, probe.peaks());
        eprintln!("    {n} minions, firing {k}: {}", firing.summary(n));
        if firing.ok < n {
            // Say why, once: the first target that did not exit 0, and the daemon's log.
            if let Some(t) = record["targets"]
                .as_array()
                .and_then(|ts| ts.iter().find(|t| t["exit_code"] != 0))
            {
                eprintln!("    a target that did not exit 0: {t}");
            }
            eprintln!("    the daemon's log ends with:\n{}", d.log_tail());
        }
        measured.push(firing);
        before = after;
    }
    d.stop();
    // The daemon's log is kept for a look at what a firing did (with
    // SP_BENCH_RUST_LOG=info,saltpeter::roles::db=debug, every commit and what it held).
    let keep = crate::repo().join(format!("target/bench/fleet-{n}-daemon.log"));
    if std::fs::copy(&d.log, &keep).is_ok() {
        eprintln!("    the daemon's log: {}", keep.display());
    }
    figures(result, n, &measured);
    Ok(())
}

fn figures(result: &mut ScenarioResult, n: usize, firings: &[Firing]) {
    let per_target = |ns: u64| ns as f64 / 1e6 / n as f64;
    let median_by = |f: &dyn Fn(&Firing) -> f64| {
        let values = sorted(firings.iter().map(f).collect());
        percentile(&values, 0.5).unwrap_or(0.0)
    };
    let count = number(n as f64);
    result.figure(
        &format!("cpu_ms_per_target_{n}"),
        &format!("{count}: daemon CPU per target per firing (all its processes)"),
        median_by(&|f| per_target(f.daemon_ns())),
        "ms",
        Some(Goal::AtMost(0.5)),
    );
    for role in ROLES {
        result.figure(
            &format!("cpu_ms_per_target_{role}_{n}"),
            &format!("{count}: {role} CPU per target per firing"),
            median_by(&|f| per_target(f.cpu_ns(role))),
            "ms",
            None,
        );
    }
    result.figure(
        &format!("generator_cpu_ms_per_target_{n}"),
        &format!("{count}: the generator's CPU per target (stand-in bridge and sessions; not the daemon's)"),
        median_by(&|f| per_target(f.generator_ns)),
        "ms",
        None,
    );
    let starts = sorted(firings.iter().flat_map(|f| f.starts_ms.clone()).collect());
    for (key, p) in [("p50", 0.5), ("p99", 0.99), ("max", 1.0)] {
        if let Some(v) = percentile(&starts, p) {
            result.figure(
                &format!("start_{key}_ms_{n}"),
                &format!("{count}: slot → command started, {key} (all firings' targets)"),
                v,
                "ms",
                None,
            );
        }
    }
    for role in ROLES {
        let peak = firings
            .iter()
            .filter_map(|f| f.peaks_kib.iter().find(|(r, _)| r == role))
            .map(|(_, kib)| *kib)
            .max()
            .unwrap_or(0);
        result.figure(
            &format!("peak_rss_{role}_{n}"),
            &format!("{count}: {role} peak RSS during a firing"),
            peak as f64 / 1024.0,
            "MiB",
            None,
        );
    }
    let commits: Vec<f64> = firings.iter().filter_map(|f| f.commits).collect();
    if let Some(c) = percentile(&sorted(commits), 0.5) {
        result.figure(
            &format!("db_commits_{n}"),
            &format!("{count}: database commits per firing"),
            c,
            "",
            None,
        );
    }
    let worst_ok = firings.iter().map(|f| f.ok).min().unwrap_or(0);
    result.figure(
        &format!("targets_ok_{n}"),
        &format!("{count}: targets that exited 0 (the worst firing)"),
        worst_ok as f64,
        "",
        Some(Goal::AtLeast(n as f64)),
    );
    let ok: usize = firings.iter().map(|f| f.ok).sum();
    let targets: usize = firings.iter().map(|f| f.targets).sum();
    result.note(format!(
        "{count} minions: {ok} of {targets} targets exited 0 over {} firing(s); per firing: {}",
        firings.len(),
        firings
            .iter()
            .map(|f| f.summary(n))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    // The report keeps the distribution, not 10,000 values: 201 quantiles.
    let quantiles = (0..=200)
        .filter_map(|i| percentile(&starts, i as f64 / 200.0))
        .collect();
    result.samples(
        &format!("start_{n}"),
        &format!("{count}: slot → command started (quantiles)"),
        "ms",
        quantiles,
    );
}
