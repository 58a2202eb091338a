//! Notifications, main's part: decide at a run's end (or a skipped slot) which rules fire,
//! queue the messages in db's outbox, and pump the outbox through blocking.
//!
//! Outline:
//! 1. `run_ended` (the run Workflow's `finalize`) and `slot_skipped` (a slot not run)
//!    match the rules (the job's `notify`, else `saltpeter_config.notify`) against what
//!    happened (`notify::fires`); a run's message waits for its targets' output tails
//!    (one db read), then each firing rule becomes one message, rendered and signed now,
//!    keyed `run:<id>:<end>:<channel>:<destination>` (`<end>`: its state, `+lost` when a
//!    target was lost) so each end is queued once (db ignores a repeat; a corrected end
//!    is a new message),
//!    unless the job's hourly rate limit is spent (recorded as `notification_suppressed`).
//! 2. `take_due` (every second, and at once after queuing or an answer) leases the due
//!    messages from db, at most `MAX_IN_FLIGHT` (4) at a time, and asks blocking to send each
//!    (`BlockingRequest::Deliver`, a helper process with a deadline) (`outbox.rs`).
//! 3. Each answer (`Message::DeliveryAnswered`) is recorded: delivered, or failed with its
//!    cause and the next try (`notify::retry_delay`), or given up; each is an audit event.
//! 4. `saltpeterctl deliveries` lists the outbox, webhook URLs cut to their host for
//!    readers who are not admins (`deliveries.rs`).
//! 5. `/metrics` reads the outbox's numbers through [`Notifier::outbox`] (`counts.rs`).
//!
//! Nothing here waits: every step is a message, so a dead receiver costs a helper process
//! in blocking and a row in db, and main's loop carries on. At start, what was leased when
//! the daemon stopped is released (sent again: at-least-once, and receivers can drop a
//! repeat by `X-Saltpeter-Delivery`).
//!
//! [`Notifier`] is the part: its state is private and changes only through its methods,
//! which take the time and the settings they need and return what to do (`messages::Out`);
//! db's and blocking's answers come back as messages (`shell/dispatch.rs`).

mod counts;
pub(crate) mod deliveries;
mod outbox;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use crate::config::notify::{Channel, NotifyOn, NotifyRule};
use crate::config::{Job, SaltpeterConfig};
use crate::ipc::rpc::Call;
use crate::notify::{self, Facts, Notice, RateLimiter, TargetNote};
use crate::roles::main::messages::{DbResult, Decided, Event, Message, Out, Then};
use crate::wire::db::{DbRequest, calls};
use crate::wire::notify::{NewDelivery, Outgoing};
use crate::wire::records::{Millis, RunId, RunState, TargetReason, TargetRecord};

pub(crate) use counts::{DELIVERY_RESULTS, Outbox};

/// The notifications part: what it remembers of each job, and the outbox's pump.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    limiter: RateLimiter,
    /// Each job's last final state (skips not counted), for `recovery`.
    last: HashMap<String, RunState>,
    /// Messages sent to blocking and not answered yet.
    in_flight: usize,
    /// A take is on its way to db.
    taking: bool,
    /// When the outbox may next have something due; `None`: nothing pending.
    due_at: Option<Millis>,
    /// The outbox as db last counted it, and attempts by result (`/metrics`).
    outbox: Outbox,
}

/// A run's end, as the notifications of it need it.
pub(crate) struct FinishedRun<'a> {
    pub job: &'a Job,
    pub run: RunId,
    pub slot: Option<Millis>,
    /// `schedule`, `manual`, ... (`Trigger::as_str`).
    pub trigger: &'a str,
    pub state: RunState,
    /// Why the run ended as it did, when main decided it (an unresolved end).
    pub reason: Option<String>,
    pub targets: Vec<TargetRecord>,
}

impl Notifier {
    /// At start (the leader): release the leases of the last life, learn the last
    /// states, look for work.
    pub(crate) fn start(&mut self, now: Millis) -> Out {
        let mut out = Out::new();
        out.db(
            DbRequest::ReleaseDeliveryLeases { now },
            Then::Write("released notification leases"),
        );
        out.db(
            DbRequest::LastRuns,
            Then::tell(|result| Message::NotifyLastRuns { result }),
        );
        self.due_at = Some(0);
        out
    }

    /// db's newest run of every job: each job's last final state, unless a run ended
    /// since.
    pub(crate) fn last_runs(&mut self, result: DbResult) {
        match calls::LastRuns::take(result) {
            Ok(runs) => {
                for (job, run) in runs {
                    if run.state.is_final() && run.state != RunState::Skipped {
                        self.last.entry(job).or_insert(run.state);
                    }
                }
            }
            Err(e) => log::warn!("notifications: last runs not loaded: {e}"),
        }
    }

    /// Every second: send what is due.
    pub(crate) fn tick(&mut self, now: Millis) -> Out {
        if self.due_at.is_some_and(|at| at <= now) {
            self.take_due(now)
        } else {
            Out::new()
        }
    }

