//! What the rest of main reads of a target: its fields, private to this module, change
//! only by the transitions.

use super::{Phase, Target, Token};
use crate::wire::link::ConnId;
use crate::wire::records::Millis;

impl Target {
    /// The connection of its wrapper, while one is open.
    pub(crate) fn conn(&self) -> Option<ConnId> {
        self.conn
    }

    /// Whether its launch token was presented.
    pub(crate) fn token(&self) -> Token {
        self.token
    }

    /// SHA-256 (hex) of its session's resume key, once a token welcome created one.
    pub(crate) fn resume_hash(&self) -> Option<&str> {
        self.resume_hash.as_deref()
    }

    /// Output up to this seq is committed (and acknowledged).
    pub(crate) fn acked_seq(&self) -> u64 {
        self.acked_seq
    }

    /// Its wrapper said its command ended after output this server has not seen stored.
    /// Either the frames are still on their way (they arrive as usual), or another
    /// server stored and acknowledged them before this one took the run over, and no
    /// frame will come again: db says how far it really is (`sessions.rs`).
    pub(crate) fn awaits_output(&self) -> bool {
        matches!(&self.phase, Phase::PickedUp { exit: Some(exit), .. } if exit.end_seq > self.acked_seq)
    }

    /// Suspended by an operator.
    pub(crate) fn suspended(&self) -> bool {
        self.suspended
    }

    /// When its command started (server clock, unix ms).
    pub(crate) fn started(&self) -> Option<Millis> {
        self.started
    }

    /// 1 for the first attempt; a retry adds one.
    pub(crate) fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Held back by `max_running_per_machine`: why.
    pub(crate) fn throttled(&self) -> Option<&str> {
        self.throttled.as_deref()
    }
}
