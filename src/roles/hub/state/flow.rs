//! Flow control of wrapper output: how much the hub lets into the daemon at once.
//!
//! Every output frame the hub forwards to main costs [`output_cost`] of a read budget;
//! main gives the cost back (`MainToHub::OutputCredit`) once the frame left main and db
//! (committed, refused, or dropped). While the whole daemon holds `total` or one
//! connection holds `per_conn`, the hub stops reading that wrapper's socket: its output
//! waits in the kernel's socket buffers and then in the wrapper's own window and spool,
//! which is where a slow database must push back to. So the output on its way to db is
//! bounded by `total` (plus one read turn), however many wrappers stream at once.
//!
//! A connection with nothing in flight may always read one message while the total is
//! under `total + reserve`: the wrapper's control messages (`started`, `exited`,
//! heartbeats) travel in the same stream as its output, and must not wait for the other
//! wrappers' output to be committed. So the bound is `total + reserve`.
//!
//! The sockets are edge-triggered, so a paused connection gets no new event for bytes
//! that were already there: it waits in a FIFO and is read again by the hub as soon as
//! credits make room (`resumable`), oldest first, so every wrapper gets its turn.
//!
//! [`output_cost`]: crate::wire::link::output_cost

use crate::wire::link::ConnId;
use std::collections::{HashMap, HashSet, VecDeque};

/// The read budget.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlowLimits {
    /// Output in flight from all wrappers together.
    pub total: u64,
    /// Output in flight from one wrapper.
    pub per_conn: u64,
    /// Above `total`, for connections with nothing in flight (one message each).
    pub reserve: u64,
}

impl Default for FlowLimits {
    fn default() -> FlowLimits {
        // The wrappers keep up to 16 MiB each unacknowledged; the daemon holds far less
        // than that in all. 8 MiB per connection keeps one flooding job's pipeline full
        // (db commits it in a few batches); 32 MiB lets four do so at once.
        FlowLimits {
            total: 32 * 1024 * 1024,
            per_conn: 8 * 1024 * 1024,
            reserve: 16 * 1024 * 1024,
        }
    }
}

/// The hub's accounting of output in flight and of the connections waiting for room.
#[derive(Debug)]
pub(crate) struct OutputFlow {
    limits: FlowLimits,
    in_flight: u64,
    per_conn: HashMap<ConnId, u64>,
    /// Connections not read for want of budget, oldest first.
    paused: VecDeque<ConnId>,
    /// The members of `paused` (so pausing stays O(1) with thousands of connections).
    paused_set: HashSet<ConnId>,
}

impl OutputFlow {
    pub(crate) fn new(limits: FlowLimits) -> OutputFlow {
        OutputFlow {
            limits,
            in_flight: 0,
            per_conn: HashMap::new(),
            paused: VecDeque::new(),
            paused_set: HashSet::new(),
        }
    }

    /// Whether `conn` may be read now, counting `reading` bytes already read this turn
    /// and not yet charged.
    pub(crate) fn may_read(&self, conn: ConnId, reading: u64) -> bool {
        let own = self.per_conn.get(&conn).copied().unwrap_or(0);
        if own + reading == 0 {
            return self.in_flight < self.limits.total + self.limits.reserve;
        }
        self.in_flight + reading < self.limits.total && own + reading < self.limits.per_conn
    }

    /// A frame of `conn` costing `cost` went to main.
    pub(crate) fn forwarded(&mut self, conn: ConnId, cost: u64) {
        self.in_flight += cost;
        *self.per_conn.entry(conn).or_insert(0) += cost;
    }

    /// main gave back `cost` of `conn`'s output (the connection may be gone by now).
    pub(crate) fn credited(&mut self, conn: ConnId, cost: u64) {
        debug_assert!(
            cost <= self.in_flight,
            "main never credits more than the hub charged"
        );
        self.in_flight = self.in_flight.saturating_sub(cost);
        if let Some(own) = self.per_conn.get_mut(&conn) {
            *own = own.saturating_sub(cost);
            if *own == 0 {
                self.per_conn.remove(&conn);
            }
        }
    }

    /// `conn` stopped being read for want of budget (once in the queue however often).
    pub(crate) fn pause(&mut self, conn: ConnId) {
        if self.paused_set.insert(conn) {
            self.paused.push_back(conn);
        }
    }

