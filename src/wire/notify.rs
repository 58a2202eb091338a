//! Notifications on the links: what is queued in db's outbox (main -> db), what db hands
//! back when it is due, and what blocking's `--deliver` helper is asked to send.
//!
//! A queued message is complete when it is queued: the webhook body is already rendered
//! and signed, the mail already written. So a delivery retried after a restart sends
//! exactly what was decided at the run's end, and no secret (the HMAC key, the SMTP
//! password) is ever stored in the database.

use serde::{Deserialize, Serialize};

use crate::wire::records::{Millis, RunId, rfc3339};

/// One message, ready to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Outgoing {
    /// An HTTP POST of `body` (JSON) to `url`.
    Webhook {
        url: String,
        body: String,
        /// `sha256=<hex hmac>` for the `X-Saltpeter-Signature` header.
        signature: Option<String>,
        /// `X-Saltpeter-Delivery`: the de-duplication key, so a receiver can drop a repeat.
        delivery_key: String,
    },
    /// A mail to `to`, sent through the SMTP server or `sendmail` of the configuration in
    /// effect when it is sent.
    Email {
        to: Vec<String>,
        subject: String,
        body: String,
    },
    /// A bulk request (NDJSON) to an Elasticsearch/OpenSearch `_bulk` endpoint.
    Bulk { url: String, body: String },
}

impl Outgoing {
    pub(crate) fn channel(&self) -> &'static str {
        match self {
            Outgoing::Webhook { .. } => "webhook",
            Outgoing::Email { .. } => "email",
            Outgoing::Bulk { .. } => "export",
        }
    }

    /// Where it goes, whole: what db stores (the outbox's row, its de-duplication key).
    /// Never shown: a webhook's path is often its credential ([`Outgoing::destination_shown`]).
    pub(crate) fn destination(&self) -> String {
        match self {
            Outgoing::Webhook { url, .. } | Outgoing::Bulk { url, .. } => url.clone(),
            Outgoing::Email { to, .. } => to.join(", "),
        }
    }

    /// Where it goes, as the log, events, the API and terminals show it: a URL as its
    /// scheme and host (`config::notify::url_shown`), addresses as they are.
    pub(crate) fn destination_shown(&self) -> String {
        match self {
            Outgoing::Webhook { url, .. } | Outgoing::Bulk { url, .. } => {
                crate::config::notify::url_shown(url)
            }
            Outgoing::Email { to, .. } => to.join(", "),
        }
    }
}

/// A message to queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NewDelivery {
    /// Unique: a second delivery with the same key is not queued (de-duplication).
    pub key: String,
    pub job: Option<String>,
    pub run: Option<RunId>,
    /// `failure`, `recovery`, `missed`, `lost`, `skipped`, `always`, `export`.
    pub event: String,
    pub message: Outgoing,
    pub now: Millis,
}

/// State of a queued message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum DeliveryState {
    Pending,
    Delivered,
    /// Given up after the last attempt; the cause is in `last_error`.
    Failed,
}

impl DeliveryState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<DeliveryState> {
        match text {
            "pending" => Some(DeliveryState::Pending),
            "delivered" => Some(DeliveryState::Delivered),
            "failed" => Some(DeliveryState::Failed),
            _ => None,
        }
    }
}

/// A queued message as stored and shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DeliveryRecord {
    pub id: u64,
    pub key: String,
    pub job: Option<String>,
    pub run: Option<RunId>,
    pub event: String,
    pub channel: String,
    pub destination: String,
    pub state: DeliveryState,
    pub attempts: u32,
    pub created: Millis,
    pub next_attempt: Option<Millis>,
    pub last_error: Option<String>,
    pub delivered: Option<Millis>,
}

impl DeliveryRecord {
    /// The JSON shape shared by `saltpeterctl deliveries --json` and the HTTP API.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let iso = |ms: Option<Millis>| ms.and_then(rfc3339);
        serde_json::json!({
            "id": self.id,
            "job": self.job,
            "run": self.run,
            "event": self.event,
            "channel": self.channel,
            "destination": self.destination,
            "state": self.state.as_str(),
            "attempts": self.attempts,
            "created": iso(Some(self.created)),
            "next_attempt": iso(self.next_attempt),
            "delivered": iso(self.delivered),
            "last_error": self.last_error,
        })
    }
}

