//! The wrapper sessions main keeps beside the runs: which connection serves which target,
//! and the budgets of refused hellos (per address, IPv6 by its /64, and in all: what is
//! held back is counted and said in one summary line per window); and the pure decisions
//! about wrappers
//! (`verdicts.rs`: what a hello gets, when silence makes a target lost). The hub's wrapper
//! traffic is handled by `shell/wrappers/`, which calls this part and the run's targets (it
//! holds `Main`, which holds this part, so the two live apart). (How main launches
//! wrappers and which build each minion has is the fleet, `fleet/`.)

#[cfg(test)]
mod tests;
pub(crate) mod verdicts;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::log_budget::Budget;
use crate::logsafe::{Admit, NAME_MAX, PerKey, clip};
use crate::roles::main::messages::{Event, Out};
use crate::wire::link::ConnId;
use crate::wire::records::RunId;
use crate::wire::wrapper::RejectCode;

use verdicts::peer_address;

/// Refusals logged and recorded per peer address a minute.
pub(crate) const REFUSALS_PER_MINUTE: u32 = 10;
/// Peer addresses whose refusals are counted at once.
const REFUSAL_PEERS: usize = 4096;
/// Refusals logged and recorded per [`REFUSAL_WINDOW`] in all, whatever their addresses.
pub(crate) const REFUSAL_RECORDS: u32 = 10;
/// The window of [`REFUSAL_RECORDS`]: the refusals held in one are said at its end.
pub(crate) const REFUSAL_WINDOW: Duration = Duration::from_secs(10);
/// How much of a refusal's message a log line or event carries.
const MESSAGE_MAX: usize = 1024;

/// Wrapper connections bound to the target each serves, and the refused hellos logged and
/// recorded per peer address and in all (rate limits).
#[derive(Debug)]
pub(crate) struct Sessions {
    bound: HashMap<ConnId, (RunId, String)>,
    refusals: PerKey<String>,
    budget: Budget,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions {
            bound: HashMap::new(),
            refusals: PerKey::new(
                std::time::Duration::from_secs(60),
                REFUSALS_PER_MINUTE,
                REFUSAL_PEERS,
            ),
            budget: Budget::new(REFUSAL_WINDOW, REFUSAL_RECORDS),
        }
    }
}

/// A hello refused: what the peer said and the verdict's code and message (the precise
/// ones, for the server's records; the peer may have been told less, `verdicts::told`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refusal<'a> {
    pub run: RunId,
    pub machine: &'a str,
    pub peer: &'a str,
    pub code: RejectCode,
    pub message: &'a str,
}

impl Sessions {
    /// `conn` serves `machine` of `run` from now on (its hello was welcomed).
    pub(crate) fn bind(&mut self, conn: ConnId, run: RunId, machine: &str) {
        self.bound.insert(conn, (run, machine.to_string()));
    }

    /// The target `conn` serves, if it is bound.
    pub(crate) fn target_of(&self, conn: ConnId) -> Option<(RunId, &str)> {
        self.bound.get(&conn).map(|(run, m)| (*run, m.as_str()))
    }

    /// `conn` serves nothing any more (it disconnected, was closed, or its session could
    /// not be recorded); the target it served, if any.
    pub(crate) fn unbind(&mut self, conn: ConnId) -> Option<(RunId, String)> {
        self.bound.remove(&conn)
    }

    /// `run` ended: its wrappers' connections serve nothing any more.
    pub(crate) fn run_ended(&mut self, run: RunId) {
        self.bound.retain(|_, (r, _)| *r != run);
    }

    /// How many connections serve a target now.
    pub(crate) fn len(&self) -> usize {
        self.bound.len()
    }

    /// Log and record a refusal, at most [`REFUSALS_PER_MINUTE`] per peer address a
    /// minute (the rest are counted and said in that address's next line that goes
    /// through) and [`REFUSAL_RECORDS`] per [`REFUSAL_WINDOW`] in all (the rest counted and
    /// said in one summary at the window's end, [`Sessions::tick`]). Everything the peer
    /// sent is clipped and escaped: a refusal costs the peer one hello and must not cost
    /// the server more than a bounded line and row, nor a flood from many addresses more
    /// than a bounded number of them. `job`: the run's job, if the run is in flight.
    pub(crate) fn refused(&mut self, r: Refusal<'_>, job: Option<String>, now: Instant) -> Out {
        let mut out = self.tick(now);
        // Past the budget nothing is looked up per address: a flood costs a count.
        if !self.budget.has_room(now) {
            self.budget.hold();
            return out;
        }
        let address = peer_address(r.peer);
        let held = match self.refusals.admit(&address, now) {
            Admit::Record { held } => held,
            Admit::Hold => return out,
        };
        self.budget.admit(now);
        let Refusal { run, code, .. } = r;
        let machine = clip(r.machine, NAME_MAX);
        let message = clip(r.message, MESSAGE_MAX);
        let peer = clip(r.peer, NAME_MAX);
        let earlier = match held {
            0 => String::new(),
            n => {
                format!(" ({n} more refusal(s) of {address} in the last minute were not recorded)")
            }
        };
        log::warn!(
            "run {run}: wrapper on {machine} from {peer} rejected ({code:?}): {message}{earlier}"
        );
        if !code.is_transient() {
            out.event(Event {
                kind: "wrapper_refused",
                job,
                run: Some(run),
                machine: Some(machine),
                message: format!(
                    "a wrapper from {peer} was refused ({code:?}): {message}{earlier}"
                ),
            });
        }
        out
    }

    /// The summary of the refusals held back by the budget in all, once their window has
    /// ended: one line and one `wrapper_refused` row (main's one-second tick, and before
    /// the next refusal).
    pub(crate) fn tick(&mut self, now: Instant) -> Out {
        let mut out = Out::new();
        let Some(held) = self.budget.summary_due(now) else {
            return out;
        };
        let message = format!(
            "{held} more refused wrapper hello(s) were not logged or recorded (at most \
             {REFUSAL_RECORDS} every {} s in all and {REFUSALS_PER_MINUTE} a minute per \
             address are)",
            REFUSAL_WINDOW.as_secs()
        );
        log::warn!("{message}");
        out.event(Event {
            kind: "wrapper_refused",
            job: None,
            run: None,
            machine: None,
            message,
        });
        out
    }
}
