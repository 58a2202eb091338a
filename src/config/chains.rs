//! Chains of jobs (`after: {job, on}`), checked across all jobs once each is validated.
//!
//! Each job names at most one upstream job, so the chains form a graph where every node has
//! at most one outgoing edge: following `after` from any job either ends or comes back to a
//! job already seen, which is then on a cycle. A cycle is an error at the `after` key of
//! every job on it, naming the whole cycle, and those jobs are disabled (a cycle would run
//! forever). An `after` naming no job at all is an error too: the chain could never fire.

use std::collections::{BTreeMap, BTreeSet};

use super::diagnostic::{Diagnostic, Severity};
use super::entries::{InvalidJob, JobEntry};
use super::values::diagnostic;
use super::yaml::Pos;

/// Check every job's `after`; jobs on a cycle or chained to a missing job become invalid.
pub(super) fn check_chains(jobs: &mut BTreeMap<String, JobEntry>, out: &mut Vec<Diagnostic>) {
    let upstream: BTreeMap<&str, &str> = jobs
        .values()
        .filter_map(|e| e.job())
        .filter_map(|j| j.after.as_ref().map(|a| (j.name.as_str(), a.job.as_str())))
        .collect();
    let mut bad: BTreeMap<String, String> = BTreeMap::new();
    for (job, up) in &upstream {
        if !jobs.contains_key(*up) {
            bad.insert(
                job.to_string(),
                format!("`after`: there is no job named `{up}`, so this job would never run"),
            );
        }
    }
    let mut on_cycle: BTreeSet<&str> = BTreeSet::new();
    for start in upstream.keys() {
        if on_cycle.contains(start) {
            continue;
        }
        // Walk at most as many steps as there are chained jobs: a longer walk is looping.
        let mut path: Vec<&str> = vec![start];
        let mut current = *start;
        while let Some(next) = upstream.get(current) {
            if let Some(at) = path.iter().position(|j| j == next) {
                let cycle = &path[at..];
                let mut names: Vec<&str> = cycle.to_vec();
                names.push(next);
                let text = names.join(" -> ");
                for job in cycle {
                    on_cycle.insert(job);
                    bad.insert(
                        job.to_string(),
                        format!(
                            "`after` makes a cycle of chained jobs: {text}; none of them runs \
                             until the cycle is broken"
                        ),
                    );
                }
                break;
            }
            if path.len() > upstream.len() {
                break;
            }
            path.push(next);
            current = next;
        }
    }
    for (name, message) in bad {
        let Some(JobEntry::Valid(job)) = jobs.get(&name) else {
            continue;
        };
        let pos = job.after.as_ref().map_or(
            Pos {
                line: job.line,
                column: 1,
            },
            |a| Pos {
                line: a.line,
                column: a.column,
            },
        );
        let d = diagnostic(&job.file, Severity::Error, pos, Some(&name), message);
        out.push(d.clone());
        let invalid = JobEntry::Invalid(Box::new(InvalidJob {
            name: name.clone(),
            group: job.group.to_string(),
            file: job.file.to_path_buf(),
            line: job.line,
            errors: vec![d],
        }));
        jobs.insert(name, invalid);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{LoadedConfig, load_dir};

    fn write(dir: &Path, name: &str, text: &str) {
        if let Err(e) = std::fs::write(dir.join(name), text) {
            panic!("{e}");
        }
    }

    fn load(dir: &Path, previous: Option<&LoadedConfig>) -> LoadedConfig {
        match load_dir(dir, previous, chrono::Utc::now()) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn breaking_a_cycle_in_another_file_brings_the_unchanged_job_back() {
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        };
        write(
            dir.path(),
            "a.yaml",
            "a:\n  after: {job: b}\n  targets: x\n  command: 'true'\n",
        );
        write(
            dir.path(),
            "b.yaml",
            "b:\n  after: {job: a, on: failure}\n  targets: x\n  command: 'true'\n",
        );
        let first = load(dir.path(), None);
        assert_eq!(first.valid_jobs().count(), 0, "{:?}", first.diagnostics);
        let cycle: Vec<String> = first.diagnostics.iter().map(|d| d.to_string()).collect();
        assert_eq!(cycle.len(), 2, "{cycle:?}");
        assert!(cycle[0].contains("a.yaml:2:10"), "{cycle:?}");
        assert!(cycle[0].contains("a -> b -> a"), "{cycle:?}");
        assert!(cycle[1].contains("b.yaml:2:10"), "{cycle:?}");
        // b.yaml is rewritten (a.yaml is not): a is read again, not reused as invalid.
        std::thread::sleep(std::time::Duration::from_millis(20));
        write(
            dir.path(),
            "b.yaml",
            "b:\n  schedule: '@daily'\n  targets: x\n  command: 'true'\n",
        );
        let second = load(dir.path(), Some(&first));
        assert_eq!(second.valid_jobs().count(), 2, "{:?}", second.diagnostics);
        let a = second.valid_jobs().find(|j| j.name == "a");
        assert!(a.is_some_and(|j| !j.scheduled && j.after.is_some()));
    }

    #[test]
    fn bad_windows_are_reported_at_their_lines() {
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        };
        write(
            dir.path(),
            "m.yaml",
            "saltpeter_maintenance:\n  windows:\n    - name: ok\n      schedule: '0 2 * * 0'\n      \
             duration: 1h30m\n      timezone: Europe/Berlin\n    - name: bad\n      \
             schedule: '0 2 * * 0'\n      duration: 2 hours\n      policy: later\n    - name: \
             both\n      start: '2026-03-29 02:30'\n      end: '2026-03-29 04:00'\n      \
             timezone: Europe/Berlin\n",
        );
        let c = load(dir.path(), None);
        let text: Vec<String> = c.diagnostics.iter().map(|d| d.to_string()).collect();
        assert_eq!(c.maintenance.windows.len(), 1, "{text:?}");
        assert_eq!(c.maintenance.windows[0].name, "ok");
        assert!(
            text.iter()
                .any(|d| d.contains("m.yaml:9:") && d.contains("expected a duration")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|d| d.contains("m.yaml:10:") && d.contains("skip or defer")),
            "{text:?}"
        );
        // 02:30 does not exist in Berlin on 2026-03-29 (spring forward).
        assert!(
            text.iter()
                .any(|d| d.contains("m.yaml:12:") && d.contains("does not exist")),
            "{text:?}"
        );
    }
}
