//! The Salt testbed a herd runs on (`scripts/bench` starts it with 10 minions when `herd`
//! runs): its minions, the CPU of its master and of its minions (their process trees,
//! found from the testbed's pid files), a fleet made to forget the wrapper, and what the
//! master published (its job cache, through `salt-run jobs.list_jobs`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::BenchError;
use crate::procstat;

/// How many minions a herd targets: `SP_BENCH_HERD_MINIONS` (10; e.g. 30 for the daemon's
/// CPU per firing on a larger testbed), at most the testbed's.
pub fn herd_minions_count() -> usize {
    std::env::var("SP_BENCH_HERD_MINIONS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(10)
}

pub struct Testbed {
    pub salt_bin: String,
    pub master_dir: String,
    pub root: PathBuf,
    pub minions: Vec<String>,
}

/// One publish of the master, from its job cache.
#[derive(Clone, Debug, PartialEq)]
pub struct Publish {
    /// Its job id's time, Unix ms.
    pub at_ms: i64,
    pub function: String,
    /// The minions it was sent to (of the testbed's).
    pub minions: Vec<String>,
}

/// CPU seconds the testbed's long-lived processes and everything they forked and reaped
/// have used so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct SaltCpu {
    pub master: f64,
    pub minions: f64,
}

impl std::ops::Sub for SaltCpu {
    type Output = SaltCpu;
    fn sub(self, o: SaltCpu) -> SaltCpu {
        SaltCpu {
            master: self.master - o.master,
            minions: self.minions - o.minions,
        }
    }
}

/// How long `salt-run jobs.list_jobs` may take (it reads every job of the cache).
const LIST_JOBS_DEADLINE: Duration = Duration::from_secs(180);

fn var(name: &str) -> Result<String, BenchError> {
    std::env::var(name).map_err(|_| {
        BenchError::Setup(format!(
            "{name} is not set: run through scripts/bench, which starts a Salt testbed"
        ))
    })
}

impl Testbed {
    pub fn from_env() -> Result<Testbed, BenchError> {
        let minions: Vec<String> = var("SALT_MINIONS")?
            .split(',')
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .collect();
        if minions.len() < herd_minions_count() {
            return Err(BenchError::Setup(format!(
                "the herd needs {} minions, the testbed has {} (scripts/bench \
                 starts 10 when herd runs)",
                herd_minions_count(),
                minions.len()
            )));
        }
        Ok(Testbed {
            salt_bin: var("SALT_BIN")?,
            master_dir: var("SALT_CONFIG_DIR")?,
            root: PathBuf::from(var("SALT_TESTBED_ROOT")?),
            minions,
        })
    }

    /// The first `herd_minions_count()` minions: what a herd targets.
    pub fn herd_minions(&self) -> &[String] {
        &self.minions[..herd_minions_count().min(self.minions.len())]
    }

