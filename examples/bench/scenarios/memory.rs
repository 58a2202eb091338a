//! Scenario 7, memory: every daemon process idle, and the wrapper idle and streaming. The
//! peaks of the daemon's processes under load are in scenarios 1–4 (`peak_rss_*`).

use std::time::{Duration, Instant};

use super::{Env, Scenario};
use crate::BenchError;
use crate::harness::Daemon;
use crate::procstat;
use crate::results::ScenarioResult;

pub const SCENARIO: Scenario = Scenario {
    name: "memory",
    title: "7. Memory",
    about: "Resident memory of each daemon process idle (empty configuration), of a wrapper \
            whose command sleeps, and of a wrapper streaming 100 MiB (its peak). The peaks of \
            the daemon's processes under the loads of scenarios 1–4 are listed with those \
            scenarios.",
    sizes_side_by_side: false,
    table: None,
    run,
};

fn run(env: &Env) -> Result<ScenarioResult, BenchError> {
    let mut result = env.result("memory");
    result.sizes = "empty configuration; one wrapper".into();
    let jobs = "nap:\n  schedule: '@yearly'\n  targets: [nap1]\n  command: 'sleep 3'\n\
                stream:\n  schedule: '@yearly'\n  targets: [str1]\n  command: 'yes | head -c 100M'\n";
    let d = Daemon::start(&env.bins, &[("10-mem.yaml", jobs)])?;
    std::thread::sleep(Duration::from_secs(3));
    for (role, pid) in d.processes()? {
        result.figure(
            &format!("idle_rss_{role}"),
            &format!("{role}, idle"),
            procstat::rss_kib(pid) as f64 / 1024.0,
            "MiB",
            None,
        );
    }
    for (job, key, what) in [
        ("nap", "wrapper_idle", "wrapper, command sleeping"),
        (
            "stream",
            "wrapper_streaming",
            "wrapper streaming 100 MiB, peak",
        ),
    ] {
        let id = d.run_now(job)?;
        let run = format!("SP_RUN={id}");
        let dir = d.dir().display().to_string();
        let begin = Instant::now();
        let mut peak = 0u64;
        loop {
            // This daemon's run's wrapper only (other daemons' wrappers may run here).
            for pid in procstat::pids_with("saltpeter-wrapper") {
                let env = procstat::environ(pid);
                if env.contains(&run) && env.iter().any(|v| v.contains(&dir)) {
                    peak = peak.max(procstat::peak_rss_kib(pid));
                }
            }
            if crate::harness::is_final(&d.run_record(id)?) {
                break;
            }
            if begin.elapsed() > Duration::from_secs(300) {
                return Err(BenchError::Timeout(format!("run of {job}")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        result.figure(key, what, peak as f64 / 1024.0, "MiB", None);
    }
    Ok(result)
}