/// A due message handed to main to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DueDelivery {
    pub id: u64,
    pub attempts: u32,
    pub job: Option<String>,
    pub run: Option<RunId>,
    pub event: String,
    pub message: Outgoing,
}

/// What db's `take_due_deliveries` answers: the messages leased to main, and when the
/// next one of the rest is due.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DueDeliveries {
    pub due: Vec<DueDelivery>,
    pub next_due: Option<Millis>,
    /// Messages pending (leased or not, those leased now included), and when the oldest
    /// of them was queued: for `/metrics`.
    #[serde(default)]
    pub pending: u64,
    #[serde(default)]
    pub oldest_pending: Option<Millis>,
}

/// The result of one attempt, to record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DeliveryAttempt {
    pub id: u64,
    pub now: Millis,
    /// `Ok(what the receiver said)` or `Err(cause)`.
    pub result: Result<String, String>,
    /// When to try again after a failure; `None`: give up (state `failed`).
    pub retry_at: Option<Millis>,
}

pub(crate) use crate::config::notify::SmtpTls;

/// How mail leaves this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum MailTransport {
    /// An SMTP server (`saltpeter_config.smtp`).
    Smtp {
        host: String,
        port: u16,
        tls: SmtpTls,
    },
    /// The host's `sendmail` program (`-t -i`, the message on its stdin).
    Sendmail { path: String },
}

/// What blocking's `--deliver` helper gets on stdin. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DeliverOrder {
    pub message: Outgoing,
    /// For `Email`: the sender address and the transport.
    pub mail_from: String,
    pub mail: MailTransport,
    /// Per network step (connect, each read and write).
    pub io_timeout_s: u64,
    /// Basic auth for `Bulk` (the export's user and password), never stored in db.
    pub basic_auth: Option<(String, String)>,
    /// SMTP login (`smtp_user`, `smtp_password`), never stored in db.
    pub smtp_auth: Option<(String, String)>,
    /// CA certificates trusted besides the system's (`notify_ca_file`).
    pub ca_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for DeliverOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliverOrder")
            .field("message", &self.message)
            .field("mail_from", &self.mail_from)
            .field("mail", &self.mail)
            .field("io_timeout_s", &self.io_timeout_s)
            .field(
                "basic_auth",
                &self.basic_auth.as_ref().map(|(u, _)| (u, "***")),
            )
            .field(
                "smtp_auth",
                &self.smtp_auth.as_ref().map(|(u, _)| (u, "***")),
            )
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// Which deliveries `list_deliveries` returns, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct DeliveryFilter {
    pub job: Option<String>,
    pub run: Option<RunId>,
    pub state: Option<DeliveryState>,
    pub limit: Option<usize>,
}

// ---- log export (`logdir` files and Elasticsearch/OpenSearch bulk documents)

/// One event of a job's log, in the original's `msg_type` terms (`start`,
/// `machine_result`, `end`, `overlap`, `maintenance`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobLogEntry {
    pub msg_type: String,
    pub machine: Option<String>,
    pub return_code: Option<i32>,
    pub at: Millis,
    /// `machine_result`: db reads this run's output of `machine`.
    pub output_of_run: Option<RunId>,
}

/// Where a job's log goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExportDest {
    /// `elasticsearch` or `opensearch`.
    pub name: String,
    pub url: String,
    pub index: String,
}

/// Events of one job for its log file and the exports (db writes the file, reads the
/// output, and queues one bulk request per export in the outbox).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobLog {
    pub job: String,
    pub group: String,
    /// The original's `job_instance`: `{job}_{run}`.
    pub instance: String,
    pub run: Option<RunId>,
    pub entries: Vec<JobLogEntry>,
    pub logdir: Option<std::path::PathBuf>,
    pub max_bytes: u64,
    pub keep: u32,
    pub exports: Vec<ExportDest>,
}
