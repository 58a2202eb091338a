//! Requests: the one vocabulary of `AdminRequest`s that `saltpeterctl` (admin socket),
//! the HTTP API and `/ws` (through the hub) send, answered from main's state and, for
//! history, from db.
//!
//! 1. `audit`: who asked. A request from the admin socket (`handle_from`) or the API
//!    (`handle_by`) is handled as its peer or identity, so every audit event it records
//!    names the operator; state-changing requests record what was asked first.
//! 2. `gate`: a standby refuses the requests that change state; start-up parks those
//!    that need the settings it still loads.
//! 3. `handle`: the one match, one topic file each, every file a thin adapter that
//!    gathers what a part needs from `Main` (the configuration, who asks, the time),
//!    calls the part and performs what it returns — `daemon` (status, metrics, the audit
//!    trail), `reload`, `fleet` (wrapper deployment and status), `jobs`, `runs`,
//!    `output`, `live` (streams: output followers, run watchers, kept by the views),
//!    `maintenance`, `jobctl`, `deliveries`.
//! 4. Requests that need db make their call with the topic's own continuation
//!    (`answer::answer_with`): the topic's small function shapes the one answer.
//!
//! Every answer goes out through main's `answer` (`respond`, `failure`), as one
//! `AdminResponse` shape per question that the caller renders.

pub(crate) mod answer;
pub(crate) mod audit;
mod daemon;
mod deliveries;
mod fleet;
mod gate;
mod jobctl;
mod jobs;
mod live;
mod maintenance;
mod output;
mod reload;
mod runs;

use crate::ipc::CallId;
use crate::roles::main::shell::Main;
use crate::roles::main::views::live::FollowSpec;
use crate::wire::admin::AdminRequest;

/// Answer `req` (on `call`), once the gate lets it through.
pub(crate) fn handle(core: &mut Main, call: CallId, req: AdminRequest) {
    let Some(req) = gate::admit(core, call, req) else {
        return;
    };
    match req {
        AdminRequest::Status => daemon::status(core, call),
        AdminRequest::Metrics => daemon::metrics(core, call),
        AdminRequest::Events {
            job,
            run,
            kind,
            since,
            limit,
        } => daemon::events(core, call, job, run, kind, since, limit),
        AdminRequest::Reload => reload::handle(core, call),
        AdminRequest::DeployWrapper { target } => fleet::deploy(core, call, target),
        AdminRequest::WrapperStatus => fleet::status(core, call),
        AdminRequest::Jobs { group, state } => jobs::list(core, call, group, state),
        AdminRequest::Job { job, upcoming } => jobs::detail(core, call, job, upcoming),
        AdminRequest::NextFirings { job, from, count } => {
            jobs::next_firings(core, call, &job, from, count)
        }
        AdminRequest::RunNow { job, targets } => jobs::run_now(core, call, &job, targets),
        AdminRequest::KillJob { job, machine, run } => {
            jobs::kill_job(core, call, &job, machine.as_deref(), run)
        }
        AdminRequest::Runs(query) => runs::find(core, call, query),
        AdminRequest::GetRun { run } => runs::get(core, call, run),
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
            FollowSpec {
                run,
                job,
                machine,
                stream,
                tail,
                live,
            },
        ),
        AdminRequest::WatchRun { run } => live::watch(core, call, run),
        AdminRequest::Maintenance(change) => maintenance::change(core, call, change),
        AdminRequest::MaintenanceWindows { count } => maintenance::windows(core, call, count),
        AdminRequest::JobControl(change) => jobctl::change(core, call, change),
        AdminRequest::Deliveries(filter) => deliveries::list(core, call, filter),
    }
}
