//! Calls across a link: ids, deadlines and how pending calls fail.
//!
//! A `Packet` is what travels: a `Call` (expects a `Reply` with the same id), a `Cast`
//! (one-way) or a `Reply`. `PendingCalls<T>` keeps, per call id, the caller's own tag `T`
//! (what to do with the answer) and a deadline; the loop asks it for expired calls
//! (`Timeout`) and, when the peer goes away, fails all of them (`PeerGone`). Tags instead of
//! closures keep the state a plain value that the loop passes to handlers.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::hello::Role;

pub(crate) type CallId = u64;

/// What travels on a link in one direction: our calls and casts, and replies to the
/// peer's calls.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum Packet<Req, Rep> {
    Call {
        id: CallId,
        req: Req,
        due: Due,
    },
    Cast(Req),
    Reply {
        id: CallId,
        result: Result<Rep, RemoteError>,
    },
}

/// How soon a caller needs the answer to a call. A callee that serves calls in batches
/// (db commits one transaction per batch) may hold a call until its answer is due, so
/// that one batch covers more: a caller that needs the answer only later says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) enum Due {
    /// As soon as the callee serves calls.
    #[default]
    Soon,
    /// Nothing waits for the answer before this wall-clock time (ms since the epoch).
    By(i64),
}

/// An error the remote side returned for a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub(crate) enum RemoteError {
    #[error("{0}")]
    Failed(String),
    #[error("the disk is full: {0}")]
    DiskFull(String),
    #[error("not found: {0}")]
    NotFound(String),
}

/// Why a call produced no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CallError {
    #[error("the {0} process went away before answering")]
    PeerGone(Role),
    #[error("the {0} process did not answer within {1:?}")]
    Timeout(Role, Duration),
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// The peer answered with the reply of another kind of request: two builds disagree
    /// about the link, or one has a bug.
    #[error("the {peer} process answered {call} with {reply}")]
    WrongReply {
        peer: Role,
        call: &'static str,
        reply: String,
    },
}

/// One kind of request on a link, bound to the one reply shape it expects. The link's
/// reply enum `R` is unpacked here and nowhere else, so "peer answered X with an
/// impossible Y" is one `CallError::WrongReply` instead of an arm at every caller. The
/// links declare their kinds with `wire::calls!`.
pub(crate) trait Call<R: std::fmt::Debug> {
    /// What the caller gets from a reply of the right shape.
    type Reply;
    /// Who answers (for the error).
    const PEER: Role;
    /// The request's name (for the error).
    const NAME: &'static str;

    /// The value, or the reply back when it has another shape.
    fn unpack(reply: R) -> Result<Self::Reply, R>;

    /// A call's outcome as the typed value.
    fn take(result: Result<R, CallError>) -> Result<Self::Reply, CallError> {
        Self::unpack(result?).map_err(|other| {
            // The variant and a little of its payload is enough to see the mismatch;
            // an output reply can be megabytes.
            let reply: String = format!("{other:?}").chars().take(120).collect();
            CallError::WrongReply {
                peer: Self::PEER,
                call: Self::NAME,
                reply,
            }
        })
    }
}

struct Pending<T> {
    deadline: Instant,
    timeout: Duration,
    tag: T,
}

/// A table of pending calls larger than this shrinks when mostly empty.
const SHRINK_ABOVE: usize = 256;

/// Calls awaiting a reply on one link.
pub(crate) struct PendingCalls<T> {
    peer: Role,
    next_id: CallId,
    calls: HashMap<CallId, Pending<T>>,
    /// The calls by deadline: the loops ask for the earliest after every event, and
    /// thousands of output writes may be in flight.
    deadlines: BTreeSet<(Instant, CallId)>,
}

impl<T> PendingCalls<T> {
    pub(crate) fn new(peer: Role) -> PendingCalls<T> {
        Self::with_first_id(peer, 1)
    }

    /// Ids start at `first` (to keep the ids of two links apart).
    pub(crate) fn with_first_id(peer: Role, first: CallId) -> PendingCalls<T> {
        PendingCalls {
            peer,
            next_id: first,
            calls: HashMap::new(),
            deadlines: BTreeSet::new(),
        }
    }

    /// Register a call that must be answered within `timeout`; returns its id.
    pub(crate) fn start(&mut self, now: Instant, timeout: Duration, tag: T) -> CallId {
        let id = self.next_id;
        self.next_id += 1;
        self.deadlines.insert((now + timeout, id));
        self.calls.insert(
            id,
            Pending {
                deadline: now + timeout,
                timeout,
                tag,
            },
        );
        id
    }

    /// The reply for `id` arrived: hand back the tag (`None` for an unknown or expired id,
    /// which the caller logs and drops).
    pub(crate) fn finish(&mut self, id: CallId) -> Option<T> {
        let p = self.calls.remove(&id)?;
        self.deadlines.remove(&(p.deadline, id));
        self.shrink();
        Some(p.tag)
    }

