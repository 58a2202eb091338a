//! The rule that no wrapper is ever left asleep: at every moment it is on a link to a
//! server that knows its run, trying to reach one (a reconnect scheduled, or a connection
//! being set up, each with its deadline), or on its way out (gone by its slot plus the
//! stage grace when its command has not started, after `give_up` when it has).
//!
//! [`Session::standing`] states it over the session's fields and is checked at the end
//! of every loop iteration ([`Session::keep_standing`]): a debug build stops on a
//! breach, a release build logs it and drops the link, which schedules a reconnect, so a
//! defect costs a reconnect instead of an orphan wrapper. (That a served link keeps
//! being served is `timers`' business: the liveness limit and the answers a server owes.)

use std::time::Instant;

use super::{Phase, Session};

/// What will wake the wrapper next, whatever the server does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    /// The outcome is decided; the loop returns on its next turn.
    Ending,
    /// Giving up with a command still there: it is being killed, then the wrapper exits.
    Killing,
    /// Welcomed on an open link (the liveness limit and the answers owed watch it).
    Served,
    /// Connecting or in the WebSocket handshake (the setup deadline).
    SettingUp,
    /// `hello` sent on an open link, waiting for the welcome (the hello deadline).
    AwaitingWelcome,
    /// No link; a reconnect is scheduled.
    Reconnecting,
}

impl Session {
    /// Where the wrapper stands, or what breaks the rule.
    pub(super) fn standing(&self) -> Result<Standing, &'static str> {
        if self.outcome.is_some() {
            return Ok(Standing::Ending);
        }
        if self.abandon.is_some() {
            return match &self.phase {
                Phase::Running(r) if r.is_killing() => Ok(Standing::Killing),
                _ => Err("giving up, but no command is being killed to end the wrapper"),
            };
        }
        if self.welcomed && !self.link.is_open() {
            return Err("welcomed, but the link is not open");
        }
        if self.link.is_down() {
            return match self.reconnect_at {
                Some(_) => Ok(Standing::Reconnecting),
                None => Err("no link and no reconnect scheduled"),
            };
        }
        if !self.link.is_open() {
            return Ok(Standing::SettingUp);
        }
        if self.welcomed {
            return Ok(Standing::Served);
        }
        match self.hello_deadline {
            Some(_) => Ok(Standing::AwaitingWelcome),
            None => Err("an open link with no welcome and no deadline for one"),
        }
    }

    /// End of a loop iteration: the rule must hold. A breach is a defect: a debug build
    /// stops on it; a release build logs it and repairs it the one way that always
    /// works, by dropping the link (which schedules a reconnect) or, when giving up with
    /// nothing left to kill, by ending.
    pub(super) fn keep_standing(&mut self, now: Instant) {
        let standing = self.standing();
        debug_assert!(
            standing.is_ok(),
            "every wrapper is served, setting a link up, reconnecting or ending: {standing:?}"
        );
        let Err(breach) = standing else {
            return;
        };
        log::error!("internal error: {breach}; repairing");
        match self.abandon.take() {
            Some(err) => self.outcome = Some(Err(err)),
            None => self.link_down(now, "repairing a link left without a way forward"),
        }
    }
}
