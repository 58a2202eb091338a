//! `scripts/bench`'s driver: runs the benchmark scenarios against release binaries, prints
//! a table, writes the results as JSON and regenerates `docs/benchmarks.md` with its plots.
//!
//! Outline:
//! 1. Arguments: scenario names (none: all), `--label` (whose figures these are: `current`,
//!    or e.g. `before` for an older build given with `--bin-dir`), `--report-only`.
//! 2. Each scenario runs on its own daemon(s) and returns figures; a scenario that fails
//!    is reported and the others still run. Nothing here judges a time: goals are shown
//!    beside the figures, met or not.
//! 3. This run's results go to `target/bench/results.json`; they replace the same
//!    scenarios and label in `docs/benchmarks.json`, from which `docs/benchmarks.md` and
//!    `docs/bench/*.svg` are regenerated, so the report always shows every scenario's
//!    latest figures.

mod appendix;
mod findings;
mod harness;
mod loadgen;
mod procstat;
mod report;
mod results;
mod scenarios;
mod simfleet;
mod stats;
mod svg;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

use harness::Binaries;
use results::Results;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("setup: {0}")]
    Setup(String),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    #[error("daemon: {0}")]
    Daemon(String),
    #[error("timed out waiting for {0}")]
    Timeout(String),
}

impl BenchError {
    pub fn io(what: &str) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
        move |err| BenchError::Io {
            what: what.to_string(),
            err,
        }
    }
}

#[derive(Parser, Debug)]
#[command(about = "Saltpeter's benchmarks: figures beside their goals, and the report")]
struct Args {
    /// Scenarios to run (default: all): fanin ingest fanout scheduler salt original memory
    /// herd fleet.
    scenarios: Vec<String>,
    /// Whose figures these are in the report (`current`, or e.g. `before`).
    #[arg(long, default_value = "current")]
    label: String,
    /// Directory of the binaries to measure (default: next to this driver's directory).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// What the binaries of `--bin-dir` are, for the report (e.g. a commit).
    #[arg(long)]
    build: Option<String>,
    /// Only regenerate docs/benchmarks.md from docs/benchmarks.json.
    #[arg(long)]
    report_only: bool,
    /// Print the figures only: write no JSON and no report (for profiling runs).
    #[arg(long)]
    dry_run: bool,
    /// Add to target/bench/results.json instead of replacing it (scripts/bench runs the
    /// Salt scenarios in a second invocation).
    #[arg(long, hide = true)]
    append_results: bool,
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn default_bin_dir() -> PathBuf {
    // target/release/examples/bench → target/release
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| repo().join("target/release"))
}

/// Lets the load generator and the daemon it starts hold 10,000 connections.
fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        eprintln!("could not raise the open-file limit from {soft} to {hard}: {e}");
    }
}

fn load(path: &Path) -> Results {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn save(path: &Path, results: &Results) -> Result<(), BenchError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(BenchError::io("results directory"))?;
    }
    let text = serde_json::to_string_pretty(results)
        .map_err(|e| BenchError::Setup(format!("results as JSON: {e}")))?;
    std::fs::write(path, text + "\n").map_err(BenchError::io("results file"))
}

/// `this` machine's CPU and cores when they are not those of `report` (which describes
/// some machine).
fn other_machine(report: &[(String, String)], this: &[(String, String)]) -> Option<String> {
    let line = |m: &[(String, String)], key: &str| {
        m.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let differs = ["CPU", "cores"]
        .iter()
        .any(|k| line(report, k) != line(this, k));
    (!report.is_empty() && differs)
        .then(|| format!("{}, {} cores", line(this, "CPU"), line(this, "cores")))
}

fn main() -> ExitCode {
    // Started by a daemon's blocking process as its salt bridge (scenario `fleet`).
    if simfleet::started_as_bridge() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let code = simfleet::bridge_main(&args, Box::new(std::io::stdout()));
        return ExitCode::from(code as u8);
    }
    let args = Args::parse();
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::from(2)
        }
    }
}

