//! Chains of jobs (`after: {job, on}`), checked across all jobs once each is validated.
//!
//! Each job names at most one upstream job, so the chains form a graph where every node has
//! at most one outgoing edge: following `after` from any job either ends or comes back to a
//! job already seen, which is then on a cycle. A cycle is an error at the `after` key of
//! every job on it, naming the whole cycle, and those jobs are disabled (a cycle would run
//! forever). An `after` naming no job at all is an error too: the chain could never fire.

use std::collections::{BTreeMap, BTreeSet};

use super::values::diagnostic;
use super::yaml::Pos;
use super::{Diagnostic, InvalidJob, JobEntry, Severity};

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
        let invalid = JobEntry::Invalid(InvalidJob {
            name: name.clone(),
            group: job.group.clone(),
            file: job.file.clone(),
            line: job.line,
            errors: vec![d],
        });
        jobs.insert(name, invalid);
    }
}
