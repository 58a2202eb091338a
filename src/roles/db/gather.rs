//! Holding db's calls back so that one commit covers many: a stream of requests waits
//! for a window that grows while it lasts, a call whose answer is due later waits until
//! then (`Due::By`: a pre-staged run's writes until shortly before its slot).

use std::time::{Duration, Instant};

use crate::ipc::CallId;
use crate::ipc::rpc::Due;
use crate::wire::db::DbRequest;

/// How long a batch may wait for more while requests flow, and how much output makes it
/// go at once. A commit per few frames or per target costs db more than the writes (a
/// firing of 1,000 targets was 1,200 commits); a few milliseconds more before an answer
/// or an ack (sent at least every 250 ms) cost nothing. The first held batch of a stream
/// waits `GATHER_FOR`; each next one twice as long as the one before, up to
/// `GATHER_MAX`: a stream of requests of T seconds costs about log2(T / 10 ms) commits
/// up to a second and one a second after that, whatever the number of targets it comes
/// from (a fixed window made commits follow the firing's length, so its targets: 989
/// for 10,000). The answer a held request waits for is late by at most the window.
const GATHER_FOR: Duration = Duration::from_millis(10);
const GATHER_MAX: Duration = Duration::from_millis(1280);
const GATHER_BYTES: usize = 4 * 1024 * 1024;
/// Requests that arrived this recently make a stream worth waiting for; one after a
/// quiet spell (a lone API read, a heartbeat's worth of output) is served at once.
const FLOWING: Duration = Duration::from_millis(50);
/// The longest a call due later ([`Due::By`]) is held, and how many calls a held batch
/// may reach before it is served anyway (memory).
const HOLD_MAX: Duration = Duration::from_secs(120);
const GATHER_CALLS: usize = 65_536;

/// The calls db holds back, and when they are to be served.
pub(super) struct Held {
    calls: Vec<(CallId, DbRequest)>,
    /// Output bytes among the held calls (kept as they come: a batch held until a slot
    /// may hold tens of thousands of calls, too many to count again at every turn).
    bytes: usize,
    serve_at: Option<Instant>,
    /// How long the next held stream batch waits: [`GATHER_FOR`] after a quiet spell,
    /// doubled by every held commit while requests keep flowing, up to [`GATHER_MAX`].
    window: Duration,
    /// When requests due now last arrived: only a flowing stream is held back.
    arrived: Option<Instant>,
    /// The held calls waited for a window (not served as they came).
    waited: bool,
}

/// What to do after calls arrived.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Serve every held call now.
    Serve,
    /// Serve them at this time (the first of them due then), unless more change it.
    At(Instant),
}

impl Held {
    pub(super) fn new() -> Self {
        Held {
            calls: Vec::new(),
            bytes: 0,
            serve_at: None,
            window: GATHER_FOR,
            arrived: None,
            waited: false,
        }
    }

    /// Take `calls` that arrived `now` (wall clock `now_ms`). A call due [`Due::Soon`]
    /// while requests have been flowing waits for the current window (from
    /// [`GATHER_FOR`] up to [`GATHER_MAX`]), one after a quiet spell goes at once; a call
    /// [`Due::By`] a later time waits until then (at most [`HOLD_MAX`]). Meanwhile more
    /// arrive, and one commit covers them all (and the tail bytes output writes shed are
    /// never written, `placement.rs`). Held output over [`GATHER_BYTES`], or
    /// [`GATHER_CALLS`] held calls, go at once. Calls are served in the order they came,
    /// so a read sees every write before it, held or not.
    pub(super) fn add(
        &mut self,
        calls: Vec<(CallId, DbRequest, Due)>,
        now: Instant,
        now_ms: i64,
    ) -> Option<Next> {
        let flowing = self
            .arrived
            .is_some_and(|at| now.saturating_duration_since(at) < FLOWING);
        if calls
            .iter()
            .any(|(_, _, due)| due_later(*due, now_ms).is_none())
        {
            self.arrived = Some(now);
            if !flowing {
                self.window = GATHER_FOR;
            }
        }
        for (id, req, due) in calls {
            let at = hold_until(due, now, now_ms, flowing.then_some(self.window));
            self.serve_at = Some(self.serve_at.map_or(at, |t| t.min(at)));
            if let DbRequest::AppendOutput { data, .. } = &req {
                self.bytes += data.len();
            }
            self.calls.push((id, req));
        }
        let serve_at = self.serve_at?;
        if serve_at <= now || self.bytes >= GATHER_BYTES || self.calls.len() >= GATHER_CALLS {
            return Some(Next::Serve);
        }
        self.waited = true;
        Some(Next::At(serve_at))
    }

    /// Every held call, to be served at `now`. A stream that lasts gets a longer window
    /// for its next batch, whether its window ran out on the timer or while db was busy
    /// with the commit before (then the next calls find it ran out).
    pub(super) fn take(&mut self, now: Instant) -> Vec<(CallId, DbRequest)> {
        if std::mem::take(&mut self.waited)
            && self
                .arrived
                .is_some_and(|at| now.saturating_duration_since(at) < FLOWING)
        {
            self.window = (self.window * 2).min(GATHER_MAX);
        }
        self.serve_at = None;
        self.bytes = 0;
        std::mem::take(&mut self.calls)
    }
}