    /// The pid `scripts/salt-testbed` recorded for its daemon `name`.
    fn pid(&self, name: &str) -> Option<u32> {
        std::fs::read_to_string(self.root.join("run").join(format!("{name}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    pub fn cpu(&self) -> SaltCpu {
        let sum = |roots: &[u32]| -> f64 {
            procstat::forest(roots)
                .into_iter()
                .map(procstat::cpu_with_children_secs)
                .sum()
        };
        let master: Vec<u32> = self.pid("master").into_iter().collect();
        let minions: Vec<u32> = self.minions.iter().filter_map(|m| self.pid(m)).collect();
        SaltCpu {
            master: sum(&master),
            minions: sum(&minions),
        }
    }

    /// Wait (at most `deadline`) until the master and minions use less than a tenth of a
    /// core over 2 s: the work a previous herd left queued on the minions is done.
    pub fn settle(&self, deadline: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < deadline {
            let before = self.cpu();
            std::thread::sleep(Duration::from_secs(2));
            let used = self.cpu() - before;
            if used.master + used.minions < 0.2 {
                return true;
            }
        }
        false
    }

    /// A fleet that never had the wrapper: its file at `wrapper_path` (one file: the
    /// testbed's minions are processes of this host) and the minions' cached copies of
    /// what the master served them.
    pub fn forget_wrapper(&self, wrapper_path: &Path) -> Result<(), BenchError> {
        match std::fs::remove_file(wrapper_path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(BenchError::io("remove the deployed wrapper")(e)),
        }
        for m in &self.minions {
            let cached = self.root.join("cache").join(m).join("files");
            if cached.exists() {
                std::fs::remove_dir_all(&cached)
                    .map_err(BenchError::io("remove a minion's file cache"))?;
            }
        }
        Ok(())
    }

    /// Every publish in the master's job cache.
    pub fn publishes(&self, scratch: &Path) -> Result<Vec<Publish>, BenchError> {
        let salt_run = Path::new(&self.salt_bin).with_file_name("salt-run");
        let out_path = scratch.join("list_jobs.json");
        let err_path = scratch.join("list_jobs.err");
        let out = std::fs::File::create(&out_path).map_err(BenchError::io("list_jobs.json"))?;
        let err = std::fs::File::create(&err_path).map_err(BenchError::io("list_jobs.err"))?;
        let mut child = Command::new(&salt_run)
            .arg("-c")
            .arg(&self.master_dir)
            .args(["jobs.list_jobs", "--out=json", "--out-indent=-1"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(BenchError::io("start salt-run"))?;
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child
                .try_wait()
                .map_err(BenchError::io("wait for salt-run"))?
            {
                break status;
            }
            if start.elapsed() > LIST_JOBS_DEADLINE {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BenchError::Timeout(format!(
                    "salt-run jobs.list_jobs ({} s)",
                    LIST_JOBS_DEADLINE.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let text = std::fs::read(&out_path).map_err(BenchError::io("list_jobs.json"))?;
        if !status.success() {
            return Err(BenchError::Setup(format!(
                "salt-run jobs.list_jobs: {status}: {}",
                std::fs::read_to_string(&err_path)
                    .unwrap_or_default()
                    .trim()
            )));
        }
        let jobs: Value = serde_json::from_slice(&text).map_err(|e| {
            BenchError::Setup(format!("salt-run jobs.list_jobs printed no JSON: {e}"))
        })?;
        Ok(parse_jobs(&jobs, &self.minions))
    }
}

/// The publishes of a `jobs.list_jobs` answer (`{jid: {Function, Target, Target-type,
/// ...}}`), oldest first; runner and wheel jobs (`salt-run` itself) are not publishes.
pub fn parse_jobs(jobs: &Value, minions: &[String]) -> Vec<Publish> {
    let mut out: Vec<Publish> = jobs
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(jid, job)| {
            let function = job["Function"].as_str()?;
            if function.starts_with("runner.") || function.starts_with("wheel.") {
                return None;
            }
            Some(Publish {
                at_ms: jid_ms(jid)?,
                function: function.to_string(),
                minions: published_to(job, minions),
            })
        })
        .collect();
    out.sort_by_key(|p| p.at_ms);
    out
}

/// The minions a job was published to: a list as given, a glob matched against
/// `minions`, any other target type counted for all of them.
fn published_to(job: &Value, minions: &[String]) -> Vec<String> {
    let named: Vec<String> = match (&job["Target"], job["Target-type"].as_str()) {
        (Value::Array(items), _) => items
            .iter()
            .filter_map(|m| m.as_str().map(str::to_string))
            .collect(),
        (Value::String(s), Some("list")) => s.split(',').map(|m| m.trim().to_string()).collect(),
        (Value::String(s), Some("glob")) => minions
            .iter()
            .filter(|m| glob_matches(s.as_bytes(), m.as_bytes()))
            .cloned()
            .collect(),
        _ => minions.to_vec(),
    };
    minions
        .iter()
        .filter(|m| named.contains(m))
        .cloned()
        .collect()
}

/// A Salt glob (`*`, `?`, `[...]`) against a minion id.
pub fn glob_matches(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob_matches(&pattern[1..], name)
                || (!name.is_empty() && glob_matches(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => glob_matches(&pattern[1..], &name[1..]),
        (Some(b'['), Some(c)) => match pattern.iter().position(|b| *b == b']') {
            Some(end) => {
                let class = &pattern[1..end];
                let hit = class
                    .windows(3)
                    .any(|w| w[1] == b'-' && w[0] <= *c && *c <= w[2])
                    || class.contains(c);
                hit && glob_matches(&pattern[end + 1..], &name[1..])
            }
            None => false,
        },
        (Some(p), Some(c)) => p == c && glob_matches(&pattern[1..], &name[1..]),
        _ => false,
    }
}

/// Unix ms of a Salt job id (`YYYYMMDDhhmmssffffff`, the master's local time).
pub fn jid_ms(jid: &str) -> Option<i64> {
    use chrono::TimeZone;
    let at = chrono::NaiveDateTime::parse_from_str(jid.get(..14)?, "%Y%m%d%H%M%S").ok()?;
    let micros: i64 = jid.get(14..20)?.parse().ok()?;
    let local = chrono::Local.from_local_datetime(&at).earliest()?;
    Some(local.timestamp_millis() + micros / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minions() -> Vec<String> {
        (1..=3).map(|i| format!("minion-{i:02}")).collect()
    }

    #[test]
    fn publishes_come_from_the_job_cache_with_their_minions() {
        let jobs = serde_json::json!({
            "20261127145218883517": {"Function": "saltutil.find_job",
                "Arguments": ["20261127145217773524"],
                "Target": ["minion-02", "minion-01"], "Target-type": "list"},
            "20261127145217773524": {"Function": "cmd.run_all", "Arguments": [],
                "Target": "*", "Target-type": "glob"},
            "20261127145219000000": {"Function": "state.single", "Arguments": [],
                "Target": "minion-03,minion-09", "Target-type": "list"},
            "20261127145214515376": {"Function": "runner.jobs.list_jobs",
                "Target": "vm_master", "Target-type": "list"},
            "20261127145220000000": {"Function": "test.ping",
                "Target": "G@role:web", "Target-type": "compound"}
        });
        let p = parse_jobs(&jobs, &minions());
        let seen: Vec<(&str, Vec<String>)> = p
            .iter()
            .map(|p| (p.function.as_str(), p.minions.clone()))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("cmd.run_all", minions()),
                (
                    "saltutil.find_job",
                    vec!["minion-01".into(), "minion-02".into()]
                ),
                ("state.single", vec!["minion-03".into()]),
                ("test.ping", minions()),
            ]
        );
        assert_eq!(p[1].at_ms - p[0].at_ms, 1_110);
    }

    #[test]
    fn salt_globs_match_minion_ids() {
        let m = |p: &str, n: &str| glob_matches(p.as_bytes(), n.as_bytes());
        assert!(m("*", "minion-01"));
        assert!(m("minion-0[1-3]", "minion-02"));
        assert!(!m("minion-0[1-3]", "minion-04"));
        assert!(m("minion-?1", "minion-01"));
        assert!(!m("minion-01", "minion-010"));
    }

    #[test]
    fn job_ids_are_the_masters_local_time() {
        use chrono::TimeZone;
        let at = chrono::Local
            .with_ymd_and_hms(2026, 11, 27, 14, 52, 12)
            .earliest()
            .expect("a local time");
        assert_eq!(
            jid_ms("20261127145212641501"),
            Some(at.timestamp_millis() + 641)
        );
        assert_eq!(jid_ms("2026"), None);
    }
}
