//! Scenario 6, original: the original Python Saltpeter beside this daemon on the same job
//! directory. Measured so far: idle CPU and memory with 0, 100 and 1,000 jobs. The parts
//! that need the original's wrapper on the Salt minions are not (see `about`).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Env, Scenario};
use crate::BenchError;
use crate::harness::Daemon;
use crate::procstat;
use crate::results::ScenarioResult;

pub const SCENARIO: Scenario = Scenario {
    name: "original",
    title: "6. Beside the original Saltpeter",
    about: "The original `saltpeter` 0.9.32 from PyPI in its own virtualenv (set up by \
            `scripts/bench`: the wheel, `websockets`, which it imports but does not declare, \
            and the Salt testbed's packages through a `.pth` file), and this daemon, one \
            after the other on the same job directory (the original's own YAML format, far \
            future schedules): CPU of each whole process tree over 20 s after 10 s of \
            settling, and its resident memory, with 0, 100 and 1,000 jobs; the ratio is \
            original ÷ this daemon. **Not measured yet**: slot → command on 3 minions, the \
            output throughput of `seq 1 3000000` and the 10-minion `sleep 1` fan-out, which \
            need the original's wrapper on the minions: the 0.9.32 wheel ships no \
            `wrapper.py` (only `main.py`, `machines_endpoint.py`, `ui_endpoint.py`, \
            `timeline.py`), so it has to come from the 0.9.31 sources with the one-line fix \
            0.9.31 needed, and `main.py` reads the master configuration from the fixed path \
            `/etc/salt/master` (line 759; `LocalClient()` with its default path at line 904), \
            so on a shared machine it must run in a mount namespace with the testbed's \
            configuration bound there.",
    sizes_side_by_side: false,
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

fn free_port() -> Result<u16, BenchError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(BenchError::io("free port"))
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

struct Original(Child);

impl Drop for Original {
    fn drop(&mut self) {
        // Its own process group: the multiprocessing children go with it.
        let group = nix::unistd::Pid::from_raw(-(self.0.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGTERM);
        std::thread::sleep(Duration::from_secs(2));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

fn start_original(exe: &str, dir: &Path, jobs: usize) -> Result<Original, BenchError> {
    let config = dir.join("config");
    std::fs::create_dir_all(&config).map_err(BenchError::io("original config"))?;
    std::fs::create_dir_all(dir.join("log")).map_err(BenchError::io("original log"))?;
    std::fs::write(
        config.join("00-base.yaml"),
        format!(
            "saltpeter_config:\n  machines_ws_port: {}\n  machines_ws_bind_addr: 127.0.0.1\n  \
             default_saltpeter_server_host: 127.0.0.1\n  api_ws: false\n  logdir: {}\n",
            free_port()?,
            dir.join("log").display()
        ),
    )
    .map_err(BenchError::io("original config"))?;
    std::fs::write(config.join("jobs.yaml"), jobs_yaml(jobs))
        .map_err(BenchError::io("original config"))?;
    let log = std::fs::File::create(dir.join("original.log")).map_err(BenchError::io("log"))?;
    let err = log.try_clone().map_err(BenchError::io("log"))?;
    let child = Command::new(exe)
        .arg("-c")
        .arg(&config)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(BenchError::io("start the original saltpeter"))?;
    Ok(Original(child))
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
    for jobs in [0usize, 100, 1000] {
        let dir = tempfile::Builder::new()
            .prefix("sp-bench-original-")
            .tempdir()
            .map_err(BenchError::io("temporary directory"))?;
        let (orig_cpu, orig_rss) = {
            let original = start_original(&exe, dir.path(), jobs)?;
            measure_tree(original.0.id())
        };
        let d = Daemon::start(&env.bins, &[("10-jobs.yaml", &jobs_yaml(jobs))])?;
        let (ours_cpu, ours_rss) = measure_tree(d.pid());
        drop(d);
        let count = crate::results::number(jobs as f64);
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
            &format!("idle CPU ratio original ÷ this daemon, {count} jobs"),
            orig_cpu / ours_cpu.max(1e-6),
            "×",
            None,
        );
        result.figure(
            &format!("rss_ratio_{jobs}"),
            &format!("RSS ratio original ÷ this daemon, {count} jobs"),
            orig_rss / ours_rss.max(1e-6),
            "×",
            None,
        );
        let log = std::fs::read_to_string(dir.path().join("original.log")).unwrap_or_default();
        if log.contains("Traceback") {
            result.note(format!(
                "the original printed a traceback with {jobs} jobs: {}",
                log.lines().rev().take(3).collect::<Vec<_>>().join(" / ")
            ));
        }
    }
    Ok(result)
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