    /// After a burst (one call per job at start-up), give the table's memory back (the
    /// ordered set frees its nodes by itself).
    fn shrink(&mut self) {
        if self.calls.capacity() > SHRINK_ABOVE && self.calls.len() * 8 < self.calls.capacity() {
            self.calls.shrink_to(self.calls.len() * 2);
        }
    }

    /// The tag of a call still pending.
    pub(crate) fn get(&self, id: CallId) -> Option<&T> {
        self.calls.get(&id).map(|p| &p.tag)
    }

    /// Remove and return every call whose deadline has passed.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<(CallId, T, CallError)> {
        let mut out = Vec::new();
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(p) = self.calls.remove(&id) {
                out.push((id, p.tag, CallError::Timeout(self.peer, p.timeout)));
            }
        }
        self.shrink();
        out.sort_by_key(|(id, _, _)| *id);
        out
    }

    /// The peer is gone: every pending call fails.
    pub(crate) fn fail_all(&mut self) -> Vec<(CallId, T, CallError)> {
        self.deadlines.clear();
        let mut out: Vec<_> = self
            .calls
            .drain()
            .map(|(id, p)| (id, p.tag, CallError::PeerGone(self.peer)))
            .collect();
        out.sort_by_key(|(id, _, _)| *id);
        out
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(deadline, _)| *deadline)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.calls.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::channel::{Channel, ChannelError};
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_burst_of_calls_gives_its_memory_back_once_answered() {
        let mut calls = PendingCalls::new(Role::Db);
        let t0 = Instant::now();
        let ids: Vec<CallId> = (0..10_000)
            .map(|i| calls.start(t0, Duration::from_secs(10), i))
            .collect();
        assert!(calls.calls.capacity() >= 10_000);
        for (i, id) in ids.iter().enumerate().skip(1) {
            assert_eq!(calls.finish(*id), Some(i));
        }
        assert_eq!(calls.len(), 1);
        assert!(
            calls.calls.capacity() <= SHRINK_ABOVE,
            "{}",
            calls.calls.capacity()
        );
        assert_eq!(calls.finish(ids[0]), Some(0));
    }

    #[test]
    fn deadline_expiry_fails_only_late_calls() {
        let mut calls = PendingCalls::new(Role::Db);
        let t0 = Instant::now();
        let fast = calls.start(t0, Duration::from_millis(10), "fast");
        let slow = calls.start(t0, Duration::from_secs(10), "slow");
        assert_eq!(calls.next_deadline(), Some(t0 + Duration::from_millis(10)));
        let expired = calls.expire(t0 + Duration::from_millis(20));
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].0, fast);
        assert_eq!(
            expired[0].2,
            CallError::Timeout(Role::Db, Duration::from_millis(10))
        );
        assert_eq!(calls.finish(fast), None, "an expired call is gone");
        assert_eq!(calls.finish(slow), Some("slow"));
        assert!(calls.is_empty());
    }

    #[test]
    fn the_next_deadline_follows_finished_and_expired_calls() {
        let mut calls = PendingCalls::new(Role::Db);
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let a = calls.start(t0, ms(30), "a");
        let b = calls.start(t0, ms(10), "b");
        let c = calls.start(t0 + ms(5), ms(10), "c");
        assert_eq!(calls.next_deadline(), Some(t0 + ms(10)));
        assert_eq!(calls.finish(b), Some("b"));
        assert_eq!(
            calls.next_deadline(),
            Some(t0 + ms(15)),
            "b's deadline left"
        );
        let expired = calls.expire(t0 + ms(20));
        assert_eq!(expired.iter().map(|e| e.0).collect::<Vec<_>>(), vec![c]);
        assert_eq!(calls.next_deadline(), Some(t0 + ms(30)));
        assert_eq!(calls.fail_all().len(), 1);
        assert_eq!(calls.next_deadline(), None);
        assert_eq!(calls.finish(a), None);
    }

    #[test]
    fn peer_close_fails_pending_calls() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut main: Channel<_, Packet<u32, ()>, Packet<(), u32>> =
            Channel::new(a, Role::Main, Role::Db).unwrap();
        let db: Channel<_, Packet<(), u32>, Packet<u32, ()>> =
            Channel::new(b, Role::Db, Role::Main).unwrap();
        let mut calls = PendingCalls::new(Role::Db);
        let now = Instant::now();
        for n in 0..3 {
            let id = calls.start(now, Duration::from_secs(60), n);
            main.send(&Packet::Call {
                id,
                req: n,
                due: Due::Soon,
            })
            .unwrap();
        }
        drop(db);
        match main.recv_blocking() {
            Err(ChannelError::PeerGone(Role::Db)) => {
                let failed = calls.fail_all();
                assert_eq!(failed.len(), 3);
                assert!(
                    failed
                        .iter()
                        .all(|(_, _, e)| *e == CallError::PeerGone(Role::Db))
                );
            }
            other => panic!("expected PeerGone, got {other:?}"),
        }
        assert!(calls.is_empty());
    }
}
