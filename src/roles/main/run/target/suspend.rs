//! Suspending and resuming one target: the pure rules, beside the target core.
//!
//! `Target::suspended` is what the operator asked for, persisted (`targets.suspended`)
//! and shown; the wrapper does the stopping and says what it did (`hello.suspended` on
//! every connection, `heartbeat.suspended`). When the two disagree — a message lost with
//! a restart, a request made while the wrapper was away — the stored wish wins and is
//! sent again, so a run suspended across a daemon restart stays suspended and a resume
//! after it reaches the wrapper.
//!
//! Rules:
//! 1. only a running command can be suspended or resumed (not before `started`, not once
//!    the outcome is decided or the wrapper said `exited`);
//! 2. only a wrapper that advertised the `suspend` capability is asked (an older wrapper
//!    would take the message for a protocol error); a request for one that cannot is
//!    refused with a clear message;
//! 3. a wrapper away (reconnecting) gets the request on its next hello, provided the
//!    server knows it can suspend (from its earlier hello, or a suspended target restored
//!    from the database);
//! 4. the outcome clears the flag (`finish`).

use super::{Effect, Phase, Target};
use crate::wire::link::ConnId;

/// What a wrapper said of suspension in its hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SuspendReport {
    /// It advertised the `suspend` capability.
    pub capable: bool,
    /// Its command is stopped now.
    pub suspended: bool,
}

/// Why a target cannot be suspended or resumed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its outcome is already decided.
    Decided,
    /// Its command is not running (not started yet, or exited).
    NotRunning,
    /// Its wrapper is connected but an older build without suspend and resume.
    OlderWrapper,
    /// Its wrapper is not connected and has not said it can suspend.
    NotConnected,
}

/// A suspend or resume refused for one target, and why (shown to the operator).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SuspendRefused {
    /// It was a resume (else a suspend).
    pub resume: bool,
    pub why: Refusal,
}

impl std::fmt::Display for SuspendRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verb = if self.resume { "resume" } else { "suspend" };
        match self.why {
            Refusal::Decided => write!(f, "cannot {verb}: its outcome is already decided"),
            Refusal::NotRunning => write!(f, "cannot {verb}: its command is not running"),
            Refusal::OlderWrapper => write!(
                f,
                "cannot {verb}: its wrapper is an older build without suspend and \
                 resume (deploy the new wrapper for later runs)"
            ),
            Refusal::NotConnected => write!(
                f,
                "cannot {verb}: its wrapper is not connected and has not said it can \
                 suspend; try again once it reconnects"
            ),
        }
    }
}

impl std::error::Error for SuspendRefused {}

impl Target {
    /// An operator suspends (`want` true) or resumes this target. `Ok` with no effects:
    /// it already is as asked.
    pub(crate) fn set_suspended(&mut self, want: bool) -> Result<Vec<Effect>, SuspendRefused> {
        let refused = |why| SuspendRefused { resume: !want, why };
        if self.is_decided() {
            return Err(refused(Refusal::Decided));
        }
        let Phase::PickedUp {
            running: true,
            exit: None,
            ..
        } = self.phase
        else {
            return Err(refused(Refusal::NotRunning));
        };
        if !self.can_suspend {
            return Err(refused(match self.conn {
                Some(_) => Refusal::OlderWrapper,
                None => Refusal::NotConnected,
            }));
        }
        if self.suspended == want {
            // Said again (idempotent for the wrapper), nothing stored.
            return Ok(self.conn.map(|c| order(c, want)).into_iter().collect());
        }
        self.suspended = want;
        let mut effects = vec![Effect::StoreSuspended(want)];
        // A wrapper away gets it with its next hello (`wrapper_hello`).
        effects.extend(self.conn.map(|c| order(c, want)));
        Ok(effects)
    }

    /// The wrapper on `conn` said hello (after `hello` accepted it): learn whether it can
    /// suspend, and bring its command to the stored wish.
    pub(crate) fn wrapper_hello(&mut self, conn: ConnId, report: SuspendReport) -> Vec<Effect> {
        self.can_suspend = report.capable;
        if !report.capable && self.suspended {
            // Cannot happen with the wrapper that was suspended; a stored flag that no
            // wrapper can honour is cleared rather than shown falsely.
            log::warn!("a suspended target's wrapper cannot suspend; the flag is cleared");
            self.suspended = false;
            return vec![Effect::StoreSuspended(false)];
        }
        self.wrapper_reports(conn, report.suspended)
    }

    /// The wrapper on `conn` reports its command `suspended` or not (a heartbeat):
    /// when that is not the stored wish, the wish is sent again.
    pub(crate) fn wrapper_reports(&mut self, conn: ConnId, suspended: bool) -> Vec<Effect> {
        let running = matches!(
            self.phase,
            Phase::PickedUp {
                running: true,
                exit: None,
                ..
            }
        );
        if self.conn != Some(conn) || !self.can_suspend || !running || suspended == self.suspended {
            return Vec::new();
        }
        vec![order(conn, self.suspended)]
    }
}

