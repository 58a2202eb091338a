//! Notifications, the pure part: which rules fire for a run's end, what the webhook body
//! and the mail say, the signature, the retry schedule and the per-job rate limit.
//!
//! Main decides and queues (`roles/main/notify/`), db keeps the outbox
//! (`roles/db/deliveries.rs`), blocking sends through a helper process (`send.rs`,
//! `roles/blocking/deliver.rs`). Everything here takes its inputs and `now`, so it is
//! tested without sockets.

mod conn;
pub(crate) mod error;
pub(crate) mod send;
pub(crate) mod smtp;
pub(crate) mod tls;

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use hmac::{KeyInit, Mac};
use serde_json::json;

use crate::config::notify::NotifyOn;
use crate::wire::records::{Millis, RunId, RunState, TargetReason, rfc3339};

/// Bytes of each target's output shown in a notification.
pub(crate) const TAIL_BYTES: u64 = 2048;
/// Targets whose output is shown (the rest are counted).
pub(crate) const TAIL_TARGETS: usize = 20;
/// Attempts before a message is given up (about 4 hours with [`retry_delay`]).
pub(crate) const MAX_ATTEMPTS: u32 = 30;

/// One target's outcome, as told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TargetNote {
    pub machine: String,
    pub state: String,
    pub reason: Option<TargetReason>,
    pub exit_code: Option<i32>,
    pub output_tail: Option<String>,
}

/// What happened, as told to people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notice {
    pub job: String,
    pub run: Option<RunId>,
    pub slot: Option<Millis>,
    pub state: RunState,
    pub trigger: String,
    /// Why the run or slot was skipped, or how the run ended abnormally.
    pub reason: Option<String>,
    pub started: Option<Millis>,
    pub ended: Option<Millis>,
    pub targets: Vec<TargetNote>,
}

/// The facts about a run's end (or a skipped slot) that rules are matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Facts {
    pub state: RunState,
    /// The job's previous final state (skips not counted).
    pub previous: Option<RunState>,
    /// A target was lost (253).
    pub lost: bool,
    /// The slot was missed (the daemon reached it too late).
    pub missed: bool,
}

fn failed(state: RunState) -> bool {
    matches!(state, RunState::Failed | RunState::Partial)
}

/// The event a rule fires on for these facts, if any: the most specific one the rule
/// names, so a rule with `[failure, always]` sends one message per run, not two.
pub(crate) fn fires(on: &[NotifyOn], facts: &Facts) -> Option<NotifyOn> {
    let happened = |o: NotifyOn| match o {
        NotifyOn::Failure => failed(facts.state),
        NotifyOn::Recovery => {
            facts.state == RunState::Succeeded && facts.previous.is_some_and(failed)
        }
        NotifyOn::Missed => facts.missed,
        NotifyOn::Lost => facts.lost,
        NotifyOn::Skipped => facts.state == RunState::Skipped && !facts.missed,
        NotifyOn::Always => true,
    };
    const PRECEDENCE: [NotifyOn; 6] = [
        NotifyOn::Lost,
        NotifyOn::Failure,
        NotifyOn::Recovery,
        NotifyOn::Missed,
        NotifyOn::Skipped,
        NotifyOn::Always,
    ];
    PRECEDENCE
        .into_iter()
        .find(|o| on.contains(o) && happened(*o))
}