    #[cfg(test)]
    pub(crate) fn is_paused(&self, conn: ConnId) -> bool {
        self.paused_set.contains(&conn)
    }

    /// `conn` closed: it waits for nothing. Its output still in flight stays counted
    /// until main's credits for it arrive (main credits every frame it was sent).
    pub(crate) fn forget(&mut self, conn: ConnId) {
        if self.paused_set.remove(&conn) {
            self.paused.retain(|c| *c != conn);
        }
    }

    /// The paused connections that may be read again, oldest first; they leave the
    /// queue (a read that runs out of budget again pauses them anew, at the back).
    pub(crate) fn resumable(&mut self) -> Vec<ConnId> {
        if self.paused.is_empty() || self.in_flight >= self.limits.total + self.limits.reserve {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut still = VecDeque::with_capacity(self.paused.len());
        while let Some(conn) = self.paused.pop_front() {
            if self.may_read(conn, 0) {
                self.paused_set.remove(&conn);
                out.push(conn);
            } else {
                still.push_back(conn);
            }
        }
        self.paused = still;
        out
    }

    /// The paused connections: their wrappers are alive (their unread output waits in
    /// the socket) though nothing is read from them.
    pub(crate) fn paused(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.paused.iter().copied()
    }

    pub(crate) fn any_paused(&self) -> bool {
        !self.paused.is_empty()
    }

    /// Output in flight, all connections.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> u64 {
        self.in_flight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(total: u64, per_conn: u64) -> OutputFlow {
        OutputFlow::new(FlowLimits {
            total,
            per_conn,
            reserve: 0,
        })
    }

    #[test]
    fn one_connection_stops_at_its_own_share() {
        let mut f = flow(100, 40);
        assert!(f.may_read(1, 0));
        f.forwarded(1, 30);
        assert!(f.may_read(1, 0));
        assert!(!f.may_read(1, 10), "bytes read this turn count");
        f.forwarded(1, 10);
        assert!(!f.may_read(1, 0));
        assert!(f.may_read(2, 0), "others still have room");
        f.credited(1, 10);
        assert!(f.may_read(1, 0));
    }

    #[test]
    fn all_connections_stop_at_the_total() {
        let mut f = flow(100, 60);
        f.forwarded(1, 50);
        f.forwarded(2, 50);
        assert_eq!(f.in_flight(), 100);
        assert!(!f.may_read(3, 0));
        f.credited(2, 50);
        assert!(f.may_read(3, 0));
        assert_eq!(f.in_flight(), 50);
    }

    #[test]
    fn paused_connections_resume_oldest_first_once_there_is_room() {
        let mut f = flow(100, 60);
        f.forwarded(1, 60);
        f.forwarded(2, 40);
        f.pause(1);
        f.pause(2);
        f.pause(3);
        f.pause(3);
        assert!(f.resumable().is_empty(), "no room at all");
        f.credited(2, 40);
        assert_eq!(f.resumable(), vec![2, 3], "1 is still over its own share");
        assert!(f.is_paused(1));
        assert!(!f.is_paused(2));
        f.credited(1, 60);
        assert_eq!(f.resumable(), vec![1]);
        assert!(!f.any_paused());
    }

    #[test]
    fn credits_for_a_closed_connection_still_free_the_total() {
        let mut f = flow(100, 100);
        f.forwarded(7, 100);
        f.pause(7);
        f.forget(7);
        assert!(!f.is_paused(7));
        assert!(!f.may_read(8, 0));
        f.credited(7, 100);
        assert!(f.may_read(8, 0));
        assert_eq!(f.in_flight(), 0);
    }

    #[test]
    fn a_connection_with_nothing_in_flight_reads_one_message_from_the_reserve() {
        let mut f = OutputFlow::new(FlowLimits {
            total: 100,
            per_conn: 60,
            reserve: 20,
        });
        f.forwarded(1, 60);
        f.forwarded(2, 40);
        assert!(f.may_read(3, 0), "its first message comes from the reserve");
        assert!(!f.may_read(3, 5), "but only one");
        f.forwarded(3, 20);
        assert!(!f.may_read(3, 0));
        assert!(!f.may_read(4, 0), "the reserve is used up");
        f.credited(3, 20);
        assert!(f.may_read(4, 0));
    }
}
