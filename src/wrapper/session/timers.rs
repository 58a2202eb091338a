//! The session's deadlines: what the loop sleeps until (`poll_timeout`) and what it does
//! when one is due (`on_timers`).
//!
//! Besides the command's own (splay, timeout, kill grace, output flush) and the link's
//! (reconnect, connect, welcome, liveness), two answers are owed by a server that serves
//! the run ([`Session::answer_due`]): `go` or `cancel` by the slot plus the stage grace,
//! and `done` soon after `exited`. The hub answers the wrapper's pings whatever the
//! server behind it knows, so `last_rx` stays fresh on a link whose run the server has
//! forgotten; without these two a wrapper would wait there for ever. When one is not
//! paid the link is dropped and the wrapper asks again with a new `hello`: a server that
//! knows the run welcomes it (and takes `exited` again, or says the slot has passed), one
//! that does not rejects it, and none at all is what `patience` bounds.

use std::time::{Duration, Instant};

use super::{Phase, Session};
use crate::wire::wrapper::{ExitReason, WrapperMsg};
use crate::wrapper::error::WrapperError;

pub(super) const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(5);
/// How long after `exited` (or the server's last message since) `done` may take before
/// the link is taken for one whose server no longer serves the run.
pub(super) const DONE_WAIT: Duration = Duration::from_secs(60);

impl Session {
    /// While welcomed on an open link: when that server was last heard.
    pub(super) fn served(&self) -> Option<Instant> {
        (self.welcomed && self.link.is_open()).then_some(self.link.last_rx)
    }

    /// The job's heartbeat period; while waiting for `go`, the slower staged one when the
    /// welcome gave it.
    pub(super) fn heartbeat_interval(&self) -> Duration {
        self.job.as_ref().map_or(DEFAULT_HEARTBEAT, |j| {
            let staged = matches!(self.phase, Phase::AwaitGo) && j.staged_heartbeat_s > 0;
            Duration::from_secs(if staged {
                j.staged_heartbeat_s
            } else {
                j.heartbeat_s.max(1)
            })
        })
    }

    fn liveness_limit(&self) -> Duration {
        (self.heartbeat_interval() * 4).max(Duration::from_secs(20))
    }

    /// The answer a serving server owes now, if any: by when, and what it is.
    pub(super) fn answer_due(&self) -> Option<(Instant, &'static str)> {
        self.served()?;
        match &self.phase {
            Phase::AwaitGo => Some((
                self.patience.start_deadline(),
                "no go or cancel from the hub by the slot plus the stage grace",
            )),
            Phase::Finished(_) => self.exited_sent_at.map(|sent| {
                (
                    sent.max(self.link.last_msg) + DONE_WAIT,
                    "no done from the hub after exited",
                )
            }),
            _ => None,
        }
    }

    pub(super) fn poll_timeout(&self, now: Instant) -> Option<Duration> {
        let mut next: Vec<Option<Instant>> = vec![
            self.out.flush_deadline(),
            self.heartbeat_at,
            self.reconnect_at,
            self.hello_deadline,
            self.link.setup_deadline(),
            Some(self.patience.last_known(self.served()) + self.settings.give_up),
            self.answer_due().map(|(at, _)| at),
            // Past once the wait is over and nothing was there to probe with: new output
            // wakes the loop then.
            self.output_hold
                .as_ref()
                .map(|h| h.deadline())
                .filter(|at| *at > now),
        ];
        if self.started.is_none() && self.served().is_none() {
            next.push(Some(self.patience.start_deadline()));
        }
        if self.link.is_open() {
            next.push(Some(self.link.last_rx + self.liveness_limit()));
        }
        match &self.phase {
            Phase::Splay(until) => next.push(Some(*until)),
            Phase::Running(r) => {
                if r.has_ready_pipe() {
                    return Some(Duration::ZERO);
                }
                next.push(r.next_deadline(now));
            }
            _ => {}
        }
        next.into_iter()
            .flatten()
            .min()
            .map(|t| t.saturating_duration_since(now))
    }

    pub(super) fn on_timers(&mut self, now: Instant) {
        self.out.flush_due(now, false);
        if self.output_hold.as_ref().is_some_and(|h| h.lifted(now)) {
            log::warn!("no answer from the server to the output it could not store; sending again");
            self.output_hold = None;
        }
        if let Phase::Splay(until) = self.phase
            && until <= now
        {
            self.start_command(now);
        }
        let timeout = self.job.as_ref().map_or(0, |j| j.timeout_s);
        let grace = self.kill_grace();
        if let Phase::Running(r) = &mut self.phase
            && r.on_timers(now)
        {
            let why = format!("timeout of {timeout} s reached");
            r.begin_kill(now, ExitReason::Timeout, grace, &why, &mut self.out);
        }
        if self.heartbeat_at.is_some_and(|t| t <= now) {
            if self.welcomed {
                self.ctrl.push_back(WrapperMsg::Heartbeat {
                    at: crate::wire::records::now_ms(),
                    suspended: self.is_suspended(),
                });
                self.link.send_ping(&mut self.link_events);
            }
            self.heartbeat_at = Some(now + self.heartbeat_interval());
        }
        if self.reconnect_at.is_some_and(|t| t <= now) {
            if self.link.is_down() {
                self.dial(now);
            } else {
                // Already connecting or connected: that attempt has deadlines of its own.
                self.reconnect_at = None;
            }
        }
        if self.link.setup_deadline().is_some_and(|t| t <= now) {
            self.link_down(now, "connecting to the hub timed out");
        }
        if self.hello_deadline.is_some_and(|t| t <= now) {
            self.link_down(now, "no welcome from the hub in time");
        }
        if self.link.is_open() && self.link.last_rx + self.liveness_limit() <= now {
            self.link_down(now, "the hub went silent");
        }
        if let Some((due, what)) = self.answer_due()
            && due <= now
        {
            self.link_down(now, &format!("{what}; asking again on a new link"));
        }
        if self.started.is_none()
            && self.outcome.is_none()
            && self.patience.start_abandoned(now, self.served().is_some())
        {
            log::info!("the slot plus the stage grace has passed with no server; giving up");
            let err = WrapperError::NotStarted {
                run: self.settings.run,
                waited_s: self.patience.unknown_for(now).as_secs(),
                why: self.patience.why().to_string(),
            };
            self.give_up(now, err);
            return;
        }
        let known = self.patience.last_known(self.served());
        if self.abandon.is_none() && known + self.settings.give_up <= now {
            let limit = self.settings.give_up;
            log::error!("no contact with the hub for {limit:?}; giving up");
            self.give_up(now, WrapperError::GaveUp(limit));
        }
    }
}
