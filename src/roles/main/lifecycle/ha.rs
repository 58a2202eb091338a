//! Several daemons on one PostgreSQL database (docs/ha.md): which of them leads.
//!
//! db keeps the leader lease (a PostgreSQL session advisory lock, `roles/db/lease.rs`)
//! and reports it (`DbNotice::Lease`); main only acts on the reports:
//!
//! 1. With `database_url` set, main starts as a **standby**: it holds the start-up hold
//!    (`Flight::recovering`: no slot fires, no run starts, wrapper hellos are answered
//!    `retry_later` so wrappers try the next server), serves reads from the shared
//!    database, and refuses what only the leader may do (run now, maintenance, pause).
//! 2. The first report carries the secret every server shares: tokens and resume keys
//!    made by any server are valid on this one.
//! 3. Given the lease, main **adopts**: the start-up of a lone daemon, unchanged
//!    (`boot::start`, `recovery::start`): runs in flight are loaded from the database and
//!    wait for their wrappers, slots missed since the last recorded one follow each
//!    job's `missed` policy, then the schedule is armed. The (job, slot) uniqueness of
//!    the database stays the last guard against a slot run twice. The leader alone
//!    pumps the notification outbox.
//! 4. A leader whose lease cannot be confirmed (the database unreachable) holds
//!    ([`Ha::holding`]): no new slot fires and no run starts, its wrappers are still
//!    served and nothing is lost (output stays unacknowledged in the wrappers); when the
//!    lease is confirmed again it carries on, and the slots that passed meanwhile are
//!    settled as late slots are (`missed`). If another server took the lease
//!    meanwhile, this one stops (its daemon exits; restarted, it is a standby): the runs
//!    are the other's now, and their wrappers move to it.

use crate::evloop::Ctx;
use crate::roles::main::lifecycle::boot;
use crate::roles::main::run;
use crate::roles::main::state::lifecycle::Ha;
use crate::roles::main::state::{Main, MainRole};
use crate::wire::db::LeaseReport;
use crate::wire::records::now_ms;

impl Ha {
    /// The role shown by `saltpeterctl status` and `/metrics`.
    pub(crate) fn role(&self) -> &'static str {
        match (self.shared, self.leader, self.reachable) {
            (false, _, _) | (true, true, _) => "leader",
            (true, false, true) => "standby",
            (true, false, false) => "unconfirmed",
        }
    }

    /// A leader that cannot confirm its lease: no slot fires and no run starts, but its
    /// wrappers are still served (their output waits, unacknowledged, in the wrappers).
    pub(crate) fn holding(&self) -> bool {
        self.shared && self.adopted && !self.leader
    }

    /// The leader as far as known. Never this server while it does not lead: the name
    /// recorded may be its own from before it lost the lease (a database restart, an old
    /// session the database has not ended yet), and that is not a leader to ask.
    pub(crate) fn known_holder(&self) -> Option<&str> {
        let holder = self.holder.as_deref()?;
        (self.leader || holder != self.server).then_some(holder)
    }

    /// A standby refuses what only the leader may do.
    pub(crate) fn refusal(&self) -> Option<String> {
        if !self.shared || self.leader {
            return None;
        }
        Some(match self.known_holder() {
            _ if !self.reachable => format!(
                "this server ({}) cannot confirm the leader lease (the database is \
                 unreachable); try again once it is, or ask another server",
                self.server
            ),
            Some(holder) => format!(
                "this server ({}) is a standby; ask the leader, {holder}",
                self.server
            ),
            None => format!(
                "this server ({}) does not hold the leader lease; ask the leader",
                self.server
            ),
        })
    }
}

/// At start: a lone daemon leads at once; one sharing the database waits for the lease.
pub(crate) fn start(core: &mut Main) {
    let sp = &core.config.saltpeter;
    core.ha.shared = sp.database_url.is_some();
    core.ha.server = sp.server_name.clone().unwrap_or_else(|| {
        nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "saltpeter".to_string())
    });
    core.ha.reachable = true;
    if core.ha.shared {
        log::info!(
            "{} starts as a standby until it holds the leader lease",
            core.ha.server
        );
        core.flight.recovering = true;
    } else {
        adopt(core);
    }
}

fn adopt(core: &mut Main) {
    core.ha.leader = true;
    core.ha.adopted = true;
    boot::start(core);
    run::recovery::start(core);
    // Only the leader sends notifications: a standby would release the leader's leases.
    let out = core.notify.start(now_ms());
    core.perform(out);
}

