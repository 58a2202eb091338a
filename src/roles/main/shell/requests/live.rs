//! Requests that stream before their answer (their state is the views', `views/live/`):
//! `Follow` (`logs -f`, `output -f`) and `WatchRun` (`run --wait`).

use crate::ipc::CallId;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::requests::answer::send_run;
use crate::roles::main::shell::views::seen;
use crate::roles::main::views::live::FollowSpec;
use crate::roles::main::views::live::watch::progress;
use crate::wire::records::RunId;

/// `Follow`: the job's newest run in flight here, if a job is followed, is handed to the
/// views (which look at the leader's mirrored runs after it).
pub(super) fn follow(core: &mut Main, call: CallId, spec: FollowSpec) {
    let newest = match (&spec.run, &spec.job) {
        (None, Some(job)) => core
            .runs()
            .filter(|r| r.job().name == *job)
            .map(|r| r.id())
            .max(),
        _ => None,
    };
    let out = core.views.follow(call, spec, newest);
    core.perform(out);
}

/// `WatchRun`: stream the run's progress, answer when it ends.
pub(super) fn watch(core: &mut Main, call: CallId, run: RunId) {
    let Some(active) = core.run_mut(run) else {
        // Not in flight (it may have ended already): the stored record answers.
        return send_run(core, call, run);
    };
    active.add_waiter(call);
    let snapshot = progress(&seen(active));
    let out = core.views.live().watch(call, snapshot);
    core.perform(out);
}
