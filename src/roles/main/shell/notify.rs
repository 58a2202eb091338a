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
//!    messages from db, at most [`MAX_IN_FLIGHT`] at a time, and asks blocking to send each
//!    (`BlockingRequest::Deliver`, a helper process with a deadline).
//! 3. `poll` (after every event) records each answer: delivered, or failed with its cause
//!    and the next try (`notify::retry_delay`), or given up; each is an audit event.
//!
//! Nothing here waits: every step is a message, so a dead receiver costs a helper process
//! in blocking and a row in db, and main's loop carries on. At start, what was leased when
//! the daemon stopped is released (sent again: at-least-once, and receivers can drop a
//! repeat by `X-Saltpeter-Delivery`).

use crate::roles::main::state::notify::InFlight;
use std::collections::HashMap;

use crate::config::notify::{Channel, NotifyOn, NotifyRule};
use crate::evloop::Ctx;
use crate::ipc::CallId;
use crate::ipc::rpc::{Call, CallError};
use crate::notify::{self, Facts, Notice, TargetNote};
use crate::roles::main::state::active::ActiveRun;
use crate::roles::main::state::{DbWait, Main, MainRole};
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::db::{DbReply, DbRequest, calls};
use crate::wire::link::{BlockingRequest, HubReply, blocking_calls};
use crate::wire::notify::{
    DeliverOrder, DeliveryAttempt, DeliveryFilter, DueDelivery, MailTransport, NewDelivery,
    Outgoing,
};
use crate::wire::records::now_ms;
use crate::wire::records::{Millis, RunState, TargetReason};

/// Messages being sent at once.
const MAX_IN_FLIGHT: usize = 4;
/// How long a leased message stays with main before db hands it out again (longer than
/// blocking's deadline for one attempt).
const LEASE_MS: i64 = 120_000;
/// How often the outbox is counted for `/metrics` while something waits in it.
const RECOUNT_MS: i64 = 60_000;
/// Per network step of one attempt.
const IO_TIMEOUT_S: u64 = 10;

/// What a db reply for notifications is.
#[derive(Debug, Clone)]
pub(crate) enum Wait {
    /// The newest run of every job, at start (the `recovery` rule's memory).
    LastRuns,
    /// Output tails for a run's messages.
    Tails(Box<Decided>),
    /// Messages queued.
    Queued,
    /// Due messages leased.
    Due,
    /// `saltpeterctl deliveries`: the hub's call to answer, and whether its reader
    /// sees webhook URLs whole (`delivery_view`).
    List(CallId, bool),
}

/// A run's end and the rules that fire for it, waiting for the output tails.
#[derive(Debug, Clone)]
pub(crate) struct Decided {
    notice: Notice,
    firing: Vec<(NotifyRule, NotifyOn)>,
    key: String,
}

/// At start: release the leases of the last life, learn the last states, look for work.
pub(crate) fn start(core: &mut Main) {
    core.db_call(
        DbRequest::ReleaseDeliveryLeases { now: now_ms() },
        DbWait::write("released notification leases"),
    );
    core.db_call(DbRequest::LastRuns, DbWait::with(Wait::LastRuns, db_answer));
    core.notify.due_at = Some(0);
}

/// Every second: send what is due.
pub(crate) fn tick(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    if role.core.notify.due_at.is_some_and(|at| at <= now_ms()) {
        take_due(&mut role.core);
        role.pump(ctx);
    }
}

fn rules_of<'a>(core: &'a Main, job: &'a crate::config::Job) -> &'a [NotifyRule] {
    job.notify
        .as_deref()
        .unwrap_or(&core.config.saltpeter.notify)
}

fn firing(rules: &[NotifyRule], facts: &Facts) -> Vec<(NotifyRule, NotifyOn)> {
    rules
        .iter()
        .filter_map(|r| notify::fires(&r.on, facts).map(|event| (r.clone(), event)))
        .collect()
}

/// A run ended with `state`: queue what its rules ask for.
pub(crate) fn run_ended(
    core: &mut Main,
    active: &ActiveRun,
    state: RunState,
    reason: Option<String>,
) {
    let job = &active.job;
    let previous = if state == RunState::Skipped {
        core.notify.last.get(&job.name).copied()
    } else {
        core.notify.last.insert(job.name.clone(), state)
    };
    let targets: Vec<TargetNote> = active
        .targets
        .iter()
        .map(|(m, t)| {
            let r = t.record(m);
            TargetNote {
                machine: r.machine,
                state: r.state.as_str().to_string(),
                reason: r.reason,
                exit_code: r.exit_code,
                output_tail: None,
            }
        })
        .collect();
    let facts = Facts {
        state,
        previous,
        lost: targets.iter().any(|t| t.reason == Some(TargetReason::Lost)),
        missed: false,
    };
    let fire = firing(rules_of(core, job), &facts);
    if fire.is_empty() {
        return;
    }
    let notice = Notice {
        job: job.name.clone(),
        run: Some(active.id),
        slot: active.slot,
        state,
        trigger: active.trigger.as_str().to_string(),
        reason,
        started: targets_started(active),
        ended: Some(now_ms()),
        targets,
    };
    let decided = Decided {
        notice,
        firing: fire,
        // The end's state is in the key: a corrected end (a lost target that came back,
        // a reopened run) is news, the same end seen twice is not.
        key: format!(
            "run:{}:{}{}",
            active.id,
            state.as_str(),
            if facts.lost { "+lost" } else { "" }
        ),
    };
    core.db_call(
        DbRequest::OutputTails {
            run: active.id,
            bytes: notify::TAIL_BYTES,
            max_targets: notify::TAIL_TARGETS,
        },
        DbWait::with(Wait::Tails(Box::new(decided)), db_answer),
    );
}

