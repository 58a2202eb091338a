//! Job logs, in the original's terms: `{logdir}/{job}.log` files (rotated by size) and
//! one Elasticsearch/OpenSearch document per event, queued in the outbox as a bulk request.
//!
//! Written by db because db has the output and may block: appending a few KiB to a file
//! is the kind of wait the other loops must not have. A file that cannot be written is
//! reported and skipped: the run's record in the database is what counts.
//!
//! Formats (as the original's `main.py:log`):
//! - `start`: `###### Starting {instance} at {time} ################`
//! - `machine_result`: `########## {machine} from {instance} ################`,
//!   `**** Exit Code {code} ******`, the output, `####### END {machine} from {instance} at
//!   {time} #########`
//! - `end`: `###### Finished {instance} at {time} ################`
//! - `overlap`: `###### Overlap detected on {instance} at {time} ################`
//!
//! Documents: `{job_name, group, job_instance, @timestamp, return_code, machine, output,
//! msg_type}` in the index `{prefix}-YYYY.MM.DD` (the UTC date).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::storage::Storage;
use super::store::{Store, StoreError};
use crate::wire::db::OutputQuery;
use crate::wire::notify::{JobLog, JobLogEntry, NewDelivery, Outgoing};

/// Export requests waiting in the outbox beyond which new ones are dropped (and said so):
/// an export server down for days must not fill the disk.
const EXPORT_BACKLOG: i64 = 10_000;

fn time(at: i64) -> String {
    chrono::DateTime::from_timestamp_millis(at)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

fn block(log: &JobLog, e: &JobLogEntry, output: &str) -> String {
    let i = &log.instance;
    let at = time(e.at);
    let machine = e.machine.as_deref().unwrap_or("");
    match e.msg_type.as_str() {
        "start" => format!("###### Starting {i} at {at} ################\n"),
        "end" => format!("###### Finished {i} at {at} ################\n"),
        "overlap" => format!("###### Overlap detected on {i} at {at} ################\n"),
        _ => {
            let code = e.return_code.map(|c| c.to_string()).unwrap_or_default();
            let nl = if output.is_empty() || output.ends_with('\n') {
                ""
            } else {
                "\n"
            };
            format!(
                "########## {machine} from {i} ################\n**** Exit Code {code} ******\n{output}{nl}####### END {machine} from {i} at {at} #########\n"
            )
        }
    }
}

/// Append `text` to `path`, rotating first when the file is over `max_bytes`.
fn append(path: &Path, text: &str, max_bytes: u64, keep: u32) -> std::io::Result<()> {
    if let Ok(meta) = std::fs::metadata(path)
        && meta.len() + text.len() as u64 > max_bytes
        && meta.len() > 0
    {
        let name = |n: u32| path.with_extension(format!("log.{n}"));
        if keep == 0 {
            std::fs::remove_file(path)?;
        } else {
            for n in (1..keep).rev() {
                let _ = std::fs::rename(name(n), name(n + 1));
            }
            std::fs::rename(path, name(1))?;
        }
    }
    // Job logs hold command output: the daemon's user only, like the database.
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}

/// A file name for a job (job names are checked by the configuration, but a `/` must
/// never leave the directory).
fn file_name(job: &str) -> String {
    let clean: String = job
        .chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect();
    format!("{clean}.log")
}

impl Store {}

/// Write `log`'s events to the job's file and queue them for the exports (either backend).
pub(super) fn write_job_log<S: Storage + ?Sized>(
    store: &mut S,
    log: &JobLog,
    now: i64,
) -> Result<(), StoreError> {
    {
        let mut text = String::new();
        let mut docs = Vec::new();
        for e in &log.entries {
            let output = match (e.output_of_run, &e.machine) {
                (Some(run), Some(machine)) => store
                    .read_output(run, machine, &OutputQuery::default())
                    .map(|o| String::from_utf8_lossy(&o.data).into_owned())
                    .unwrap_or_default(),
                _ => String::new(),
            };
            text.push_str(&block(log, e, &output));
            docs.push((e, output));
        }
        if let Some(dir) = &log.logdir {
            let path = dir.join(file_name(&log.job));
            if let Err(e) = std::fs::create_dir_all(dir)
                .and_then(|()| append(&path, &text, log.max_bytes, log.keep))
            {
                log::warn!("could not write the job log {}: {e}", path.display());
            }
        }
        if log.exports.is_empty() {
            return Ok(());
        }
        let backlog: i64 = store.export_backlog().unwrap_or(0);
        if backlog >= EXPORT_BACKLOG {
            log::warn!(
                "{backlog} export requests wait already; {} events of {} are not exported",
                log.entries.len(),
                log.instance
            );
            return Ok(());
        }
        let mut new = Vec::new();
        for dest in &log.exports {
            let mut body = String::new();
            for (e, output) in &docs {
                let ts = chrono::DateTime::from_timestamp_millis(e.at).unwrap_or_default();
                let index = format!("{}-{}", dest.index, ts.format("%Y.%m.%d"));
                body.push_str(&serde_json::json!({ "index": { "_index": index } }).to_string());
                body.push('\n');
                let doc = serde_json::json!({
                    "job_name": log.job,
                    "group": log.group,
                    "job_instance": log.instance,
                    "@timestamp": crate::wire::records::rfc3339(ts.timestamp_millis()),
                    "return_code": e.return_code,
                    "machine": e.machine,
                    "output": output,
                    "msg_type": e.msg_type,
                });
                body.push_str(&doc.to_string());
                body.push('\n');
            }
            let first = log.entries.first();
            new.push(NewDelivery {
                key: format!(
                    "export:{}:{}:{}:{}",
                    dest.name,
                    log.instance,
                    first.map(|e| e.msg_type.as_str()).unwrap_or(""),
                    first.map(|e| e.at).unwrap_or(now)
                ),
                job: Some(log.job.clone()),
                run: log.run,
                event: "export".to_string(),
                message: Outgoing::Bulk {
                    url: format!("{}/_bulk", dest.url),
                    body,
                },
                now,
            });
        }
        store.queue_deliveries(&new).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_rotate_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        append(&path, "aaaa\n", 8, 2).unwrap();
        append(&path, "bbbb\n", 8, 2).unwrap();
        append(&path, "cccc\n", 8, 2).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "cccc\n");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("j.log.1")).unwrap(),
            "bbbb\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("j.log.2")).unwrap(),
            "aaaa\n"
        );
        assert_eq!(file_name("a/b"), "a_b.log");
    }
}
