//! The three measurements on the Salt testbed, the same for both daemons: the same job
//! text in the original's format (each daemon reads it from its own job directory), the
//! same commands, and the same observations. A command records its own start time
//! (`date +%s%3N` into a file of the run's directory: the minions run on this machine);
//! a result counts as stored when the daemon shows it: this daemon in `saltpeterctl runs`
//! (the target has an exit code), the original in its `{logdir}/{job}.log` (the
//! `####### END {machine} from {instance}` line closing the result block it writes once
//! the result is in its state). The driver polls both every 50 ms (20 ms for the
//! throughput), which bounds the resolution of the "stored" times.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::Timelike;

use super::setup::{Original, logged_firings, logged_output_len};
use crate::BenchError;
use crate::harness::{Daemon, ms};

/// A daemon under test, seen from outside.
pub trait Subject {
    /// `orig` or `ours`, for keys and file names.
    fn key(&self) -> &'static str;
    /// Replace its `jobs.yaml`.
    fn write_jobs(&self, yaml: &str) -> Result<(), BenchError>;
    /// Firings of `job` so far: (slot in Unix ms, machines with a stored result). The
    /// original names a firing by its second; its slot is that second rounded down to
    /// `period_s`.
    fn firings(&self, job: &str, period_s: i64) -> Vec<(i64, usize)>;
    /// Bytes of output stored for `machine` in `job`'s last firing.
    fn output_len(&self, job: &str, machine: &str) -> Option<usize>;
    /// Still running (the original's main loop dies on an uncaught exception).
    fn alive(&mut self) -> bool;
}

impl Subject for Original {
    fn key(&self) -> &'static str {
        "orig"
    }
    fn write_jobs(&self, yaml: &str) -> Result<(), BenchError> {
        Original::write_jobs(self, yaml)
    }
    fn firings(&self, job: &str, period_s: i64) -> Vec<(i64, usize)> {
        logged_firings(job, &self.job_log(job))
            .into_iter()
            .map(|f| {
                let slot = f.second - f.second.rem_euclid(period_s.max(1));
                (slot * 1000, f.machines.len())
            })
            .collect()
    }
    fn output_len(&self, job: &str, machine: &str) -> Option<usize> {
        logged_output_len(&self.job_log(job), machine)
    }
    fn alive(&mut self) -> bool {
        !self.exited()
    }
}

pub struct Ours(pub Daemon);

impl Ours {
    fn last_runs(&self, job: &str) -> Vec<serde_json::Value> {
        self.0
            .ctl_json(&["runs", job, "--limit", "20"])
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    }
}

impl Subject for Ours {
    fn key(&self) -> &'static str {
        "ours"
    }
    fn write_jobs(&self, yaml: &str) -> Result<(), BenchError> {
        self.0.write_config("jobs.yaml", yaml)
    }
    fn firings(&self, job: &str, _period_s: i64) -> Vec<(i64, usize)> {
        self.last_runs(job)
            .iter()
            .filter_map(|run| {
                let slot = ms(&run["slot"])?;
                let done = run["targets"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|t| !t["exit_code"].is_null())
                    .count();
                Some((slot, done))
            })
            .collect()
    }
    fn output_len(&self, job: &str, machine: &str) -> Option<usize> {
        let id = self.last_runs(job).first()?["id"].as_u64()?;
        let out = self.0.ctl(&["output", &id.to_string(), machine]).ok()?;
        out.status.success().then_some(out.stdout.len())
    }
    fn alive(&mut self) -> bool {
        true
    }
}

