//! What one firing of the fleet job cost: CPU of each daemon process and of the
//! generator, their peak memory, db's commits, and when each target's command started.

use serde_json::Value;

use crate::harness::ms;
use crate::procstat;
use crate::simfleet::INTERPRETER_NAME;

/// The daemon's processes, and how to find the generator and the db's commit count.
pub struct Probe {
    processes: Vec<(String, u32)>,
    api_port: u16,
}

/// CPU and commit counters at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    cpu_ns: Vec<(String, u64)>,
    generator_ns: u64,
    commits: Option<f64>,
}

impl Probe {
    pub fn new(processes: Vec<(String, u32)>, api_port: u16) -> Probe {
        Probe {
            processes,
            api_port,
        }
    }

    /// The stand-in bridge: blocking's child started as `python3-simfleet`.
    fn generator(&self) -> Option<u32> {
        let blocking = self.processes.iter().find(|(r, _)| r == "blocking")?.1;
        procstat::tree(blocking).into_iter().skip(1).find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(INTERPRETER_NAME))
        })
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            cpu_ns: self
                .processes
                .iter()
                .map(|(role, pid)| (role.clone(), procstat::cpu_ns(*pid)))
                .collect(),
            generator_ns: self.generator().map(procstat::cpu_ns).unwrap_or(0),
            commits: self.commits(),
        }
    }

    /// Start a new peak (`VmHWM`) for every daemon process: writing 5 to `clear_refs`
    /// resets it to the current RSS (the daemon runs as this user).
    pub fn reset_peaks(&self) {
        for (_, pid) in &self.processes {
            let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
        }
    }

    pub fn peaks(&self) -> Vec<(String, u64)> {
        self.processes
            .iter()
            .map(|(role, pid)| (role.clone(), procstat::peak_rss_kib(*pid)))
            .collect()
    }

    /// db's batch transactions so far: the count of `saltpeter_db_commit_seconds` in
    /// `/metrics` (db observes one commit latency per batch and reports them to main
    /// within 2 s). The API is TLS with the daemon's self-signed certificate: `curl -k`.
    fn commits(&self) -> Option<f64> {
        let out = std::process::Command::new("curl")
            .args(["-sk", "--max-time", "10"])
            .arg(format!("https://127.0.0.1:{}/metrics", self.api_port))
            .output()
            .ok()?;
        parse_commit_count(&String::from_utf8_lossy(&out.stdout))
    }
}

pub fn parse_commit_count(metrics: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with("saltpeter_db_commit_seconds_count"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// The ends of the fleet job's runs, from the daemon's log: asking the daemon (`runs`)
/// while it works would cost it a read and a rendering of every target of the run, 20
/// times a second, and that would be measured as the firing's cost.
pub struct EndWatch {
    path: std::path::PathBuf,
    offset: u64,
    partial: String,
    pub ended: Vec<u64>,
}

impl EndWatch {
    pub fn new(path: &std::path::Path) -> EndWatch {
        EndWatch {
            path: path.to_path_buf(),
            offset: 0,
            partial: String::new(),
            ended: Vec::new(),
        }
    }

    /// Read what the log gained since the last call; the runs ended so far, in order.
    pub fn poll(&mut self) -> &[u64] {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return &self.ended;
        };
        let mut bytes = Vec::new();
        if f.seek(SeekFrom::Start(self.offset)).is_ok() && f.read_to_end(&mut bytes).is_ok() {
            self.offset += bytes.len() as u64;
            self.partial.push_str(&String::from_utf8_lossy(&bytes));
        }
        let complete = self.partial.rfind('\n').map_or(0, |i| i + 1);
        for line in self.partial[..complete].lines() {
            if let Some(run) = run_ended(line) {
                self.ended.push(run);
            }
        }
        self.partial.drain(..complete);
        &self.ended
    }
}

/// `... main: run 12 of fleet ended` → 12.
pub fn run_ended(line: &str) -> Option<u64> {
    let rest = line.split_once("main: run ")?.1;
    let (id, tail) = rest.split_once(' ')?;
    (tail == "of fleet ended").then(|| id.parse().ok())?
}

/// One firing, measured.
#[derive(Clone, Debug)]
pub struct Firing {
    cpu: Vec<(String, u64)>,
    pub generator_ns: u64,
    pub peaks_kib: Vec<(String, u64)>,
    pub commits: Option<f64>,
    /// Slot → command started, per target that started.
    pub starts_ms: Vec<f64>,
    pub targets: usize,
    pub ok: usize,
}

impl Firing {
    pub fn new(
        before: &Snapshot,
        after: &Snapshot,
        record: &Value,
        peaks: Vec<(String, u64)>,
    ) -> Firing {
        let cpu = after
            .cpu_ns
            .iter()
            .map(|(role, ns)| {
                let was = before
                    .cpu_ns
                    .iter()
                    .find(|(r, _)| r == role)
                    .map_or(0, |(_, v)| *v);
                (role.clone(), ns.saturating_sub(was))
            })
            .collect();
        let slot = ms(&record["slot"]).or_else(|| ms(&record["started"]));
        let targets = record["targets"].as_array().cloned().unwrap_or_default();
        let starts_ms = targets
            .iter()
            .filter_map(|t| Some((ms(&t["started"])? - slot?) as f64))
            .collect();
        Firing {
            cpu,
            generator_ns: after.generator_ns.saturating_sub(before.generator_ns),
            peaks_kib: peaks,
            commits: match (before.commits, after.commits) {
                (Some(b), Some(a)) => Some(a - b),
                _ => None,
            },
            starts_ms,
            targets: targets.len(),
            ok: targets.iter().filter(|t| t["exit_code"] == 0).count(),
        }
    }

    pub fn cpu_ns(&self, role: &str) -> u64 {
        self.cpu
            .iter()
            .find(|(r, _)| r == role)
            .map_or(0, |(_, v)| *v)
    }

    pub fn daemon_ns(&self) -> u64 {
        self.cpu.iter().map(|(_, v)| v).sum()
    }

    pub fn summary(&self, n: usize) -> String {
        let ms_per = |ns: u64| ns as f64 / 1e6 / n.max(1) as f64;
        let roles: Vec<String> = self
            .cpu
            .iter()
            .map(|(r, ns)| format!("{r} {:.3}", ms_per(*ns)))
            .collect();
        format!(
            "{}/{} ok, daemon {:.3} ms/target ({}), generator {:.3}, commits {}",
            self.ok,
            self.targets,
            ms_per(self.daemon_ns()),
            roles.join(", "),
            ms_per(self.generator_ns),
            self.commits.map_or("?".into(), |c| format!("{c:.0}"))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ends_are_read_from_the_log() {
        assert_eq!(
            run_ended("2026-11-27T18:00:26.570Z INFO  main: run 12 of fleet ended"),
            Some(12)
        );
        assert_eq!(run_ended("INFO  main: run 1 of fleetx ended"), None);
        assert_eq!(run_ended("INFO  main: run 1: sim2 finished"), None);
    }

    #[test]
    fn the_commit_count_comes_from_the_histogram() {
        let text = "# TYPE saltpeter_db_commit_seconds histogram\n\
                    saltpeter_db_commit_seconds_bucket{le=\"+Inf\"} 12\n\
                    saltpeter_db_commit_seconds_sum 0.5\n\
                    saltpeter_db_commit_seconds_count 12\n";
        assert_eq!(parse_commit_count(text), Some(12.0));
        assert_eq!(parse_commit_count("nothing"), None);
    }
}
