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

use super::target::{Effect, Phase, Target};
use crate::wire::link::ConnId;

/// What a wrapper said of suspension in its hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SuspendReport {
    /// It advertised the `suspend` capability.
    pub capable: bool,
    /// Its command is stopped now.
    pub suspended: bool,
}

impl Target {
    /// An operator suspends (`want` true) or resumes this target. `Ok` with no effects:
    /// it already is as asked.
    pub fn set_suspended(&mut self, want: bool) -> Result<Vec<Effect>, String> {
        let verb = if want { "suspend" } else { "resume" };
        if self.is_decided() {
            return Err(format!("cannot {verb}: its outcome is already decided"));
        }
        let Phase::PickedUp {
            running: true,
            exit: None,
            ..
        } = self.phase
        else {
            return Err(format!("cannot {verb}: its command is not running"));
        };
        if !self.can_suspend {
            return Err(match self.conn {
                Some(_) => format!(
                    "cannot {verb}: its wrapper is an older build without suspend and \
                     resume (deploy the new wrapper for later runs)"
                ),
                None => format!(
                    "cannot {verb}: its wrapper is not connected and has not said it can \
                     suspend; try again once it reconnects"
                ),
            });
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
    pub fn wrapper_hello(&mut self, conn: ConnId, report: SuspendReport) -> Vec<Effect> {
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
    pub fn wrapper_reports(&mut self, conn: ConnId, suspended: bool) -> Vec<Effect> {
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