fn order(conn: ConnId, suspend: bool) -> Effect {
    if suspend {
        Effect::Suspend(conn)
    } else {
        Effect::Resume(conn)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Refusal, SuspendReport};
    use crate::roles::main::run::target::{Credential, Effect, Target};
    use crate::wire::records::{TargetReason, TargetRecord, TargetState};

    const CAPABLE: SuspendReport = SuspendReport {
        capable: true,
        suspended: false,
    };

    /// A target whose wrapper (capable or not) said hello on connection 1 and started.
    fn running(capable: bool) -> Target {
        let mut t = Target::new(0);
        t.launch();
        t.hello(Instant::now(), 1, Credential::LaunchToken { valid: true })
            .expect("welcome");
        let report = SuspendReport {
            capable,
            suspended: false,
        };
        assert!(t.wrapper_hello(1, report).is_empty());
        t.command_started(1_000, None);
        t
    }

    #[test]
    fn suspend_and_resume_are_sent_stored_and_shown() {
        let mut t = running(true);
        assert_eq!(
            t.set_suspended(true),
            Ok(vec![Effect::StoreSuspended(true), Effect::Suspend(1)])
        );
        assert!(t.record("m").suspended, "shown");
        assert_eq!(t.state(), TargetState::Running, "still running");
        // Again: said again to the wrapper, nothing stored.
        assert_eq!(t.set_suspended(true), Ok(vec![Effect::Suspend(1)]));
        assert_eq!(
            t.set_suspended(false),
            Ok(vec![Effect::StoreSuspended(false), Effect::Resume(1)])
        );
        assert!(!t.record("m").suspended);
    }

    #[test]
    fn an_older_wrapper_or_a_command_not_running_is_refused() {
        let mut old = running(false);
        let why = old.set_suspended(true).expect_err("older wrapper");
        assert_eq!(why.why, Refusal::OlderWrapper);
        assert!(why.to_string().contains("older build"), "{why}");
        assert!(!old.suspended);
        let mut staged = Target::new(0);
        staged.launch();
        staged
            .hello(Instant::now(), 1, Credential::LaunchToken { valid: true })
            .expect("welcome");
        staged.wrapper_hello(1, CAPABLE);
        let why = staged.set_suspended(true).expect_err("not started");
        assert_eq!(why.why, Refusal::NotRunning);
        assert_eq!(
            why.to_string(),
            "cannot suspend: its command is not running"
        );
        let mut done = running(true);
        done.finish(TargetReason::Exit, Some(0), 2_000);
        let why = done.set_suspended(false).expect_err("decided");
        assert_eq!(
            why.to_string(),
            "cannot resume: its outcome is already decided"
        );
    }

    #[test]
    fn the_outcome_clears_the_flag() {
        let mut t = running(true);
        t.set_suspended(true).expect("suspend");
        let effects = t.finish(TargetReason::Killed, Some(143), 2_000);
        assert!(!t.suspended);
        assert!(!t.record("m").suspended);
        assert_eq!(
            effects.len(),
            1,
            "the outcome is recorded (with the flag off)"
        );
    }

    #[test]
    fn the_stored_wish_wins_over_what_the_wrapper_reports() {
        let mut t = running(true);
        t.set_suspended(true).expect("suspend");
        // A heartbeat sent before the wrapper acted: the wish is sent again.
        assert_eq!(t.wrapper_reports(1, false), [Effect::Suspend(1)]);
        assert!(t.wrapper_reports(1, true).is_empty(), "agreed");
        // Another connection's word does not count.
        assert!(t.wrapper_reports(7, false).is_empty());
        t.set_suspended(false).expect("resume");
        assert_eq!(t.wrapper_reports(1, true), [Effect::Resume(1)]);
    }

    #[test]
    fn a_suspended_target_restored_after_a_restart_stays_suspended() {
        let record = TargetRecord {
            machine: "m".into(),
            state: TargetState::Running,
            reason: None,
            exit_code: None,
            started: Some(1_000),
            ended: None,
            suspended: true,
            waiting: None,
            limits: None,
            server: None,
        };
        let now = Instant::now();
        let mut t = Target::restored(
            &record,
            true,
            Some("h".into()),
            0,
            now,
            Duration::from_secs(30),
        );
        assert!(t.record("m").suspended, "shown as stored");
        // A resume while its wrapper is away is kept for its hello.
        assert_eq!(
            t.set_suspended(false),
            Ok(vec![Effect::StoreSuspended(false)])
        );
        t.set_suspended(true).expect("suspend again");
        let welcomed = t
            .hello(now, 5, Credential::ResumeKey { valid: true })
            .expect("welcome");
        assert!(welcomed.effects.is_empty());
        // The wrapper says it is suspended: agreed, nothing to send.
        let report = SuspendReport {
            capable: true,
            suspended: true,
        };
        assert!(t.wrapper_hello(5, report).is_empty());
        // One that says it runs is suspended again.
        assert_eq!(t.wrapper_hello(5, CAPABLE), [Effect::Suspend(5)]);
    }
}
