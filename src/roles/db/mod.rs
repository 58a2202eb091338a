//! The `db` process: the only daemon process that touches SQLite.
//!
//! Outline of one loop turn: read every request main has sent, apply them in one
//! transaction, commit, and only then answer. (While requests keep coming, a batch waits
//! for more to share its commit, 10 ms at first and longer while the stream lasts:
//! `gather`.) Answers to writes therefore mean "durable",
//! and an output `ack` that main derives from them never covers uncommitted bytes. If the
//! commit fails (a full disk), the batch is rolled back and applied once more; if that
//! fails too, every request of the batch is answered with the error: main keeps its
//! in-memory state and the wrappers keep their unacknowledged output, so nothing is lost.
//! db may block on SQLite: that is why it is a process of its own.

pub(crate) mod attempts;
pub(crate) mod deliveries;
mod dispatch;
mod errors;
pub(crate) mod events;
mod gather;
pub(crate) mod joblog;
mod lease;
pub(crate) mod live;
mod master_probe;
mod masters;
mod opening;
pub(crate) mod output;
pub(crate) mod pg;
mod placement;
pub(crate) mod runs;
pub(crate) mod salt_calls;
pub(crate) mod schema;
pub(crate) mod sql;
pub(crate) mod storage;
pub(crate) mod store;
mod stored_chunk;
mod wrappers;

use mio::event::Event;

use super::common::{
    ControlLink, Controlled, Link, RoleArgs, RoleError, attach_control, open_link,
};
use crate::evloop::{Ctx, EventLoop, Flow};
use crate::ipc::CallId;
use crate::ipc::Role;
use crate::ipc::rpc::{Due, Packet, RemoteError};
use crate::wire::db::{DbNotice, DbRequest, DbToMain, MainToDb};
use crate::wire::link::ControlDown;
use storage::Storage;
use store::{Store, StoreError};

#[cfg(test)]
pub(crate) use dispatch::apply;
pub(crate) use dispatch::apply_batch;
use dispatch::{batch_summary, kind};

type MainLink = Link<DbToMain, MainToDb>;

pub(crate) struct Db {
    control: ControlLink,
    main: MainLink,
    store: Box<dyn Storage>,
    /// Batch transaction latency (`/metrics`), reported to main when it changed.
    commit_latency: crate::metrics::Histogram,
    reported_commits: u64,
    /// The leader lease, on a database several daemons share (`lease.rs`).
    lease: Option<lease::LeaseWatch>,
    /// A standby's listening for the leader's changes (`live.rs`).
    live: live::LiveWatch,
    /// A report is due in a moment (armed by a commit; nothing wakes an idle db).
    report_armed: bool,
    /// Requests held back to be committed with the next ones (`gather.rs`), and the
    /// timer that serves them.
    held: gather::Held,
    held_timer: Option<(crate::evloop::timers::TimerId, std::time::Instant)>,
    /// Several masters on the shared database (`masters.rs`); `None` on SQLite or
    /// without the salt executor.
    masters: Option<masters::Masters>,
}

impl Controlled for Db {
    fn control(&mut self) -> &mut ControlLink {
        &mut self.control
    }

    fn on_control(&mut self, ctx: &mut Ctx<Self>, msg: ControlDown) {
        if let ControlDown::Shutdown = msg {
            log::info!("shutting down");
            // Output held back for the next commit is committed (and answered) first.
            serve_held(self, ctx);
            self.store.release_lease();
            ctx.stop();
        }
    }
}

fn remote(e: StoreError) -> RemoteError {
    match e {
        StoreError::DiskFull { .. } => RemoteError::DiskFull(e.to_string()),
        StoreError::NotFound { .. } => RemoteError::NotFound(e.to_string()),
        other => RemoteError::Failed(other.to_string()),
    }
}

fn serve(db: &mut Db, calls: Vec<(CallId, DbRequest)>) {
    if calls.is_empty() {
        return;
    }
    let started = std::time::Instant::now();
    if log::log_enabled!(log::Level::Debug) {
        log::debug!("commit of {}", batch_summary(&calls));
    }
    let first = apply_batch(db.store.as_mut(), &calls);
    db.commit_latency.observe(started.elapsed().as_secs_f64());
    let results = match first {
        Ok(results) => results,
        Err(first) => {
            log::warn!(
                "batch of {} requests failed ({first}); retrying once",
                calls.len()
            );
            match apply_batch(db.store.as_mut(), &calls) {
                Ok(results) => results,
                Err(e) => {
                    log::error!("batch of {} requests failed again: {e}", calls.len());
                    let err = remote(e);
                    for (id, _) in &calls {
                        let _ = db.main.post(&Packet::Reply {
                            id: *id,
                            result: Err(err.clone()),
                        });
                    }
                    return;
                }
            }
        }
    };
    if calls.iter().any(|(_, r)| matches!(r, DbRequest::Reclaim))
        && let Err(e) = db.store.reclaim_after_prune()
    {
        log::warn!("could not reclaim space: {e}");
    }
    for ((id, req), result) in calls.iter().zip(results) {
        let result = result.map_err(|e| {
            log::warn!("{req_kind} failed: {e}", req_kind = kind(req));
            remote(e)
        });
        if let Err(e) = db.main.post(&Packet::Reply { id: *id, result }) {
            log::error!("could not answer main: {e}");
        }
    }
}

