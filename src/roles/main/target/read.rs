//! What the rest of main reads of a target: its fields, private to this module, change
//! only by the transitions.

use super::{Target, Token};
use crate::wire::link::ConnId;
use crate::wire::records::Millis;

impl Target {
    /// Its batch in the run (0 for the first).
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The connection of its wrapper, while one is open.
    pub fn conn(&self) -> Option<ConnId> {
        self.conn
    }

    /// Whether its launch token was presented.
    pub fn token(&self) -> Token {
        self.token
    }

    /// SHA-256 (hex) of its session's resume key, once a token welcome created one.
    pub fn resume_hash(&self) -> Option<&str> {
        self.resume_hash.as_deref()
    }

    /// Output up to this seq is committed (and acknowledged).
    pub fn acked_seq(&self) -> u64 {
        self.acked_seq
    }

    /// A user kill is to be delivered (now or when the wrapper reconnects).
    pub fn kill_wanted(&self) -> bool {
        self.kill_wanted
    }

    /// Suspended by an operator.
    pub fn suspended(&self) -> bool {
        self.suspended
    }

    /// Its wrapper said it can suspend.
    pub fn can_suspend(&self) -> bool {
        self.can_suspend
    }

    /// When its command started (server clock, unix ms).
    pub fn started(&self) -> Option<Millis> {
        self.started
    }

    /// When its outcome was decided (server clock, unix ms).
    pub fn ended(&self) -> Option<Millis> {
        self.ended
    }

    /// 1 for the first attempt; a retry adds one.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Held back by `max_running_per_machine`: why.
    pub fn throttled(&self) -> Option<&str> {
        self.throttled.as_deref()
    }

    /// How the job's resource limits were applied, as its wrapper said.
    pub fn limits(&self) -> Option<&str> {
        self.limits.as_deref()
    }
}