/// An instant in text for people (headlines, mail): to the second. The webhook payload
/// is JSON and has `rfc3339`.
fn iso(ms: Option<Millis>) -> Option<String> {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// One line for chat and mail subjects.
pub(crate) fn headline(n: &Notice, event: NotifyOn) -> String {
    let what = match n.run {
        Some(run) => format!("run {run}"),
        None => format!("slot {}", iso(n.slot).unwrap_or_default()),
    };
    let bad = n
        .targets
        .iter()
        .filter(|t| t.exit_code != Some(0) && t.state != "skipped_maintenance")
        .count();
    let detail = match (event, &n.reason) {
        (NotifyOn::Recovery, _) => " (recovered)".to_string(),
        (_, Some(reason)) => format!(": {reason}"),
        _ if bad > 0 => format!(" ({bad} of {} targets failed)", n.targets.len()),
        _ => String::new(),
    };
    format!("saltpeter: {} {what} {}{detail}", n.job, n.state)
}

/// The webhook body: the full JSON (with a Slack-compatible `text`), or only `text`.
pub(crate) fn webhook_body(n: &Notice, event: NotifyOn, slack: bool) -> String {
    let text = slack_text(n, event);
    if slack {
        return json!({ "text": text }).to_string();
    }
    let targets: Vec<serde_json::Value> = n
        .targets
        .iter()
        .map(|t| {
            json!({
                "machine": t.machine,
                "state": t.state,
                "reason": t.reason.map(|r| r.as_str()),
                "exit_code": t.exit_code,
                "output_tail": t.output_tail,
            })
        })
        .collect();
    json!({
        "event": event.as_str(),
        "job": n.job,
        "run": n.run,
        "slot": n.slot.and_then(rfc3339),
        "state": n.state.as_str(),
        "trigger": n.trigger,
        "reason": n.reason,
        "started": n.started.and_then(rfc3339),
        "ended": n.ended.and_then(rfc3339),
        "targets": targets,
        "text": text,
    })
    .to_string()
}

fn slack_text(n: &Notice, event: NotifyOn) -> String {
    let mut text = headline(n, event);
    for t in n.targets.iter().filter(|t| t.exit_code != Some(0)).take(10) {
        let why = t.reason.map(|r| r.as_str()).unwrap_or(&t.state);
        let code = t.exit_code.map(|c| c.to_string()).unwrap_or_default();
        text.push_str(&format!("\n• {}: {why} {code}", t.machine));
    }
    text
}

/// `sha256=<hex HMAC-SHA256 of body under secret>`, the `X-Saltpeter-Signature` value.
pub(crate) fn signature(secret: &str, body: &str) -> String {
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()) else {
        // HMAC takes keys of any length; this branch cannot be reached.
        return String::new();
    };
    mac.update(body.as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

/// Subject and plain-text body of a notification mail.
pub(crate) fn mail(n: &Notice, event: NotifyOn) -> (String, String) {
    let subject = headline(n, event);
    let mut body = format!(
        "Job:     {}\nRun:     {}\nSlot:    {}\nState:   {}\nEvent:   {}\nTrigger: {}\n",
        n.job,
        n.run.map(|r| r.to_string()).unwrap_or_else(|| "-".into()),
        iso(n.slot).unwrap_or_else(|| "-".into()),
        n.state,
        event.as_str(),
        n.trigger,
    );
    if let Some(reason) = &n.reason {
        body.push_str(&format!("Reason:  {reason}\n"));
    }
    for t in &n.targets {
        body.push_str(&format!(
            "\n== {}: {} {} {}\n",
            t.machine,
            t.state,
            t.reason.map(|r| r.as_str()).unwrap_or(""),
            t.exit_code.map(|c| c.to_string()).unwrap_or_default()
        ));
        if let Some(tail) = t.output_tail.as_deref().filter(|t| !t.is_empty()) {
            body.push_str(tail);
            if !tail.ends_with('\n') {
                body.push('\n');
            }
        }
    }
    (subject, body)
}

/// How long to wait after the `attempts`-th failed attempt; `None`: give up.
pub(crate) fn retry_delay(attempts: u32) -> Option<Duration> {
    if attempts >= MAX_ATTEMPTS {
        return None;
    }
    let secs = 5u64.saturating_mul(1 << attempts.saturating_sub(1).min(10));
    Some(Duration::from_secs(secs.min(600)))
}

/// At most `limit` notifications per job in any hour (`0`: no limit).
#[derive(Debug, Default)]
pub(crate) struct RateLimiter {
    sent: HashMap<String, VecDeque<Millis>>,
}

impl RateLimiter {
    /// Whether one more for `job` may go at `now` (and count it if so).
    pub(crate) fn allow(&mut self, job: &str, limit: u32, now: Millis) -> bool {
        if limit == 0 {
            return true;
        }
        let window = self.sent.entry(job.to_string()).or_default();
        while window.front().is_some_and(|t| *t <= now - 3_600_000) {
            window.pop_front();
        }
        if window.len() >= limit as usize {
            return false;
        }
        window.push_back(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(state: RunState, previous: Option<RunState>) -> Facts {
        Facts {
            state,
            previous,
            lost: false,
            missed: false,
        }
    }

    #[test]
    fn rules_fire_on_what_happened() {
        use NotifyOn::*;
        let f = facts(RunState::Failed, None);
        assert_eq!(fires(&[Failure, Recovery], &f), Some(Failure));
        assert_eq!(fires(&[Recovery], &f), None);
        let ok_after_bad = facts(RunState::Succeeded, Some(RunState::Partial));
        assert_eq!(fires(&[Failure, Recovery], &ok_after_bad), Some(Recovery));
        let ok_after_ok = facts(RunState::Succeeded, Some(RunState::Succeeded));
        assert_eq!(fires(&[Failure, Recovery], &ok_after_ok), None);
        assert_eq!(fires(&[Always], &ok_after_ok), Some(Always));
        assert_eq!(fires(&[Always, Failure], &f), Some(Failure));
        let mut lost = facts(RunState::Failed, None);
        lost.lost = true;
        assert_eq!(fires(&[Failure, Lost], &lost), Some(Lost));
        let mut missed = facts(RunState::Skipped, None);
        missed.missed = true;
        assert_eq!(fires(&[Skipped], &missed), None);
        assert_eq!(fires(&[Missed, Skipped], &missed), Some(Missed));
        assert_eq!(
            fires(&[Skipped], &facts(RunState::Skipped, None)),
            Some(Skipped)
        );
    }

    #[test]
    fn signature_is_the_hmac_of_the_body() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", "what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn retries_back_off_and_give_up() {
        assert_eq!(retry_delay(1), Some(Duration::from_secs(5)));
        assert_eq!(retry_delay(2), Some(Duration::from_secs(10)));
        assert_eq!(retry_delay(20), Some(Duration::from_secs(600)));
        assert_eq!(retry_delay(MAX_ATTEMPTS), None);
    }

    #[test]
    fn rate_limit_is_per_job_and_hour() {
        let mut r = RateLimiter::default();
        assert!(r.allow("a", 2, 0));
        assert!(r.allow("a", 2, 1));
        assert!(!r.allow("a", 2, 2));
        assert!(r.allow("b", 2, 2));
        assert!(r.allow("a", 2, 3_600_001));
        assert!(r.allow("a", 0, 3));
    }

    #[test]
    fn bodies_say_what_happened() {
        let n = Notice {
            job: "backup".into(),
            run: Some(7),
            slot: Some(0),
            state: RunState::Failed,
            trigger: "schedule".into(),
            reason: None,
            started: None,
            ended: None,
            targets: vec![TargetNote {
                machine: "db1".into(),
                state: "finished".into(),
                reason: Some(TargetReason::Exit),
                exit_code: Some(3),
                output_tail: Some("disk full\n".into()),
            }],
        };
        let body: serde_json::Value =
            serde_json::from_str(&webhook_body(&n, NotifyOn::Failure, false)).unwrap();
        assert_eq!(body["job"], "backup");
        assert_eq!(body["run"], 7);
        assert_eq!(body["slot"], "1970-01-01T00:00:00Z");
        assert_eq!(body["targets"][0]["exit_code"], 3);
        assert_eq!(body["targets"][0]["output_tail"], "disk full\n");
        assert!(
            body["text"]
                .as_str()
                .unwrap()
                .contains("backup run 7 failed")
        );
        let slack: serde_json::Value =
            serde_json::from_str(&webhook_body(&n, NotifyOn::Failure, true)).unwrap();
        assert_eq!(slack.as_object().unwrap().len(), 1);
        let (subject, text) = mail(&n, NotifyOn::Failure);
        assert!(subject.contains("backup"));
        assert!(text.contains("disk full"));
    }
}