fn on_main(db: &mut Db, ctx: &mut Ctx<Db>, _: (), event: &Event) -> Flow {
    if event.is_writable()
        && let Err(e) = db.main.on_writable()
    {
        log::debug!("link to main: {e}");
    }
    match db.main.receive() {
        Ok(msgs) => {
            let mut calls = Vec::new();
            for msg in msgs {
                match msg {
                    Packet::Call { id, req, due } => calls.push((id, req, due)),
                    other => log::warn!("unexpected message from main: {other:?}"),
                }
            }
            gather(db, ctx, calls);
            arm_commit_report(db, ctx);
            Flow::Continue
        }
        Err(e) => super::common::link_failed(ctx, &e),
    }
}

/// Serve `calls` with the held ones now, or hold them back until the first is due
/// (`gather::Held::add`).
fn gather(db: &mut Db, ctx: &mut Ctx<Db>, calls: Vec<(CallId, DbRequest, Due)>) {
    let now = std::time::Instant::now();
    match db.held.add(calls, now, crate::wire::records::now_ms()) {
        None => {}
        Some(gather::Next::Serve) => serve_held(db, ctx),
        // The timer moves only when the first call due comes earlier.
        Some(gather::Next::At(at)) if db.held_timer.is_some_and(|(_, armed)| armed == at) => {}
        Some(gather::Next::At(at)) => {
            if let Some((timer, _)) = db.held_timer.take() {
                ctx.cancel(timer);
            }
            let timer = ctx.at(at, |db: &mut Db, ctx| {
                db.held_timer = None;
                serve_held(db, ctx);
                arm_commit_report(db, ctx);
            });
            db.held_timer = Some((timer, at));
        }
    }
}

/// Serve every held call now.
fn serve_held(db: &mut Db, ctx: &mut Ctx<Db>) {
    if let Some((timer, _)) = db.held_timer.take() {
        ctx.cancel(timer);
    }
    let calls = db.held.take(std::time::Instant::now());
    serve(db, calls);
}

/// Report commits to main within 2 s of the first unreported one.
fn arm_commit_report(db: &mut Db, ctx: &mut Ctx<Db>) {
    if db.report_armed || db.commit_latency.count == db.reported_commits {
        return;
    }
    db.report_armed = true;
    ctx.after(std::time::Duration::from_secs(2), |db: &mut Db, ctx| {
        db.report_armed = false;
        report_commit_latency(db, ctx);
    });
}

/// Send main the commit latency histogram if batches were committed since the last time.
fn report_commit_latency(db: &mut Db, _ctx: &mut Ctx<Db>) {
    if db.commit_latency.count == db.reported_commits {
        return;
    }
    db.reported_commits = db.commit_latency.count;
    let notice = DbNotice::CommitLatency(db.commit_latency.clone());
    if let Err(e) = db.main.post(&Packet::Cast(notice)) {
        log::debug!("could not report commit latency: {e}");
    }
}

/// Why `saltpeter-cleanup`'s read-only check of the database did not pass.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    #[error("{0}")]
    Store(#[from] StoreError),
    /// Problems found (or a migration to come).
    #[error("database {path}: {report:?}")]
    Damaged {
        path: std::path::PathBuf,
        report: schema::CheckReport,
    },
}

/// Read-only check of the database for `saltpeter-cleanup`.
pub(crate) fn check_database(path: &std::path::Path) -> Result<(), CheckError> {
    if !path.exists() {
        return Ok(());
    }
    let report = Store::check(path)?;
    if report.is_ok() {
        Ok(())
    } else {
        Err(CheckError::Damaged {
            path: path.to_path_buf(),
            report,
        })
    }
}

#[cfg(test)]
#[path = "calls_tests.rs"]
mod calls_tests;