/// When a call that arrived `now` (wall clock `now_ms`) is to be served: a call due later
/// at that time, at most [`HOLD_MAX`] from now; any other after `window` while a stream
/// flows, else at once.
fn hold_until(due: Due, now: Instant, now_ms: i64, window: Option<Duration>) -> Instant {
    match due_later(due, now_ms) {
        Some(wait) => now + wait.min(HOLD_MAX),
        None => now + window.unwrap_or_default(),
    }
}

/// How long from `now_ms` until a call is due, when that is later; `None` for a call due
/// now (`Soon`, or a time already reached).
fn due_later(due: Due, now_ms: i64) -> Option<Duration> {
    match due {
        Due::By(ms) if ms > now_ms => u64::try_from(ms - now_ms).ok().map(Duration::from_millis),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{Due, GATHER_CALLS, GATHER_FOR, HOLD_MAX, Held, Next, hold_until};
    use crate::wire::db::DbRequest;
    use std::time::{Duration, Instant};

    #[test]
    fn a_call_due_later_waits_until_then_and_no_longer_than_the_cap() {
        let now = Instant::now();
        let ms = 1_000_000;
        let window = Some(Duration::from_millis(10));
        assert_eq!(
            hold_until(Due::By(ms + 5_000), now, ms, window),
            now + Duration::from_secs(5)
        );
        assert_eq!(
            hold_until(Due::By(ms + 5_000), now, ms, None),
            now + Duration::from_secs(5)
        );
        assert_eq!(
            hold_until(Due::By(ms + 10_000_000), now, ms, None),
            now + HOLD_MAX
        );
    }

    fn write(n: u64) -> (crate::ipc::CallId, DbRequest, Due) {
        (n, DbRequest::GetMeta(format!("k{n}")), Due::Soon)
    }

    #[test]
    fn writes_due_later_are_held_together_and_a_call_due_now_takes_them_along() {
        let mut held = Held::new();
        let t0 = Instant::now();
        let ms = 1_000_000;
        let by = |n: u64, at: i64| (n, DbRequest::GetMeta(format!("k{n}")), Due::By(at));
        // Two writes due in 10 s and 5 s: served at the first of them.
        assert_eq!(
            held.add(vec![by(1, ms + 10_000)], t0, ms),
            Some(Next::At(t0 + Duration::from_secs(10)))
        );
        assert_eq!(
            held.add(vec![by(2, ms + 5_000)], t0, ms),
            Some(Next::At(t0 + Duration::from_secs(5)))
        );
        // A read after a quiet spell goes at once, and the held writes with it, in order.
        assert_eq!(held.add(vec![write(3)], t0, ms), Some(Next::Serve));
        let ids: Vec<_> = held.take(t0).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, [1, 2, 3]);
        assert_eq!(held.add(Vec::new(), t0, ms), None, "nothing held");
    }

    #[test]
    fn a_stream_waits_for_a_window_that_grows_while_it_lasts() {
        let mut held = Held::new();
        let t0 = Instant::now();
        assert_eq!(held.add(vec![write(1)], t0, 0), Some(Next::Serve));
        held.take(t0);
        let t1 = t0 + Duration::from_millis(5);
        assert_eq!(
            held.add(vec![write(2)], t1, 0),
            Some(Next::At(t1 + GATHER_FOR))
        );
        held.take(t1 + GATHER_FOR);
        let t2 = t1 + GATHER_FOR;
        assert_eq!(
            held.add(vec![write(3)], t2, 0),
            Some(Next::At(t2 + GATHER_FOR * 2))
        );
    }

    #[test]
    fn a_window_that_ran_out_while_db_was_busy_grows_too() {
        let mut held = Held::new();
        let t0 = Instant::now();
        assert_eq!(held.add(vec![write(1)], t0, 0), Some(Next::Serve));
        held.take(t0);
        let t1 = t0 + Duration::from_millis(5);
        assert_eq!(
            held.add(vec![write(2)], t1, 0),
            Some(Next::At(t1 + GATHER_FOR))
        );
        // db was committing meanwhile: the next calls come after the window ran out.
        let t2 = t1 + GATHER_FOR * 3;
        assert_eq!(held.add(vec![write(3)], t2, 0), Some(Next::Serve));
        held.take(t2);
        let t3 = t2 + Duration::from_millis(1);
        assert_eq!(
            held.add(vec![write(4)], t3, 0),
            Some(Next::At(t3 + GATHER_FOR * 2))
        );
    }

    #[test]
    fn too_many_held_calls_go_at_once() {
        let mut held = Held::new();
        let t0 = Instant::now();
        let calls = (0..GATHER_CALLS as u64)
            .map(|n| (n, DbRequest::GetMeta(String::new()), Due::By(60_000)))
            .collect();
        assert_eq!(held.add(calls, t0, 0), Some(Next::Serve));
    }

    #[test]
    fn a_call_due_now_follows_the_stream() {
        let now = Instant::now();
        let ms = 1_000_000;
        let window = Some(Duration::from_millis(40));
        assert_eq!(
            hold_until(Due::Soon, now, ms, window),
            now + Duration::from_millis(40)
        );
        assert_eq!(hold_until(Due::Soon, now, ms, None), now);
        // Due at a time already past: as any call due now.
        assert_eq!(hold_until(Due::By(ms - 1), now, ms, None), now);
        assert_eq!(
            hold_until(Due::By(ms), now, ms, window),
            now + Duration::from_millis(40)
        );
    }
}
