//! Several daemons on one PostgreSQL database (docs/ha.md): which of them leads.
//!
//! db keeps the leader lease (a PostgreSQL session advisory lock, `roles/db/lease.rs`)
//! and reports it (`DbNotice::Lease`, posted as `Message::Lease`); main only acts on the
//! reports:
//!
//! 1. With `database_url` set, main starts as a **standby**: it holds the start-up hold
//!    (`Flight::recovering`: no slot fires, no run starts, wrapper hellos are answered
//!    `retry_later` so wrappers try the next server), serves reads from the shared
//!    database, and refuses what only the leader may do (run now, maintenance, pause).
//! 2. The first report carries the secret every server shares ([`shared_secret`]):
//!    tokens and resume keys made by any server are valid on this one.
//! 3. Given the lease, main **adopts** (`Message::Adopt`): the start-up of a lone daemon,
//!    unchanged (`boot.rs`, `shell::run::recovery::start`): runs in flight are loaded from
//!    the database and wait for their wrappers, slots missed since the last recorded one
//!    follow each job's `missed` policy, then the schedule is armed. The (job, slot)
//!    uniqueness of the database stays the last guard against a slot run twice. The leader
//!    alone pumps the notification outbox.
//! 4. A leader whose lease cannot be confirmed (the database unreachable) holds
//!    ([`Ha::holding`]): no new slot fires and no run starts, its wrappers are still
//!    served and nothing is lost (output stays unacknowledged in the wrappers); when the
//!    lease is confirmed again it carries on, and the slots that passed meanwhile are
//!    settled as late slots are (`missed`). If another server took the lease
//!    meanwhile, this one stops (`Message::LeaseLost`: its daemon exits; restarted, it
//!    is a standby): the runs are the other's now, and their wrappers move to it.
//!
//! [`Ha`] keeps where this server stands; its methods return what follows from a report
//! (`Out`): a message to adopt, to arm the schedule again, or to stop.

use crate::roles::main::messages::{Message, Out};
use crate::roles::main::rules::tokens::Secret;
use crate::wire::db::LeaseReport;

/// Where this daemon stands.
#[derive(Debug, Default)]
pub(crate) struct Ha {
    /// The database is shared (PostgreSQL): leading comes from the lease.
    shared: bool,
    /// This server's name (`server_name`, or the host name).
    server: String,
    /// This daemon holds the lease (always true when not shared).
    leader: bool,
    /// The database answered db's last try.
    reachable: bool,
    /// Who leads, as far as known.
    holder: Option<String>,
    /// This daemon has adopted the schedule and the runs (it led once).
    adopted: bool,
    /// Times this daemon took the lease.
    takeovers: u64,
    /// The newest report of the turn, until it is acted on (`apply`). A report is a
    /// snapshot: several read in one turn (main was busy) are acted on once, the newest.
    pending: Option<LeaseReport>,
}

impl Ha {
    /// At start: a lone daemon leads at once (`Message::Adopt`); one sharing the database
    /// (`shared`) waits for the lease, in the start-up hold. `server`: this server's name
    /// ([`server_name`]).
    pub(crate) fn start(&mut self, shared: bool, server: String) -> Out {
        let mut out = Out::new();
        self.shared = shared;
        self.server = server;
        self.reachable = true;
        if self.shared {
            log::info!(
                "{} starts as a standby until it holds the leader lease",
                self.server
            );
        } else {
            self.adopt(&mut out);
        }
        out
    }

    fn adopt(&mut self, out: &mut Out) {
        self.leader = true;
        self.adopted = true;
        out.post(Message::Adopt);
    }

    /// The database is shared: leading comes from the lease.
    pub(crate) fn shared(&self) -> bool {
        self.shared
    }

    /// This server's name.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// This daemon holds the lease (always when the database is not shared).
    pub(crate) fn leader(&self) -> bool {
        self.leader
    }

    /// A standby: the database is shared and another server leads (or none is known).
    pub(crate) fn standby(&self) -> bool {
        self.shared && !self.leader
    }

    /// Times this daemon took the lease.
    pub(crate) fn takeovers(&self) -> u64 {
        self.takeovers
    }

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

    /// db's report: kept until the reports of this turn are read (`Message::LeaseApply`).
    pub(crate) fn reported(&mut self, report: LeaseReport) -> Out {
        let mut out = Out::new();
        if self.pending.replace(report).is_none() {
            out.post(Message::LeaseApply);
        }
        out
    }

    /// Act on the newest report: adopt, hold, carry on, or stop.
    pub(crate) fn apply(&mut self) -> Out {
        let mut out = Out::new();
        let Some(report) = self.pending.take() else {
            return out;
        };
        if !self.shared {
            return out;
        }
        let was = self.leader;
        self.reachable = report.reachable;
        if report.reachable {
            self.holder = report.holder.clone();
        }
        match (was, report.leader) {
            (false, true) if !self.adopted => {
                self.takeovers += 1;
                log::info!(
                    "{} holds the leader lease: adopting the runs in flight and the schedule",
                    self.server
                );
                self.adopt(&mut out);
            }
            (false, true) => {
                log::info!("the leader lease is confirmed again: slots fire again");
                self.leader = true;
                out.post(Message::ScheduleChanged);
            }
            // Led before, and another server holds the lease now (possibly after this one
            // lost the database for a while): the runs are that server's. (A lock still
            // held by this server's own old session, recorded under its own name, is
            // waited out instead: the database ends that session.)
            (_, false)
                if report.reachable
                    && self.adopted
                    && report.holder.as_deref() != Some(self.server.as_str()) =>
            {
                let holder = report.holder.as_deref().unwrap_or("another server");
                log::error!(
                    "{holder} took the leader lease while {} could not confirm it: the runs are \
                     {holder}'s now; stopping (restarted, this server is a standby)",
                    self.server
                );
                self.leader = false;
                out.post(Message::LeaseLost);
            }
            (true, false) => {
                log::warn!(
                    "the leader lease cannot be confirmed (the database is unreachable, or an old \
                     session of this server still holds it): no slot \
                     fires and no run starts until it is"
                );
                self.leader = false;
                out.post(Message::ScheduleChanged);
            }
            _ => {}
        }
        out
    }
}

