//! Holding db's calls back so that one commit covers many: a stream of requests waits
//! for a window that grows while it lasts, a call whose answer is due later waits until
//! then (`Due::By`: a pre-staged run's writes until shortly before its slot).

use super::{Db, arm_commit_report, serve};
use crate::evloop::Ctx;
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
pub(super) const GATHER_FOR: std::time::Duration = std::time::Duration::from_millis(10);
pub(super) const GATHER_MAX: std::time::Duration = std::time::Duration::from_millis(1280);
const GATHER_BYTES: usize = 4 * 1024 * 1024;
/// Requests that arrived this recently make a stream worth waiting for; one after a
/// quiet spell (a lone API read, a heartbeat's worth of output) is served at once.
const FLOWING: std::time::Duration = std::time::Duration::from_millis(50);
/// The longest a call due later ([`Due::By`]) is held, and how many calls a held batch
/// may reach before it is served anyway (memory).
const HOLD_MAX: std::time::Duration = std::time::Duration::from_secs(120);
const GATHER_CALLS: usize = 65_536;

/// Serve the held calls and `calls` now, or hold them back until the first of them is
/// due. A call due [`Due::Soon`] while requests have been flowing waits for the current
/// window (from [`GATHER_FOR`] up to [`GATHER_MAX`]), one after a quiet spell goes at
/// once; a call [`Due::By`] a later time waits until then (at most [`HOLD_MAX`]).
/// Meanwhile more arrive, and one commit covers them all (and the tail bytes output
/// writes shed are never written, `placement.rs`). Held output over [`GATHER_BYTES`], or
/// [`GATHER_CALLS`] held calls, go at once. Calls are served in the order they came, so
/// a read sees every write before it, held or not.
pub(super) fn gather(db: &mut Db, ctx: &mut Ctx<Db>, calls: Vec<(CallId, DbRequest, Due)>) {
    let now = std::time::Instant::now();
    let flowing = db
        .arrived
        .is_some_and(|at| now.saturating_duration_since(at) < FLOWING);
    let now_ms = chrono::Utc::now().timestamp_millis();
    let due_now = |due: &Due| !matches!(due, Due::By(ms) if *ms > now_ms);
    if calls.iter().any(|(_, _, due)| due_now(due)) {
        db.arrived = Some(now);
        if !flowing {
            db.window = GATHER_FOR;
        }
    }
    for (id, req, due) in calls {
        let at = hold_until(due, now, now_ms, flowing.then_some(db.window));
        db.serve_at = Some(db.serve_at.map_or(at, |t| t.min(at)));
        db.gathered.push((id, req));
    }
    let bytes: usize = db
        .gathered
        .iter()
        .map(|(_, r)| match r {
            DbRequest::AppendOutput { data, .. } => data.len(),
            _ => 0,
        })
        .sum();
    let Some(serve_at) = db.serve_at else {
        return;
    };
    if serve_at <= now || bytes >= GATHER_BYTES || db.gathered.len() >= GATHER_CALLS {
        serve_held(db, ctx);
        return;
    }
    if let Some(timer) = db.gather_timer.take() {
        ctx.cancel(timer);
    }
    db.gather_timer = Some(ctx.at(serve_at, |db: &mut Db, ctx| {
        db.gather_timer = None;
        // A stream that lasts gets a longer window for its next batch.
        if db.arrived.is_some_and(|at| at.elapsed() < FLOWING) {
            db.window = (db.window * 2).min(GATHER_MAX);
        }
        serve_held(db, ctx);
        arm_commit_report(db, ctx);
    }));
}

/// When a call that arrived `now` (wall clock `now_ms`) is to be served: a call due later
/// at that time, at most [`HOLD_MAX`] from now; any other after `window` while a stream
/// flows, else at once.
fn hold_until(
    due: Due,
    now: std::time::Instant,
    now_ms: i64,
    window: Option<std::time::Duration>,
) -> std::time::Instant {
    match due {
        Due::By(ms) if ms > now_ms => {
            let wait = std::time::Duration::from_millis(u64::try_from(ms - now_ms).unwrap_or(0));
            now + wait.min(HOLD_MAX)
        }
        _ => now + window.unwrap_or_default(),
    }
}

/// Serve every held call now.
pub(super) fn serve_held(db: &mut Db, ctx: &mut Ctx<Db>) {
    if let Some(timer) = db.gather_timer.take() {
        ctx.cancel(timer);
    }
    db.serve_at = None;
    let calls = std::mem::take(&mut db.gathered);
    serve(db, calls);
}

#[cfg(test)]
mod tests {
    use super::{Due, HOLD_MAX, hold_until};
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
