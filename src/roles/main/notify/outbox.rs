//! The outbox's pump: lease what is due from db, have blocking send it, record each
//! answer.

use super::Notifier;
use crate::config::SaltpeterConfig;
use crate::ipc::rpc::Call;
use crate::logsafe;
use crate::notify;
use crate::roles::main::messages::{Attempt, BlockingResult, DbResult, Event, Message, Out, Then};
use crate::wire::db::{DbRequest, calls};
use crate::wire::link::{BlockingRequest, blocking_calls};
use crate::wire::notify::{DeliverOrder, DeliveryAttempt, DueDelivery, MailTransport, Outgoing};
use crate::wire::records::Millis;

/// Messages being sent at once.
pub(crate) const MAX_IN_FLIGHT: usize = 4;
/// How long a leased message stays with main before db hands it out again (longer than
/// blocking's deadline for one attempt).
const LEASE_MS: i64 = 120_000;
/// How often the outbox is counted for `/metrics` while something waits in it.
const RECOUNT_MS: i64 = 60_000;
/// Per network step of one attempt.
const IO_TIMEOUT_S: u64 = 10;
/// How long to wait before reading the due messages again when db could not.
const TAKE_RETRY_MS: i64 = 5_000;

impl Notifier {
    /// Lease due messages from db, if there is room and something may be due at `now`.
    pub(super) fn take_due(&mut self, now: Millis) -> Out {
        let mut out = Out::new();
        let room = MAX_IN_FLIGHT.saturating_sub(self.in_flight);
        if self.taking || room == 0 || self.due_at.is_none_or(|at| at > now) {
            return out;
        }
        self.taking = true;
        out.db(
            DbRequest::TakeDueDeliveries {
                now,
                limit: room,
                lease_ms: LEASE_MS,
            },
            Then::tell(|result| Message::DeliveriesDue { result }),
        );
        out
    }

    /// db queued messages (or could not): send them at once.
    pub(crate) fn queued(&mut self, result: DbResult, now: Millis) -> Out {
        match calls::QueueDeliveries::take(result) {
            Ok(_) => {
                self.due_at = Some(0);
                self.take_due(now)
            }
            Err(e) => {
                log::error!("could not queue notifications: {e}");
                Out::new()
            }
        }
    }

    /// db leased the due messages (or could not): have blocking send each, with the
    /// settings in effect `sp`.
    pub(crate) fn due(&mut self, sp: &SaltpeterConfig, result: DbResult, now: Millis) -> Out {
        self.taking = false;
        let mut out = Out::new();
        match calls::TakeDueDeliveries::take(result) {
            Ok(due) => {
                self.outbox.counted(due.pending, due.oldest_pending);
                // While something is pending, count again at least every minute.
                self.due_at = due.next_due.map(|at| at.min(now + RECOUNT_MS));
                for d in due.due {
                    let attempt = Attempt {
                        id: d.id,
                        attempts: d.attempts,
                        job: d.job.clone(),
                        run: d.run,
                        event: d.event.clone(),
                        destination: d.message.destination_shown(),
                    };
                    let order = order(sp, d, mail_from(sp));
                    self.in_flight += 1;
                    out.blocking(BlockingRequest::Deliver(order), move |result| {
                        Message::DeliveryAnswered { attempt, result }
                    });
                }
                // Answers that came back while this take was on its way left room.
                if self.in_flight > 0 {
                    out.extend(self.take_due(now));
                }
            }
            Err(e) => {
                log::error!("could not read due notifications: {e}");
                self.due_at = Some(now + TAKE_RETRY_MS);
            }
        }
        out
    }

    /// blocking answered an attempt: record it (delivered, failed with the next try, or
    /// given up) as an event and in db, and take what is due into the room it left.
    pub(crate) fn answered(
        &mut self,
        attempt: Attempt,
        result: BlockingResult,
        now: Millis,
    ) -> Out {
        self.in_flight = self.in_flight.saturating_sub(1);
        let result = match blocking_calls::Deliver::take(result) {
            Ok(result) => result,
            Err(e) => Err(e.to_string()),
        };
        // What the receiver said, or why not (its status line, an SMTP server's text):
        // from outside, so escaped and clipped for the log and the event.
        let said = |text: &str| logsafe::clip(text, logsafe::REASON_MAX);
        let f = attempt;
        let attempts = f.attempts.saturating_add(1);
        let retry_at = match &result {
            Ok(_) => None,
            Err(_) => notify::retry_delay(attempts).map(|d| now + d.as_millis() as i64),
        };
        let export = f.event == "export";
        let (kind, message) = match (&result, retry_at) {
            (Ok(ok), _) if export => (
                "export_delivered",
                format!("to {}: {} (attempt {attempts})", f.destination, said(ok)),
            ),
            (Err(why), _) if export => (
                if retry_at.is_some() {
                    "export_failed"
                } else {
                    "export_given_up"
                },
                format!("to {}: {} (attempt {attempts})", f.destination, said(why)),
            ),
            (Ok(ok), _) => (
                "notification_delivered",
                format!(
                    "{} to {}: {} (attempt {attempts})",
                    f.event,
                    f.destination,
                    said(ok)
                ),
            ),
            (Err(why), Some(at)) => (
                "notification_failed",
                format!(
                    "{} to {}: {} (attempt {attempts}; next in {} s)",
                    f.event,
                    f.destination,
                    said(why),
                    (at - now) / 1000
                ),
            ),
            (Err(why), None) => (
                "notification_given_up",
                format!(
                    "{} to {}: {} (attempt {attempts}, the last)",
                    f.event,
                    f.destination,
                    said(why)
                ),
            ),
        };
        self.outbox.attempted(result.is_ok(), retry_at.is_some());
        match &result {
            Ok(_) => log::info!("{message}"),
            Err(_) => log::warn!("{message}"),
        }
        let mut out = Out::new();
        out.event(Event {
            kind,
            job: f.job,
            run: f.run,
            machine: None,
            message,
        });
        out.db(
            DbRequest::RecordDeliveryAttempt(DeliveryAttempt {
                id: f.id,
                now,
                result,
                retry_at,
            }),
            Then::Write("a notification attempt"),
        );
        if let Some(at) = retry_at {
            self.due_at = Some(self.due_at.map_or(at, |d| d.min(at)));
        }
        out.extend(self.take_due(now));
        out
    }
}

/// The sender of mail: `mail_from`, else `saltpeter@<this host>`.
fn mail_from(sp: &SaltpeterConfig) -> String {
    sp.mail_from.clone().unwrap_or_else(|| {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "localhost".to_string());
        format!("saltpeter@{host}")
    })
}

/// What blocking needs to send `d`: the message and the transport settings in effect
/// (`sp`), credentials included only where the message goes.
pub(super) fn order(sp: &SaltpeterConfig, d: DueDelivery, mail_from: String) -> DeliverOrder {
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
    DeliverOrder {
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
    }
}