/// A job in the original's format (which this daemon reads too) on a list of minions.
/// `extra` is added as is (keys the original ignores).
pub fn job(
    name: &str,
    sec: &str,
    min: &str,
    minions: &[String],
    command: &str,
    extra: &str,
) -> String {
    format!(
        "{name}:\n  sec: '{sec}'\n  min: '{min}'\n  hour: '*'\n  dom: '*'\n  mon: '*'\n  \
         dow: '*'\n  targets: '{}'\n  target_type: list\n  command: '{command}'\n{extra}",
        minions.join(",")
    )
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Start times (Unix ms) a command appended to `file`, one a line.
fn read_stamps(file: &Path) -> Vec<i64> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Per firing after the first (which may load code or deploy a wrapper): the time from its
/// slot to the moment every minion's result was seen stored, in seconds.
pub struct FanOut {
    pub minions: usize,
    pub seconds: Vec<f64>,
    pub note: Option<String>,
}

pub fn fan_out(
    s: &mut dyn Subject,
    minions: &[String],
    firings: usize,
) -> Result<FanOut, BenchError> {
    const PERIOD: i64 = 20;
    s.write_jobs(&job("fan", "*/20", "*", minions, "sleep 1", ""))?;
    let n = minions.len();
    let mut seen: Vec<(i64, i64)> = Vec::new();
    let deadline = Duration::from_secs(PERIOD as u64 * (firings as u64 + 2) + 240);
    let begin = Instant::now();
    let mut note = None;
    while seen.len() <= firings {
        for (slot, done) in s.firings("fan", PERIOD) {
            if done >= n && !seen.iter().any(|(s, _)| *s == slot) {
                seen.push((slot, now_ms()));
            }
        }
        if !s.alive() {
            note = Some("the daemon exited during the fan-out".to_string());
            break;
        }
        if begin.elapsed() > deadline {
            note = Some(format!(
                "{} of {} firings had all {n} results within {} s",
                seen.len(),
                firings + 1,
                deadline.as_secs()
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    seen.sort();
    let seconds = seen
        .iter()
        .skip(1)
        .take(firings)
        .map(|(slot, at)| (at - slot) as f64 / 1000.0)
        .collect();
    Ok(FanOut {
        minions: n,
        seconds,
        note,
    })
}

/// Slot → command start on each minion, ms, over `firings` firings after the first.
pub struct SlotToCommand {
    pub late_ms: Vec<f64>,
    pub note: Option<String>,
}

pub fn slot_to_command(
    s: &mut dyn Subject,
    dir: &Path,
    minions: &[String],
    firings: usize,
) -> Result<SlotToCommand, BenchError> {
    const PERIOD: i64 = 15;
    let file = dir.join(format!("starts-{}", s.key()));
    let command = format!("date +%s%3N >> {}", file.display());
    s.write_jobs(&job("stamp", "*/15", "*", minions, &command, ""))?;
    let want = minions.len() * (firings + 1);
    let deadline = Duration::from_secs(PERIOD as u64 * (firings as u64 + 3) + 120);
    let begin = Instant::now();
    let mut note = None;
    while read_stamps(&file).len() < want {
        if !s.alive() || begin.elapsed() > deadline {
            note = Some(format!(
                "{} of {want} command starts within {} s",
                read_stamps(&file).len(),
                begin.elapsed().as_secs()
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Each start belongs to the slot just before it (the lateness is far below 15 s).
    let period_ms = PERIOD * 1000;
    let mut stamps = read_stamps(&file);
    stamps.sort();
    let first_slot = stamps.first().map(|t| t - t.rem_euclid(period_ms));
    let late_ms = stamps
        .iter()
        .filter(|t| Some(*t - t.rem_euclid(period_ms)) != first_slot)
        .take(minions.len() * firings)
        .map(|t| t.rem_euclid(period_ms) as f64)
        .collect();
    Ok(SlotToCommand { late_ms, note })
}

/// `seq 1 3000000` on one minion: from the command's start (it records it, then runs
/// `seq`) to its result with all output seen stored.
pub struct Throughput {
    /// Seconds from the command's start to the result seen stored.
    pub seconds: Option<f64>,
    /// Output bytes stored (22,888,896 expected).
    pub bytes: Option<usize>,
    pub note: Option<String>,
}

pub const SEQ_BYTES: usize = 22_888_896;

pub fn throughput(
    s: &mut dyn Subject,
    dir: &Path,
    minion: &str,
    deadline: Duration,
) -> Result<Throughput, BenchError> {
    let file = dir.join(format!("seq-start-{}", s.key()));
    let command = format!("date +%s%3N > {}; seq 1 3000000", file.display());
    // Once, 8 s from now: the second and minute of every hour (an expired one-off
    // schedule would end the original's main loop, weak point 12).
    let at = chrono::Utc::now() + chrono::Duration::seconds(8);
    let (sec, min) = (at.second().to_string(), at.minute().to_string());
    // This daemon keeps 1 MiB head + 1 MiB tail per target by default; all of it here.
    let extra = "  output_limit: 16777216\n";
    let minions = [minion.to_string()];
    s.write_jobs(&job("seqjob", &sec, &min, &minions, &command, extra))?;
    let begin = Instant::now();
    let mut note = None;
    let stored_at = loop {
        if s.firings("seqjob", 3600).iter().any(|(_, done)| *done >= 1) {
            break Some(now_ms());
        }
        if !s.alive() {
            note = Some("the daemon exited during the output throughput run".to_string());
            break None;
        }
        if begin.elapsed() > deadline + Duration::from_secs(8) {
            note = Some(seq_cut_off(deadline, &file));
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let start = read_stamps(&file).first().copied();
    let seconds = match (start, stored_at) {
        (Some(a), Some(b)) => Some((b - a) as f64 / 1000.0),
        _ => None,
    };
    let bytes = stored_at.and_then(|_| s.output_len("seqjob", minion));
    Ok(Throughput {
        seconds,
        bytes,
        note,
    })
}

/// What `seq` had written when the deadline passed (its `/proc/PID/io` `wchar`; the pipe
/// to the wrapper holds at most 64 KiB of it).
fn seq_cut_off(deadline: Duration, start_file: &Path) -> String {
    let written: u64 = crate::procstat::pids_with("seq 1 3000000")
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/io")).ok())
        .filter_map(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("wchar: "))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .max()
        .unwrap_or(0);
    let started = read_stamps(start_file).first().copied();
    let ran = started.map(|s| (now_ms() - s) as f64 / 1000.0);
    format!(
        "no stored result {} s after the slot; `seq` had written {:.1} MB of {:.1} MB{}",
        deadline.as_secs(),
        written as f64 / 1e6,
        SEQ_BYTES as f64 / 1e6,
        ran.map(|r| format!(" in {r:.0} s since its start"))
            .unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_in_the_originals_format_lists_its_minions() {
        let m = vec!["minion-01".to_string(), "minion-02".to_string()];
        let text = job("fan", "*/20", "*", &m, "sleep 1", "  output_limit: 1\n");
        assert!(text.starts_with("fan:\n  sec: '*/20'\n"));
        assert!(text.contains("targets: 'minion-01,minion-02'\n  target_type: list\n"));
        assert!(text.ends_with("command: 'sleep 1'\n  output_limit: 1\n"));
    }

    #[test]
    fn seq_output_size_is_what_seq_prints() {
        let digits: usize = (1..=3_000_000usize).map(|i| i.to_string().len() + 1).sum();
        assert_eq!(digits, SEQ_BYTES);
    }
}