/// This server's name: `server_name` from the configuration, or the host name.
pub(crate) fn server_name(configured: Option<&str>) -> String {
    configured.map(str::to_string).unwrap_or_else(|| {
        nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "saltpeter".to_string())
    })
}

/// The secret every server shares, when `report` carries it (the first one does): tokens
/// and resume keys made by any server are valid on this one.
pub(crate) fn shared_secret(report: &LeaseReport) -> Option<Secret> {
    let secret = report.shared_secret.as_ref()?;
    let shared = Secret::from_hex(&secret.0);
    if shared.is_none() {
        log::error!("the shared server secret in the database is malformed");
    }
    shared
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

    fn report(leader: bool, reachable: bool, holder: Option<&str>) -> LeaseReport {
        LeaseReport {
            leader,
            reachable,
            holder: holder.map(str::to_string),
            shared_secret: None,
        }
    }

    fn posted(out: &Out) -> Vec<&Message> {
        out.cmds()
            .iter()
            .filter_map(|c| match c {
                crate::roles::main::messages::Cmd::Post(m) => Some(m),
                _ => None,
            })
            .collect()
    }

    /// The one report acted on (as the loop does: `reported`, then `LeaseApply`).
    fn act(ha: &mut Ha, r: LeaseReport) -> Out {
        let out = ha.reported(r);
        assert!(matches!(posted(&out)[..], [Message::LeaseApply]));
        ha.apply()
    }

    #[test]
    fn a_lone_daemon_leads_at_once_and_one_sharing_the_database_waits() {
        let mut lone = Ha::default();
        let out = lone.start(false, "cron-a".into());
        assert!(matches!(posted(&out)[..], [Message::Adopt]));
        assert!(lone.leader() && !lone.shared() && !lone.standby());
        assert_eq!(lone.server(), "cron-a");
        assert!(lone.apply().is_empty());

        let mut shared = Ha::default();
        assert!(shared.start(true, "cron-b".into()).is_empty());
        assert!(shared.standby() && !shared.holding());
        assert_eq!(shared.role(), "standby");
    }

    #[test]
    fn the_lease_given_adopts_once_then_a_lost_lease_holds_and_a_confirmed_one_carries_on() {
        let mut ha = Ha::default();
        let _ = ha.start(true, "cron-b".into());
        assert!(act(&mut ha, report(false, true, Some("cron-a"))).is_empty());
        assert_eq!(ha.known_holder(), Some("cron-a"));

        let out = act(&mut ha, report(true, true, Some("cron-b")));
        assert!(matches!(posted(&out)[..], [Message::Adopt]));
        assert_eq!((ha.leader(), ha.takeovers()), (true, 1));

        let out = act(&mut ha, report(false, false, None));
        assert!(matches!(posted(&out)[..], [Message::ScheduleChanged]));
        assert!(ha.holding());
        assert_eq!(ha.role(), "unconfirmed");
        assert_eq!(
            ha.known_holder(),
            None,
            "unreachable: the holder is not read"
        );

        let out = act(&mut ha, report(true, true, Some("cron-b")));
        assert!(matches!(posted(&out)[..], [Message::ScheduleChanged]));
        assert!(ha.leader() && !ha.holding());
        assert_eq!(ha.takeovers(), 1, "confirmed again is not a takeover");
    }

    #[test]
    fn a_leader_whose_lease_another_took_stops_but_waits_out_its_own_old_session() {
        let mut ha = Ha::default();
        let _ = ha.start(true, "cron-b".into());
        let _ = act(&mut ha, report(true, true, Some("cron-b")));
        let out = act(&mut ha, report(false, true, Some("cron-b")));
        assert!(
            matches!(posted(&out)[..], [Message::ScheduleChanged]),
            "its own old session: held, not stopped"
        );
        let out = act(&mut ha, report(false, true, Some("cron-a")));
        assert!(matches!(posted(&out)[..], [Message::LeaseLost]));
        assert!(!ha.leader());
    }

    #[test]
    fn the_reports_of_one_turn_are_acted_on_once_the_newest() {
        let mut ha = Ha::default();
        let _ = ha.start(true, "cron-b".into());
        let first = ha.reported(report(false, true, Some("cron-a")));
        let second = ha.reported(report(true, true, Some("cron-b")));
        assert_eq!(posted(&first).len(), 1);
        assert!(second.is_empty(), "one apply per turn");
        let out = ha.apply();
        assert!(matches!(posted(&out)[..], [Message::Adopt]));
        assert!(ha.apply().is_empty(), "nothing left to apply");
    }

    #[test]
    fn the_shared_secret_comes_with_a_report_and_a_malformed_one_is_left_out() {
        let mut r = report(false, true, None);
        assert!(shared_secret(&r).is_none());
        r.shared_secret = Some(crate::wire::db::SharedSecret("not hex".into()));
        assert!(shared_secret(&r).is_none());
        r.shared_secret = Some(crate::wire::db::SharedSecret("ab".repeat(32)));
        assert!(shared_secret(&r).is_some());
    }
}
