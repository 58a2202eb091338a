//! The wrapper sessions main keeps beside the runs: which connection serves which target,
//! and the rate limit of refused hellos; and the pure decisions about wrappers
//! (`verdicts.rs`: what a hello gets, when silence makes a target lost). The hub's wrapper
//! traffic is handled by `shell/wrappers/`, which calls this part and the run's targets (it
//! holds `Main`, which holds this part, so the two live apart). (How main launches
//! wrappers and which build each minion has is the fleet, `fleet/`.)

#[cfg(test)]
mod tests;
pub(crate) mod verdicts;

use std::collections::HashMap;
use std::time::Instant;

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
/// How much of a refusal's message a log line or event carries.
const MESSAGE_MAX: usize = 1024;

/// Wrapper connections bound to the target each serves, and the refused hellos logged and
/// recorded per peer address (a rate limit).
#[derive(Debug)]
pub(crate) struct Sessions {
    bound: HashMap<ConnId, (RunId, String)>,
    refusals: PerKey<String>,
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
        }
    }
}

/// A hello refused: what the peer said and the verdict's code and message.
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
    /// minute (the rest are counted and said in the next line that goes through).
    /// Everything the peer sent is clipped and escaped: a refusal costs the peer one hello
    /// and must not cost the server more than a bounded line and row. `job`: the run's
    /// job, if the run is in flight.
    pub(crate) fn refused(&mut self, r: Refusal<'_>, job: Option<String>, now: Instant) -> Out {
        let mut out = Out::new();
        let address = peer_address(r.peer);
        let held = match self.refusals.admit(&address, now) {
            Admit::Record { held } => held,
            Admit::Hold => return out,
        };
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
}
