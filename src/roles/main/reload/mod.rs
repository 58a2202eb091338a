//! Configuration reloads, without a stall of main's loop.
//!
//! Reading and parsing the files is the slow part of a load (a large file, a big `<<`
//! merge); it runs in a helper process of `blocking` (`BlockingRequest::LoadConfig`, see
//! `roles/blocking/helpers.rs`), which reads only the files whose fingerprint changed.
//! Main then merges the settings and validates the jobs of the changed files
//! (`config::load_parsed`, which reads nothing and reuses every unchanged job) and applies
//! the result: schedule, maintenance, retention, the dashboard.
//!
//! Outline:
//! 1. A request (the 1 s scan saw a change, SIGHUP, `saltpeterctl reload`) starts a load,
//!    or, while one is in flight, asks for another after it: the files may have changed
//!    after the first one's scan. Requests meanwhile coalesce into that one.
//! 2. The reply arrives as any blocking reply; `poll` (run after every event) applies it.
//! 3. A failure (blocking gone, helper killed at its deadline, answer too large) keeps
//!    the previous configuration, says why, and the next change or request tries again.
//! 4. Main keeps no job's parsed mapping between loads (`config/content.rs`): when jobs of
//!    unchanged files must be validated again (their inherited defaults changed), the load
//!    answers which files to read again, and another round reads them too.
//!
//! Start-up loads synchronously (`config::load_dir`): nothing is running yet.

pub(crate) mod heap;
pub(crate) mod watch;

use crate::roles::main::state::lifecycle::Reloads;
use std::collections::HashSet;
use std::time::Instant;

use chrono::Utc;

use crate::config::{self, LoadedConfig};
use crate::evloop::Ctx;
use crate::ipc::CallId;
use crate::roles::main::state::{Main, MainRole};
use crate::roles::main::views::ui;
use crate::wire::admin::AdminResponse;
use crate::wire::link::{BlockingReply, BlockingRequest, HubReply};

impl Reloads {
    pub(super) fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }
}

/// Ask for a reload; `admin` is the hub call to answer with its summary.
pub(super) fn request(core: &mut Main, admin: Option<CallId>) {
    if core.reloads.in_flight.is_some() {
        core.reloads.again = true;
        core.reloads.waiting_next.extend(admin);
        return;
    }
    core.reloads.waiting.extend(admin);
    core.reloads.reread.clear();
    start(core, Instant::now());
}

/// Ask blocking for the files; `started` is when the reload was asked for.
fn start(core: &mut Main, started: Instant) {
    let reread = &core.reloads.reread;
    let known = core
        .config
        .reusable_fingerprints()
        .into_iter()
        .filter(|(path, _)| !reread.contains(path))
        .collect::<Vec<_>>();
    let dir = core.config.dir.clone();
    let id = core.blocking_call(BlockingRequest::LoadConfig { dir, known });
    core.reloads.in_flight = Some((id, started));
}

/// Apply the load in flight once blocking answered (after every event, from `pump`).
pub(super) fn poll(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    let Some((id, started)) = role.core.reloads.in_flight else {
        return;
    };
    let Some(reply) = role.core.links.blocking_replies.remove(&id) else {
        return;
    };
    role.core.reloads.in_flight = None;
    let summary = match reply {
        Ok(BlockingReply::ConfigParsed(parsed)) => {
            let now = Utc::now();
            let core = &role.core;
            match config::load_parsed(&core.config.dir, parsed, Some(&core.config), now) {
                config::Load::Loaded(loaded) => {
                    apply(role, ctx, *loaded, now);
                    summary(&role.core.config, started)
                }
                config::Load::Reread(files) => {
                    // Only unchanged files are listed, and each round reads them: this ends.
                    log::debug!("reload: {} unchanged files read again", files.len());
                    role.core.reloads.reread.extend(files);
                    start(&mut role.core, started);
                    return;
                }
            }
        }
        Ok(other) => failed(format!("blocking answered {other:?}")),
        Err(e) => failed(e.to_string()),
    };
    log::info!("{summary}");
    for call in std::mem::take(&mut role.core.reloads.waiting) {
        role.core
            .reply_hub(call, HubReply::Admin(AdminResponse::Done(summary.clone())));
    }
    if std::mem::take(&mut role.core.reloads.again) {
        role.core.reloads.waiting = std::mem::take(&mut role.core.reloads.waiting_next);
        role.core.reloads.reread.clear();
        start(&mut role.core, Instant::now());
    }
}

fn failed(why: String) -> String {
    log::error!("reload failed: {why}; the previous configuration stays in effect");
    format!("reload failed: {why}")
}

fn summary(config: &LoadedConfig, started: Instant) -> String {
    let errors = config
        .diagnostics
        .iter()
        .filter(|d| d.severity == config::Severity::Error)
        .count();
    format!(
        "configuration reloaded: {} jobs, {errors} errors, in {} ms",
        config.jobs.len(),
        started.elapsed().as_millis()
    )
}

/// Put a loaded configuration in effect and re-plan the schedule.
fn apply(
    role: &mut MainRole,
    ctx: &mut Ctx<MainRole>,
    loaded: LoadedConfig,
    now: chrono::DateTime<Utc>,
) {
    let core = &mut role.core;
    for change in core
        .config
        .saltpeter
        .startup_only_changes(&loaded.saltpeter)
    {
        log::warn!("saltpeter_config.{change} changed: it takes effect at the next start");
    }
    let known: HashSet<&config::Diagnostic> = core.config.diagnostics.iter().collect();
    for d in loaded.diagnostics.iter().filter(|d| !known.contains(d)) {
        log::warn!("{d}");
    }
    let retention_changed = core.config.saltpeter.retention != loaded.saltpeter.retention;
    let old_maintenance = std::mem::replace(&mut core.config, loaded).maintenance;
    if old_maintenance != core.config.maintenance {
        let out = core.maintenance.file_changed(
            &old_maintenance,
            &core.config.maintenance,
            crate::wire::records::now_ms(),
        );
        core.perform(out);
    }
    if retention_changed {
        // New retention applies to the existing history too.
        core.apply_retention_to_all();
    }
    ui::config_changed(core);
    core.scheduler.plan(core.config.valid_jobs(), now);
    role.arm_schedule(ctx);
    // Connected `/ws` clients see the change now, not at the next event.
    ui::flush(&mut role.core);
    crate::roles::main::reload::heap::trim_soon(ctx);
    role.core
        .post(crate::roles::main::messages::Message::ConfigReloaded);
}

/// Reload when a file of the configuration directory changed (a cheap metadata scan; none
/// while a load is in flight: the next scan after it sees what changed meanwhile).
pub(super) fn watch_config(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    if role.core.reloads.in_flight() {
        return;
    }
    match role.core.config.changed_on_disk() {
        Ok(true) => {
            log::info!("configuration changed on disk; reloading");
            request(&mut role.core, None);
            role.pump(ctx);
        }
        Ok(false) => {}
        Err(e) => log::warn!("cannot scan the configuration directory: {e}"),
    }
}