/// db's report, kept for the loop (`apply`).
pub(crate) fn report(core: &mut Main, report: LeaseReport) {
    let secret = report.shared_secret.clone();
    if let Some(secret) = secret {
        match crate::roles::main::rules::tokens::Secret::from_hex(&secret.0) {
            Some(shared) => core.secret = shared,
            None => log::error!("the shared server secret in the database is malformed"),
        }
    }
    core.ha.pending = Some(report);
}

/// Acts on the newest report: adopt, hold, carry on, or stop.
pub(crate) fn apply(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    let core = &mut role.core;
    let Some(report) = core.ha.pending.take() else {
        return;
    };
    if !core.ha.shared {
        return;
    }
    let was = core.ha.leader;
    core.ha.reachable = report.reachable;
    if report.reachable {
        core.ha.holder = report.holder.clone();
    }
    match (was, report.leader) {
        (false, true) if !core.ha.adopted => {
            core.ha.takeovers += 1;
            log::info!(
                "{} holds the leader lease: adopting the runs in flight and the schedule",
                core.ha.server
            );
            adopt(core);
        }
        (false, true) => {
            log::info!("the leader lease is confirmed again: slots fire again");
            core.ha.leader = true;
            role.arm_schedule(ctx);
        }
        // Led before, and another server holds the lease now (possibly after this one
        // lost the database for a while): the runs are that server's. (A lock still
        // held by this server's own old session, recorded under its own name, is
        // waited out instead: the database ends that session.)
        (_, false)
            if report.reachable
                && core.ha.adopted
                && report.holder.as_deref() != Some(core.ha.server.as_str()) =>
        {
            let holder = report.holder.as_deref().unwrap_or("another server");
            log::error!(
                "{holder} took the leader lease while {} could not confirm it: the runs are \
                 {holder}'s now; stopping (restarted, this server is a standby)",
                core.ha.server
            );
            core.ha.leader = false;
            ctx.stop();
        }
        (true, false) => {
            log::warn!(
                "the leader lease cannot be confirmed (the database is unreachable, or an old \
                 session of this server still holds it): no slot \
                 fires and no run starts until it is"
            );
            core.ha.leader = false;
            role.arm_schedule(ctx);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ha(shared: bool, leader: bool, reachable: bool, adopted: bool) -> Ha {
        Ha {
            shared,
            server: "cron-b".into(),
            leader,
            reachable,
            holder: Some("cron-a".into()),
            adopted,
            ..Ha::default()
        }
    }

    #[test]
    fn roles_refusals_and_the_hold() {
        let lone = ha(false, false, true, false);
        assert_eq!(lone.role(), "leader");
        assert_eq!(lone.refusal(), None);
        assert!(!lone.holding());

        let standby = ha(true, false, true, false);
        assert_eq!(standby.role(), "standby");
        let why = standby.refusal().expect("a standby refuses");
        assert!(why.contains("cron-b") && why.contains("cron-a"), "{why}");
        assert!(
            !standby.holding(),
            "a standby holds through the start-up hold"
        );

        let leader = ha(true, true, true, true);
        assert_eq!(leader.role(), "leader");
        assert_eq!(leader.refusal(), None);
        assert!(!leader.holding());

        let cut_off = ha(true, false, false, true);
        assert_eq!(cut_off.role(), "unconfirmed");
        assert!(
            cut_off.holding(),
            "led once, lease unconfirmed: no slot fires"
        );
        let why = cut_off.refusal().expect("unconfirmed refuses");
        assert!(
            why.contains("cannot confirm") && !why.contains("cron-a"),
            "{why}"
        );
    }

    #[test]
    fn a_server_that_does_not_lead_never_names_itself_the_leader() {
        // Its own name is still recorded (a database restart; the other server has not
        // recorded its own yet): no leader is known.
        let mut stale = ha(true, false, true, true);
        stale.holder = Some("cron-b".into());
        assert_eq!(stale.known_holder(), None);
        let why = stale.refusal().expect("refused");
        assert!(why.contains("does not hold the leader lease"), "{why}");
        assert!(!why.contains("ask the leader, cron-b"), "{why}");
        let mut leader = ha(true, true, true, true);
        leader.holder = Some("cron-b".into());
        assert_eq!(leader.known_holder(), Some("cron-b"));
        assert_eq!(ha(true, false, true, false).known_holder(), Some("cron-a"));
    }
}