fn targets_started(active: &ActiveRun) -> Option<Millis> {
    active.targets.values().filter_map(|t| t.started()).min()
}

/// A slot of `job` was not run (`reason` says why; `missed` when it came too late).
pub(crate) fn slot_skipped(
    core: &mut Main,
    job: &crate::config::Job,
    slot: Millis,
    reason: &str,
    missed: bool,
) {
    let facts = Facts {
        state: RunState::Skipped,
        previous: core.notify.last.get(&job.name).copied(),
        lost: false,
        missed,
    };
    let fire = firing(rules_of(core, job), &facts);
    if fire.is_empty() {
        return;
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
    queue(
        core,
        Decided {
            notice,
            firing: fire,
            key: format!("slot:{}:{slot}", job.name),
        },
    );
}

/// Render, sign and queue each firing rule's message.
fn queue(core: &mut Main, decided: Decided) {
    let Decided {
        notice,
        firing,
        key,
    } = decided;
    let now = now_ms();
    let limit = core.config.saltpeter.notify_rate_limit;
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
        if !core.notify.limiter.allow(&notice.job, limit, now) {
            core.event(
                "notification_suppressed",
                Some(&notice.job),
                notice.run,
                None,
                format!(
                    "{} to {} not sent: more than {limit} notifications of this job in an hour",
                    event.as_str(),
                    message.destination()
                ),
            );
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
        core.db_call(
            DbRequest::QueueDeliveries(new),
            DbWait::with(Wait::Queued, db_answer),
        );
    }
}

/// Lease due messages from db, if there is room and something may be due.
fn take_due(core: &mut Main) {
    let n = &core.notify;
    let room = MAX_IN_FLIGHT.saturating_sub(n.in_flight.len());
    if n.taking || room == 0 || n.due_at.is_none_or(|at| at > now_ms()) {
        return;
    }
    core.notify.taking = true;
    core.db_call(
        DbRequest::TakeDueDeliveries {
            now: now_ms(),
            limit: room,
            lease_ms: LEASE_MS,
        },
        DbWait::with(Wait::Due, db_answer),
    );
}

/// `saltpeterctl deliveries`.
pub(crate) fn list(core: &mut Main, call: CallId, mut filter: DeliveryFilter) {
    filter.limit = Some(filter.limit.unwrap_or(50).clamp(1, 10_000));
    core.db_call(
        DbRequest::ListDeliveries(filter),
        DbWait::with(
            Wait::List(
                call,
                crate::roles::main::views::delivery_view::reader_is_admin(core),
            ),
            db_answer,
        ),
    );
}

pub(crate) fn db_answer(core: &mut Main, wait: Wait, result: Result<DbReply, CallError>) {
    match wait {
        Wait::List(call, admin) => {
            let resp = match calls::ListDeliveries::take(result) {
                Ok(list) if admin => AdminResponse::Deliveries(list),
                Ok(list) => AdminResponse::Deliveries(
                    list.into_iter()
                        .map(crate::roles::main::views::delivery_view::redacted)
                        .collect(),
                ),
                Err(e) => AdminResponse::Failure(AdminFailure::Internal(e.to_string())),
            };
            core.reply_hub(call, HubReply::Admin(resp));
        }
        Wait::LastRuns => match calls::LastRuns::take(result) {
            Ok(runs) => {
                for (job, run) in runs {
                    if run.state.is_final() && run.state != RunState::Skipped {
                        core.notify.last.entry(job).or_insert(run.state);
                    }
                }
            }
            Err(e) => log::warn!("notifications: last runs not loaded: {e}"),
        },
        Wait::Tails(decided) => {
            let mut decided = *decided;
            match calls::OutputTails::take(result) {
                Ok(tails) => {
                    let tails: HashMap<String, String> = tails.into_iter().collect();
                    for t in &mut decided.notice.targets {
                        t.output_tail = tails.get(&t.machine).cloned();
                    }
                }
                Err(e) => log::warn!("notifications: output tails not read ({e}); sent without"),
            }
            queue(core, decided);
        }
        Wait::Queued => match calls::QueueDeliveries::take(result) {
            Ok(_) => {
                core.notify.due_at = Some(0);
                take_due(core);
            }
            Err(e) => log::error!("could not queue notifications: {e}"),
        },
        Wait::Due => {
            core.notify.taking = false;
            match calls::TakeDueDeliveries::take(result) {
                Ok(due) => {
                    core.views
                        .metrics_mut()
                        .outbox_counted(due.pending, due.oldest_pending);
                    // While something is pending, count again at least every minute.
                    core.notify.due_at = due.next_due.map(|at| at.min(now_ms() + RECOUNT_MS));
                    for d in due.due {
                        send(core, d);
                    }
                }
                Err(e) => {
                    log::error!("could not read due notifications: {e}");
                    core.notify.due_at = Some(now_ms() + 5_000);
                }
            }
        }
    }
}

fn send(core: &mut Main, d: DueDelivery) {
    let sp = &core.config.saltpeter;
    let mail = match &sp.smtp {
        Some((host, port)) => MailTransport::Smtp {
            host: host.clone(),
            port: crate::config::notify::smtp_port(*port, sp.smtp_tls),
            tls: sp.smtp_tls,
        },
        None => MailTransport::Sendmail {
            path: sp.sendmail.clone(),
        },
    };
    let mail_from = sp.mail_from.clone().unwrap_or_else(|| {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "localhost".to_string());
        format!("saltpeter@{host}")
    });
    let destination = d.message.destination();
    // The SMTP password goes only with mail.
    let is_mail = matches!(d.message, Outgoing::Email { .. });
    // The export's credentials come from the configuration in effect, never from db.
    let basic_auth = match &d.message {
        Outgoing::Bulk { url, .. } => sp
            .logs
            .exports()
            .into_iter()
            .find(|e| format!("{}/_bulk", e.url) == *url)
            .and_then(|e| e.auth)
            .map(|(user, password)| (user, password.expose().to_string())),
        _ => None,
    };
    let order = DeliverOrder {
        message: d.message,
        mail_from,
        mail,
        io_timeout_s: IO_TIMEOUT_S,
        basic_auth,
        smtp_auth: is_mail.then(|| sp.smtp_user.clone()).flatten().map(|user| {
            let password = sp.smtp_password.as_ref().map(|p| p.expose().to_string());
            (user, password.unwrap_or_default())
        }),
        ca_file: sp.notify_ca_file.clone(),
    };
    let call = core.blocking_call(BlockingRequest::Deliver(order));
    core.notify.in_flight.insert(
        call,
        InFlight {
            id: d.id,
            attempts: d.attempts,
            job: d.job,
            run: d.run,
            event: d.event,
            destination,
        },
    );
}