/// The throwaway PostgreSQL cluster of the tests (shared with `tests/it`, where its
/// items must be `pub`).
#[cfg(test)]
#[allow(unreachable_pub)]
#[path = "../../../tests/support/pg_cluster.rs"]
pub(crate) mod pg_cluster;

#[cfg(test)]
pub(crate) mod schema_at;

/// One turn of the leader lease: kept or tried, and main told when it changed.
fn poll_lease(db: &mut Db, _ctx: &mut Ctx<Db>) {
    let Some(watch) = db.lease.as_mut() else {
        return;
    };
    let Some(notice) = watch.poll(db.store.as_mut()) else {
        return;
    };
    let sent = match db.main.post(&Packet::Cast(DbNotice::Lease(notice.clone()))) {
        Ok(()) => true,
        Err(e) => {
            log::debug!("could not report the lease: {e}");
            false
        }
    };
    watch.posted(notice, sent);
}

/// One turn of a standby's listening: what the leader committed, passed to main. A
/// leader does not listen, and looks again only as often as its lease may change.
fn poll_live(db: &mut Db, ctx: &mut Ctx<Db>) {
    let standby = db.lease.as_ref().is_some_and(lease::LeaseWatch::standby);
    if let Some(notice) = db.live.poll(db.store.as_mut(), standby)
        && let Err(e) = db.main.post(&Packet::Cast(DbNotice::Live(notice)))
    {
        log::debug!("could not pass the leader's changes on: {e}");
    }
    let next = if standby { live::POLL } else { lease::POLL };
    ctx.after(next, poll_live);
}

/// Several masters: this server's master registered and its keys published, the other
/// servers' news to main (`masters.rs`).
fn poll_masters(db: &mut Db, _ctx: &mut Ctx<Db>) {
    if let Some(m) = db.masters.as_mut() {
        let notices = masters::poll_registry(m, db.store.as_mut());
        tell_main(db, notices);
    }
}

/// Several masters: the Salt calls asked of this server and the answers to its own.
fn poll_salt_calls(db: &mut Db, _ctx: &mut Ctx<Db>) {
    if let Some(m) = db.masters.as_ref() {
        let notices = masters::poll_calls(m, db.store.as_mut());
        tell_main(db, notices);
    }
}

fn tell_main(db: &mut Db, notices: Vec<DbNotice>) {
    for notice in notices {
        if let Err(e) = db.main.post(&Packet::Cast(notice)) {
            log::error!("could not pass news of the other servers to main: {e}");
        }
    }
}

pub(crate) fn run(mut args: RoleArgs) -> Result<i32, RoleError> {
    let (mut store, server) = opening::open_storage(&args)?;
    log::info!("storing in {}", store.engine());
    let settings = crate::config::load_settings(&args.dirs.config).ok();
    let masters = masters::Masters::new(settings.as_ref(), server.as_deref());
    let lease = match server {
        Some(server) => {
            // A server launching through Salt leads only while its master is up.
            let master = crate::config::load_settings(&args.dirs.config)
                .ok()
                .filter(|c| c.executor == crate::config::Executor::Salt)
                .map(|c| master_probe::MasterProbe::new(&c.salt_config_dir));
            Some(lease::LeaseWatch::new(store.as_mut(), server, master)?)
        }
        None => None,
    };
    let mut ev: EventLoop<Db> = EventLoop::new().map_err(RoleError::setup("event loop"))?;
    let stream = args.take_stream("main")?;
    let (main, _) = open_link(ev.ctx(), stream, Role::Db, Role::Main, (), on_main)?;
    let control = attach_control(ev.ctx(), &mut args)?;
    let mut db = Db {
        control,
        main,
        store,
        commit_latency: crate::metrics::Histogram::new(crate::metrics::LATENCY_BUCKETS),
        reported_commits: 0,
        lease,
        live: live::LiveWatch::default(),
        report_armed: false,
        held: gather::Held::new(),
        held_timer: None,
        masters,
    };
    if db.lease.is_some() {
        poll_lease(&mut db, ev.ctx());
        ev.ctx().every(lease::POLL, poll_lease);
        poll_live(&mut db, ev.ctx());
    }
    if db.masters.is_some() {
        poll_masters(&mut db, ev.ctx());
        ev.ctx().every(masters::REGISTRY_POLL, poll_masters);
        ev.ctx().every(masters::CALLS_POLL, poll_salt_calls);
    }
    ev.run_with(&mut db, |db, _| {
        if let Err(e) = db.main.on_writable() {
            log::debug!("link to main: {e}");
        }
    })
    .map_err(RoleError::setup("event loop"))?;
    Ok(0)
}
