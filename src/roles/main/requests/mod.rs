//! Requests: the one vocabulary of `AdminRequest`s that `saltpeterctl` (admin socket),
//! the HTTP API and `/ws` (through the hub) send, answered from main's state and, for
//! history, from db.
//!
//! 1. `handle_from`: a request from the admin socket carries its peer's uid; while it is
//!    handled, `Main::actor` holds that uid so every audit event it records names the
//!    operator, and state-changing requests record what was asked before anything
//!    happens.
//! 2. `handle`: dispatch by topic, one file each — `daemon` (status, metrics, reload,
//!    wrapper deployment, audit trail), `jobs`, `runs`, `output`, `live` (streams:
//!    output followers, run watchers, kept by the views); and beside this folder, below
//!    it, `maintenance`.
//! 3. Requests that need db make their call with the topic's own continuation
//!    (`answer::answer_with`): the topic's small function shapes the one answer.
//!
//! Every answer goes out through main's `answer` (`respond`, `failure`), as one
//! `AdminResponse` shape per question that the caller renders.

pub(crate) mod answer;
pub(crate) mod audit;
pub(crate) mod daemon;
mod jobs;
mod live;
pub(crate) mod output;
pub(crate) mod runs;

use crate::roles::main::maintenance;
use answer::{failure, respond};

use super::state::MainRole;
use crate::evloop::Ctx;
use crate::ipc::CallId;
use crate::wire::admin::{AdminFailure, AdminPeer, AdminRequest, AdminResponse};

/// A request from the admin socket: handled as the peer (audit events carry its uid).
pub(super) fn handle_from(
    role: &mut MainRole,
    ctx: &mut Ctx<MainRole>,
    call: CallId,
    peer: AdminPeer,
    req: AdminRequest,
) {
    role.core.actor.uid = Some(peer.uid);
    daemon::record_request(&mut role.core, &format!(" by uid {}", peer.uid), &req);
    handle(role, ctx, call, req);
    role.core.actor.uid = None;
}

pub(super) fn handle(
    role: &mut MainRole,
    _ctx: &mut Ctx<MainRole>,
    call: CallId,
    req: AdminRequest,
) {
    let core = &mut role.core;
    if let Some(why) = core.ha.refusal()
        && matches!(
            req,
            AdminRequest::RunNow { .. }
                | AdminRequest::Maintenance(_)
                | AdminRequest::JobControl(_)
                | AdminRequest::KillJob { .. }
                | AdminRequest::Kill { .. }
                | AdminRequest::Suspend { .. }
                | AdminRequest::DeployWrapper { .. }
        )
    {
        return failure(core, call, AdminFailure::Invalid(why));
    }
    if core.flight.recovering
        && matches!(
            req,
            AdminRequest::RunNow { .. }
                | AdminRequest::Maintenance(_)
                | AdminRequest::JobControl(_)
        )
    {
        // They depend on the maintenance and job control settings, still being loaded:
        // answered once start-up is done (`Message::StartupDone`).
        core.boot.park(call, req, core.actor.uid);
        return;
    }
    match req {
        AdminRequest::Status => daemon::status(core, call),
        AdminRequest::Metrics => daemon::metrics(core, call),
        AdminRequest::Reload => {
            // Answered with the summary once the reload is applied (`lifecycle/reload.rs`).
            let now = std::time::Instant::now();
            let out = core.reloads.request(&core.config, Some(call), now);
            core.perform(out);
        }
        AdminRequest::DeployWrapper { target } => {
            daemon::deploy_wrapper(&mut role.core, call, target)
        }
        AdminRequest::WrapperStatus => {
            let fleet = crate::wire::admin::WrapperFleet {
                this_build: core.fleet.this_build().map(str::to_string),
                minions: core.fleet.status(),
            };
            respond(core, call, AdminResponse::WrapperFleet(fleet))
        }
        AdminRequest::Events {
            job,
            run,
            kind,
            since,
            limit,
        } => daemon::events(core, call, job, run, kind, since, limit),
        AdminRequest::Jobs { group, state } => jobs::list(core, call, group, state),
        AdminRequest::Job { job, upcoming } => jobs::detail(core, call, job, upcoming),
        AdminRequest::NextFirings { job, from, count } => {
            let resp = jobs::next_firings(core, &job, from, count);
            respond(core, call, resp);
        }
        AdminRequest::RunNow { job, targets } => jobs::run_now(core, call, &job, targets),
        AdminRequest::KillJob { job, machine, run } => {
            jobs::kill_job(core, call, &job, machine.as_deref(), run)
        }
        AdminRequest::Runs(query) => runs::find(core, call, query),
        AdminRequest::GetRun { run } => answer::send_run(core, call, run),
        AdminRequest::Kill { run, machine } => runs::kill(core, call, run, machine),
        AdminRequest::Suspend {
            run,
            machine,
            suspend,
        } => runs::suspend(core, call, run, machine, suspend),
        AdminRequest::Output {
            run,
            machine,
            range,
        } => output::read(core, call, run, machine, range),
        AdminRequest::LiveOutput { run, machine } => output::live_base(core, call, run, machine),
        AdminRequest::Follow {
            run,
            job,
            machine,
            stream,
            tail,
            live,
        } => live::follow(
            core,
            call,
            crate::roles::main::views::live::FollowSpec {
                run,
                job,
                machine,
                stream,
                tail,
                live,
            },
        ),
        AdminRequest::WatchRun { run } => live::watch(core, call, run),
        AdminRequest::Maintenance(change) => {
            let who = maintenance::Who {
                name: core.actor.name.as_deref(),
                uid: core.actor.uid,
            };
            let out = core.maintenance.change(
                &core.config.maintenance,
                call,
                change,
                who,
                crate::wire::records::now_ms(),
            );
            core.perform(out);
        }
        AdminRequest::MaintenanceWindows { count } => {
            let list = maintenance::windows::listed(
                &core.config.maintenance.windows,
                chrono::Utc::now(),
                count,
            );
            respond(core, call, AdminResponse::Windows(list));
        }
        AdminRequest::JobControl(change) => {
            let uid = core.actor.uid;
            let now = chrono::Utc::now();
            let out = core
                .jobctl
                .request(call, change, &core.config.jobs, uid, now);
            core.perform(out);
        }
        AdminRequest::Deliveries(filter) => {
            use crate::roles::main::notify::deliveries;
            let admin =
                deliveries::reader_is_admin(core.actor.name.as_deref(), &core.config.saltpeter);
            core.perform(deliveries::list(call, filter, admin));
        }
    }
}
