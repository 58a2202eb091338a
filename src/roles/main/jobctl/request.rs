//! `saltpeterctl jobs pause|resume|skip|show` (and the HTTP API's job control): change a
//! job's control, record the change, persist it; the answer goes out once db committed.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::{Control, JobCtl, Pause, rfc3339, who};
use crate::config::JobEntry;
use crate::ipc::CallId;
use crate::roles::main::messages::{Event, Out};
use crate::wire::admin::{AdminFailure, AdminResponse, JobControl};

/// Most slots one `skip --next` may skip.
pub(super) const MAX_SKIP: u32 = 10_000;

impl JobCtl {
    /// Apply a `pause`, `resume`, `skip` or show request (admin call `call`, by the
    /// operator with uid `by`) at `now`, for a job among the configured `jobs`.
    pub(crate) fn request(
        &mut self,
        call: CallId,
        change: JobControl,
        jobs: &BTreeMap<String, JobEntry>,
        by: Option<u32>,
        now: DateTime<Utc>,
    ) -> Out {
        let mut out = Out::new();
        let job = match &change {
            JobControl::Show => {
                out.answer(call, AdminResponse::JobControl(self.info(None)));
                return out;
            }
            JobControl::Pause { job, .. }
            | JobControl::Resume { job }
            | JobControl::Skip { job, .. } => job.clone(),
        };
        // Resuming a job that is no longer configured is allowed: it cleans up its state.
        if !jobs.contains_key(&job) && !matches!(change, JobControl::Resume { .. }) {
            let failure = AdminFailure::NotFound(format!("no job named {job}"));
            out.answer(call, AdminResponse::Failure(failure));
            return out;
        }
        let entry = self.state.jobs.entry(job.clone()).or_default();
        let note = match change {
            JobControl::Show => None,
            JobControl::Pause { until, .. } => {
                if let Some(u) = until
                    && u <= now.timestamp_millis()
                {
                    self.forget_empty();
                    let failure =
                        AdminFailure::Invalid(format!("--until {} has already passed", rfc3339(u)));
                    out.answer(call, AdminResponse::Failure(failure));
                    return out;
                }
                entry.paused = Some(Pause {
                    by,
                    at: now.timestamp_millis(),
                    until,
                });
                Some(match until {
                    Some(u) => format!("{job} is paused until {}", rfc3339(u)),
                    None => format!("{job} is paused until `saltpeterctl resume {job}`"),
                })
            }
            JobControl::Resume { .. } => {
                let was = entry.paused.take().is_some() || entry.skip_next > 0;
                entry.skip_next = 0;
                Some(if was {
                    format!("{job} is resumed: its slots run again")
                } else {
                    format!("{job} was neither paused nor skipping")
                })
            }
            JobControl::Skip { next, .. } => {
                if !(1..=MAX_SKIP).contains(&next) {
                    self.forget_empty();
                    let failure =
                        AdminFailure::Invalid(format!("--next {next} must be 1-{MAX_SKIP}"));
                    out.answer(call, AdminResponse::Failure(failure));
                    return out;
                }
                entry.skip_next = next;
                entry.skip_by = by;
                Some(format!("the next {next} slot(s) of {job} are skipped"))
            }
        };
        self.forget_empty();
        let message = format!("{} (by {})", note.clone().unwrap_or_default(), who(by));
        log::warn!("{message}");
        out.event(Event {
            kind: "job_control",
            job: Some(job),
            run: None,
            machine: None,
            message,
        });
        out.extend(self.save(Some(call), note));
        out
    }

    /// Drop the jobs with nothing set (they are absent from the stored state).
    fn forget_empty(&mut self) {
        self.state.jobs.retain(|_, c| *c != Control::default());
    }
}