/// Record the answers of the attempts that came back (after every event).
pub(crate) fn poll(core: &mut Main) {
    if core.notify.in_flight.is_empty() {
        return;
    }
    let answered: Vec<CallId> = core
        .notify
        .in_flight
        .keys()
        .filter(|id| core.links.blocking_replies.contains_key(id))
        .copied()
        .collect();
    for call in answered {
        let Some(f) = core.notify.in_flight.remove(&call) else {
            continue;
        };
        let result = match core.take_blocking_reply::<blocking_calls::Deliver>(call) {
            Some(Ok(result)) => result,
            Some(Err(e)) => Err(e.to_string()),
            None => continue,
        };
        let now = now_ms();
        let attempts = f.attempts.saturating_add(1);
        let retry_at = match &result {
            Ok(_) => None,
            Err(_) => notify::retry_delay(attempts).map(|d| now + d.as_millis() as i64),
        };
        let export = f.event == "export";
        let (kind, message) = match (&result, retry_at) {
            (Ok(said), _) if export => (
                "export_delivered",
                format!("to {}: {said} (attempt {attempts})", f.destination),
            ),
            (Err(why), _) if export => (
                if retry_at.is_some() {
                    "export_failed"
                } else {
                    "export_given_up"
                },
                format!("to {}: {why} (attempt {attempts})", f.destination),
            ),
            (Ok(said), _) => (
                "notification_delivered",
                format!(
                    "{} to {}: {said} (attempt {attempts})",
                    f.event, f.destination
                ),
            ),
            (Err(why), Some(at)) => (
                "notification_failed",
                format!(
                    "{} to {}: {why} (attempt {attempts}; next in {} s)",
                    f.event,
                    f.destination,
                    (at - now) / 1000
                ),
            ),
            (Err(why), None) => (
                "notification_given_up",
                format!(
                    "{} to {}: {why} (attempt {attempts}, the last)",
                    f.event, f.destination
                ),
            ),
        };
        core.views
            .metrics_mut()
            .delivery_attempted(result.is_ok(), retry_at.is_some());
        match &result {
            Ok(_) => log::info!("{message}"),
            Err(_) => log::warn!("{message}"),
        }
        core.event(kind, f.job.as_deref(), f.run, None, message);
        core.db_call(
            DbRequest::RecordDeliveryAttempt(DeliveryAttempt {
                id: f.id,
                now,
                result,
                retry_at,
            }),
            DbWait::write("a notification attempt"),
        );
        if let Some(at) = retry_at {
            let n = &mut core.notify;
            n.due_at = Some(n.due_at.map_or(at, |d| d.min(at)));
        }
    }
    take_due(core);
}