    /// The outbox's numbers, for `/metrics`.
    pub(crate) fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// A run ended: queue what its rules ask for (once db has read its output tails).
    pub(crate) fn run_ended(&mut self, sp: &SaltpeterConfig, end: FinishedRun, now: Millis) -> Out {
        let FinishedRun {
            job,
            run,
            slot,
            trigger,
            state,
            reason,
            targets,
        } = end;
        let previous = if state == RunState::Skipped {
            self.last.get(&job.name).copied()
        } else {
            self.last.insert(job.name.clone(), state)
        };
        let started = targets.iter().filter_map(|t| t.started).min();
        let targets: Vec<TargetNote> = targets
            .into_iter()
            .map(|r| TargetNote {
                machine: r.machine,
                state: r.state.as_str().to_string(),
                reason: r.reason,
                exit_code: r.exit_code,
                output_tail: None,
            })
            .collect();
        let facts = Facts {
            state,
            previous,
            lost: targets.iter().any(|t| t.reason == Some(TargetReason::Lost)),
            missed: false,
        };
        let fire = firing(rules_of(sp, job), &facts);
        let mut out = Out::new();
        if fire.is_empty() {
            return out;
        }
        let notice = Notice {
            job: job.name.clone(),
            run: Some(run),
            slot,
            state,
            trigger: trigger.to_string(),
            reason,
            started,
            ended: Some(now),
            targets,
        };
        let decided = Decided {
            notice,
            firing: fire,
            // The end's state is in the key: a corrected end (a lost target that came
            // back, a reopened run) is news, the same end seen twice is not.
            key: format!(
                "run:{run}:{}{}",
                state.as_str(),
                if facts.lost { "+lost" } else { "" }
            ),
        };
        out.db(
            DbRequest::OutputTails {
                run,
                bytes: notify::TAIL_BYTES,
                max_targets: notify::TAIL_TARGETS,
            },
            Then::tell(move |result| Message::NotifyTailsRead {
                decided: Box::new(decided),
                result,
            }),
        );
        out
    }

    /// db read the output tails of a run's end (or could not: its messages go without):
    /// render and queue them, within the rate limit `limit`.
    pub(crate) fn tails_read(
        &mut self,
        limit: u32,
        mut decided: Decided,
        result: DbResult,
        now: Millis,
    ) -> Out {
        match calls::OutputTails::take(result) {
            Ok(tails) => {
                let tails: HashMap<String, String> = tails.into_iter().collect();
                for t in &mut decided.notice.targets {
                    t.output_tail = tails.get(&t.machine).cloned();
                }
            }
            Err(e) => log::warn!("notifications: output tails not read ({e}); sent without"),
        }
        self.queue(limit, decided, now)
    }

    /// A slot of `job` was not run (`reason` says why; `missed` when it came too late).
    pub(crate) fn slot_skipped(
        &mut self,
        sp: &SaltpeterConfig,
        job: &Job,
        slot: Millis,
        reason: &str,
        missed: bool,
        now: Millis,
    ) -> Out {
        let facts = Facts {
            state: RunState::Skipped,
            previous: self.last.get(&job.name).copied(),
            lost: false,
            missed,
        };
        let fire = firing(rules_of(sp, job), &facts);
        if fire.is_empty() {
            return Out::new();
        }
        let notice = Notice {
            job: job.name.clone(),
            run: None,
            slot: Some(slot),
            state: RunState::Skipped,
            trigger: "schedule".to_string(),
            reason: Some(reason.to_string()),
            started: None,
            ended: None,
            targets: Vec::new(),
        };
        self.queue(
            sp.notify_rate_limit,
            Decided {
                notice,
                firing: fire,
                key: format!("slot:{}:{slot}", job.name),
            },
            now,
        )
    }

    /// Render, sign and queue each firing rule's message, unless more than `limit` of
    /// the job's went in the last hour.
    fn queue(&mut self, limit: u32, decided: Decided, now: Millis) -> Out {
        let Decided {
            notice,
            firing,
            key,
        } = decided;
        let mut out = Out::new();
        let mut new = Vec::new();
        for (rule, event) in firing {
            let message = match &rule.channel {
                Channel::Webhook { url, secret, slack } => {
                    let body = notify::webhook_body(&notice, event, *slack);
                    let delivery_key = format!("{key}:webhook:{url}");
                    Outgoing::Webhook {
                        url: url.clone(),
                        signature: secret
                            .as_ref()
                            .map(|s| notify::signature(s.expose(), &body)),
                        body,
                        delivery_key,
                    }
                }
                Channel::Email { to } => {
                    let (subject, body) = notify::mail(&notice, event);
                    Outgoing::Email {
                        to: to.clone(),
                        subject,
                        body,
                    }
                }
            };
            let full_key = format!("{key}:{}:{}", message.channel(), message.destination());
            if !self.limiter.allow(&notice.job, limit, now) {
                out.event(Event {
                    kind: "notification_suppressed",
                    job: Some(notice.job.clone()),
                    run: notice.run,
                    machine: None,
                    message: format!(
                        "{} to {} not sent: more than {limit} notifications of this job in an \
                         hour",
                        event.as_str(),
                        message.destination_shown()
                    ),
                });
                continue;
            }
            new.push(NewDelivery {
                key: full_key,
                job: Some(notice.job.clone()),
                run: notice.run,
                event: event.as_str().to_string(),
                message,
                now,
            });
        }
        if !new.is_empty() {
            out.db(
                DbRequest::QueueDeliveries(new),
                Then::tell(|result| Message::NotifyQueued { result }),
            );
        }
        out
    }
}

/// The rules of `job`: its own `notify`, else `saltpeter_config.notify`.
fn rules_of<'a>(sp: &'a SaltpeterConfig, job: &'a Job) -> &'a [NotifyRule] {
    job.notify.as_deref().unwrap_or(&sp.notify)
}

/// The rules that fire for what happened, each with the event it fires on.
fn firing(rules: &[NotifyRule], facts: &Facts) -> Vec<(NotifyRule, NotifyOn)> {
    rules
        .iter()
        .filter_map(|r| notify::fires(&r.on, facts).map(|event| (r.clone(), event)))
        .collect()
}