/// Ok(false): some scenario could not be measured.
fn run(args: Args) -> Result<bool, BenchError> {
    let repo = repo();
    let all_path = repo.join("docs/benchmarks.json");
    let mut all = load(&all_path);
    if args.report_only {
        report::write(&repo, &all)?;
        return Ok(true);
    }
    let chosen: Vec<&scenarios::Scenario> = if args.scenarios.is_empty() {
        scenarios::ALL.iter().collect()
    } else {
        let mut out = Vec::new();
        for name in &args.scenarios {
            out.push(scenarios::find(name).ok_or_else(|| {
                let known: Vec<&str> = scenarios::ALL.iter().map(|s| s.name).collect();
                BenchError::Setup(format!(
                    "unknown scenario `{name}` (known: {})",
                    known.join(" ")
                ))
            })?);
        }
        out
    };
    let bins = Binaries {
        dir: args.bin_dir.clone().unwrap_or_else(default_bin_dir),
    };
    bins.check()?;
    raise_fd_limit();
    let build = if let Some(build) = &args.build {
        build.clone()
    } else if args.bin_dir.is_some() {
        format!("binaries in {}", bins.dir.display())
    } else {
        procstat::machine()
            .into_iter()
            .find(|(k, _)| k == "saltpeter")
            .map(|(_, v)| v)
            .unwrap_or_default()
    };
    let env = scenarios::Env {
        bins,
        label: args.label.clone(),
        build,
    };
    let mut this_run = Results {
        machine: procstat::machine(),
        runs: Vec::new(),
    };
    // The report's machine table stays that of the other scenarios when only some run,
    // elsewhere (a virtual machine may come back on another CPU): each result says where.
    let all_chosen = chosen.len() == scenarios::ALL.len();
    let elsewhere = other_machine(&all.machine, &this_run.machine).filter(|_| !all_chosen);
    let mut all_ok = true;
    for s in chosen {
        eprintln!("==> {} ({})", s.title, s.name);
        let start = std::time::Instant::now();
        let load = procstat::load_average();
        let result = match (s.run)(&env) {
            Ok(mut r) => {
                // The machine is shared: what else ran decides how far figures can be compared.
                r.note(format!(
                    "load average when the scenario started: {load}, when it ended: {}",
                    procstat::load_average()
                ));
                if let Some(machine) = &elsewhere {
                    r.note(format!(
                        "measured on {machine}, not on the machine the table above describes"
                    ));
                }
                r
            }
            Err(e) => {
                all_ok = false;
                eprintln!("    {} could not be measured: {e}", s.name);
                let mut r = env.result(s.name);
                r.note(format!("not measured in the last run: {e}"));
                r
            }
        };
        eprintln!("<== {} in {:.0} s", s.name, start.elapsed().as_secs_f64());
        print!("{}", report::table(&result));
        this_run.runs.push(result.clone());
        // A failed run keeps the previous figures of that scenario in the report.
        if s.sizes_side_by_side {
            all.merge_keeping(result);
        } else if !result.figures.is_empty() || all.find(s.name, &args.label).is_none() {
            all.merge(result);
        }
    }
    if args.dry_run {
        return Ok(all_ok);
    }
    let run_path = repo.join("target/bench/results.json");
    if args.append_results {
        let mut earlier = load(&run_path);
        for r in this_run.runs.drain(..) {
            earlier.merge(r);
        }
        this_run.runs = earlier.runs;
    }
    save(&run_path, &this_run)?;
    if elsewhere.is_none() {
        all.machine = this_run.machine.clone();
    }
    save(&all_path, &all)?;
    report::write(&repo, &all)?;
    eprintln!(
        "wrote target/bench/results.json, docs/benchmarks.json, docs/benchmarks.md and docs/bench/*.svg"
    );
    Ok(all_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(cpu: &str, load: &str) -> Vec<(String, String)> {
        vec![
            ("CPU".into(), cpu.into()),
            ("cores".into(), "2".into()),
            ("load average at the start".into(), load.into()),
        ]
    }

    #[test]
    fn another_cpu_is_named_and_the_same_one_is_not() {
        let xeon = machine("Intel(R) Xeon(R) Processor", "1 1 1");
        assert_eq!(
            other_machine(&xeon, &machine("Intel(R) Xeon(R) Processor", "5 5 5")),
            None
        );
        assert_eq!(
            other_machine(&xeon, &machine("AMD EPYC", "1 1 1")).as_deref(),
            Some("AMD EPYC, 2 cores")
        );
        assert_eq!(other_machine(&[], &xeon), None);
    }
}
