//! Start-up: what main must know from db before it fires anything.
//!
//! 1. [`Boot::start`] asks db for the run-time maintenance settings and the job control
//!    state (paused and skipping jobs), both in `meta`, and the newest recorded slot of
//!    every job; `shell::run::recovery::start` asks for the runs in flight.
//! 2. Until all four answers are in, the start-up hold (`Flight::recovering`) holds: no
//!    slot fires, no run starts, no hello is vetted. A failed load is asked again (at most
//!    once a second: [`Boot::loaded`] posts `StartupRetry` for a second later). Admin
//!    requests that depend on these (run now, maintenance) are parked meanwhile.
//! 3. The answer that completes them posts `Message::StartupDone`, and the loop then
//!    records or catches up the slots missed while the daemon was down
//!    (`shell/firing/missed.rs`), lifts the hold, arms the schedule and handles the parked
//!    requests (`shell/dispatch/lifecycle.rs`).
//!
//! [`Boot`] keeps what has come so far; its methods say what to do next (`Out`). The
//! maintenance and job control settings belong to their parts: [`Boot::loaded`] hands
//! them back to be restored there.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::roles::main::maintenance;
use crate::roles::main::messages::{DbResult, Message, Out, Parked, StartupLoad, Then};
use crate::wire::admin::AdminRequest;
use crate::wire::db::DbRequest;
use crate::wire::db::calls;
use crate::wire::records::Millis;

/// How long a failed load waits before it is asked again.
const RETRY: Duration = Duration::from_secs(1);

/// What start-up has received so far.
#[derive(Debug, Default)]
pub(crate) struct Boot {
    /// The `meta` key of the job control state (that part's own, handed in by `start`).
    jobctl_key: &'static str,
    maintenance_loaded: bool,
    jobctl_loaded: bool,
    last_slots: Option<BTreeMap<String, Millis>>,
    in_flight_loaded: bool,
    /// Loads that failed, to ask again once `retry_at` has come.
    failed: Vec<StartupLoad>,
    retry_at: Option<Instant>,
    done: bool,
    /// Admin requests waiting for start-up to finish.
    parked: Vec<Parked>,
}

/// A setting start-up loaded for another part to restore.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Restore {
    /// The value of the maintenance `meta` key (the maintenance part's).
    Maintenance(Option<String>),
    /// The value of the job control `meta` key (job control's).
    JobCtl(Option<String>),
}

impl Boot {
    /// Ask db for the maintenance and job control settings (`jobctl_key`: the `meta` key
    /// of the latter) and the newest slot of every job.
    pub(crate) fn start(&mut self, jobctl_key: &'static str) -> Out {
        self.jobctl_key = jobctl_key;
        let mut out = Out::new();
        for load in [
            StartupLoad::Maintenance,
            StartupLoad::LastSlots,
            StartupLoad::JobCtl,
        ] {
            self.ask(load, &mut out);
        }
        out
    }

    fn ask(&self, load: StartupLoad, out: &mut Out) {
        let req = match load {
            StartupLoad::Maintenance => DbRequest::GetMeta(maintenance::META_KEY.to_string()),
            StartupLoad::LastSlots => DbRequest::LastSlots,
            StartupLoad::JobCtl => DbRequest::GetMeta(self.jobctl_key.to_string()),
        };
        out.db(
            req,
            Then::tell(move |result| Message::StartupLoaded { load, result }),
        );
    }

    /// db's answer to `load` at `now`: what to restore in another part, and what to do
    /// next (ask again a second later; or, with everything in, finish).
    pub(crate) fn loaded(
        &mut self,
        load: StartupLoad,
        result: DbResult,
        now: Instant,
    ) -> (Option<Restore>, Out) {
        let loaded = match load {
            StartupLoad::Maintenance => calls::GetMeta::take(result).map(|value| {
                self.maintenance_loaded = true;
                Some(Restore::Maintenance(value))
            }),
            StartupLoad::LastSlots => calls::LastSlots::take(result).map(|slots| {
                self.last_slots = Some(slots);
                None
            }),
            StartupLoad::JobCtl => calls::GetMeta::take(result).map(|value| {
                self.jobctl_loaded = true;
                Some(Restore::JobCtl(value))
            }),
        };
        let mut out = Out::new();
        let restore = match loaded {
            Ok(restore) => restore,
            Err(e) => {
                // Without these main cannot tell what may fire: ask again rather than guess.
                log::error!("start-up could not load {load:?} ({e}); asking again");
                self.failed.push(load);
                if self.retry_at.is_none() {
                    let at = now + RETRY;
                    self.retry_at = Some(at);
                    out.post(Message::Later {
                        at,
                        msg: Box::new(Message::StartupRetry),
                    });
                }
                None
            }
        };
        out.extend(self.finish_when_ready());
        (restore, out)
    }

    /// The loads that failed are due: ask them again.
    pub(crate) fn retry(&mut self) -> Out {
        let mut out = Out::new();
        if self.done {
            return out;
        }
        self.retry_at = None;
        for load in std::mem::take(&mut self.failed) {
            self.ask(load, &mut out);
        }
        out
    }

    /// The runs in flight are restored (`run/recovery.rs`).
    pub(crate) fn in_flight_loaded(&mut self) -> Out {
        self.in_flight_loaded = true;
        self.finish_when_ready()
    }

    /// Keep an admin request that depends on what start-up loads (run now, maintenance)
    /// until start-up is done, with who made it: `uid`, the admin socket's peer, or
    /// `name`, the API identity (`api:NAME`).
    pub(crate) fn park(
        &mut self,
        call: CallId,
        req: AdminRequest,
        uid: Option<u32>,
        name: Option<String>,
    ) {
        self.parked.push(Parked {
            call,
            req,
            uid,
            name,
        });
    }

    /// Once everything is loaded, and only once: start-up is done.
    fn finish_when_ready(&mut self) -> Out {
        let mut out = Out::new();
        let loaded = self.maintenance_loaded && self.jobctl_loaded && self.in_flight_loaded;
        if self.done || !loaded {
            return out;
        }
        let Some(last_slots) = self.last_slots.take() else {
            return out;
        };
        self.done = true;
        out.post(Message::StartupDone {
            last_slots,
            parked: std::mem::take(&mut self.parked),
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::rpc::CallError;
    use crate::roles::main::messages::Cmd;
    use crate::wire::db::DbReply;

    fn asked(out: &Out) -> Vec<String> {
        out.cmds()
            .iter()
            .filter_map(|c| match c {
                Cmd::Db { req, .. } => Some(format!("{req:?}")),
                _ => None,
            })
            .collect()
    }

    fn posted(out: &Out) -> Vec<&Message> {
        out.cmds()
            .iter()
            .filter_map(|c| match c {
                Cmd::Post(m) => Some(m),
                _ => None,
            })
            .collect()
    }

    fn meta(value: Option<&str>) -> DbResult {
        Ok(DbReply::Meta(value.map(str::to_string)))
    }

    fn slots() -> DbResult {
        Ok(DbReply::LastSlots(BTreeMap::from([(
            "backup".to_string(),
            60_000,
        )])))
    }

    #[test]
    fn start_asks_the_three_loads_in_order() {
        let mut boot = Boot::default();
        let out = boot.start("jobctl");
        assert_eq!(
            asked(&out),
            [
                "GetMeta(\"maintenance\")",
                "LastSlots",
                "GetMeta(\"jobctl\")"
            ]
        );
    }

    #[test]
    fn start_up_is_done_once_all_four_answers_are_in_and_hands_on_the_parked_requests() {
        let t0 = Instant::now();
        let mut boot = Boot::default();
        let _ = boot.start("jobctl");
        boot.park(7, AdminRequest::Status, Some(1000), None);
        boot.park(8, AdminRequest::Reload, None, Some("api:alice".into()));
        let (restore, out) = boot.loaded(StartupLoad::Maintenance, meta(Some("{}")), t0);
        assert_eq!(restore, Some(Restore::Maintenance(Some("{}".into()))));
        assert!(out.is_empty());
        let (restore, out) = boot.loaded(StartupLoad::LastSlots, slots(), t0);
        assert_eq!(restore, None);
        assert!(out.is_empty());
        let (restore, out) = boot.loaded(StartupLoad::JobCtl, meta(None), t0);
        assert_eq!(restore, Some(Restore::JobCtl(None)));
        assert!(out.is_empty(), "the runs in flight are not in yet");

        let out = boot.in_flight_loaded();
        match posted(&out)[..] {
            [Message::StartupDone { last_slots, parked }] => {
                assert_eq!(last_slots.get("backup"), Some(&60_000));
                assert_eq!(parked.len(), 2);
                assert_eq!((parked[0].call, parked[0].uid), (7, Some(1000)));
                let who = (parked[1].call, parked[1].uid, parked[1].name.as_deref());
                assert_eq!(
                    who,
                    (8, None, Some("api:alice")),
                    "the API identity is kept"
                );
            }
            _ => panic!("start-up is done"),
        }
        assert!(boot.in_flight_loaded().is_empty(), "done only once");
        assert!(boot.retry().is_empty(), "nothing is asked again once done");
    }

    #[test]
    fn failed_loads_are_asked_again_together_a_second_after_the_first_failure() {
        let t0 = Instant::now();
        let mut boot = Boot::default();
        let _ = boot.start("jobctl");
        let gone = || Err(CallError::PeerGone(crate::ipc::Role::Db));
        let (restore, out) = boot.loaded(StartupLoad::Maintenance, gone(), t0);
        assert_eq!(restore, None);
        match posted(&out)[..] {
            [Message::Later { at, msg }] => {
                assert_eq!(*at, t0 + RETRY);
                assert!(matches!(**msg, Message::StartupRetry));
            }
            _ => panic!("a retry a second later"),
        }
        let (_, out) = boot.loaded(StartupLoad::JobCtl, gone(), t0 + RETRY / 2);
        assert!(out.is_empty(), "the retry already armed takes this one too");

        let out = boot.retry();
        assert_eq!(
            asked(&out),
            ["GetMeta(\"maintenance\")", "GetMeta(\"jobctl\")"]
        );
        let (_, out) = boot.loaded(StartupLoad::LastSlots, gone(), t0 + RETRY * 2);
        assert_eq!(posted(&out).len(), 1, "a later failure arms a new retry");
    }

    #[test]
    fn a_failed_load_does_not_count_as_loaded() {
        let t0 = Instant::now();
        let mut boot = Boot::default();
        let _ = boot.start("jobctl");
        let _ = boot.in_flight_loaded();
        let _ = boot.loaded(StartupLoad::Maintenance, meta(None), t0);
        let _ = boot.loaded(StartupLoad::JobCtl, meta(None), t0);
        let wrong = Ok(DbReply::Meta(None));
        let (_, out) = boot.loaded(StartupLoad::LastSlots, wrong, t0);
        assert!(
            !posted(&out)
                .iter()
                .any(|m| matches!(m, Message::StartupDone { .. })),
            "a wrong reply is a failure, not an empty answer"
        );
        let (_, out) = boot.loaded(StartupLoad::LastSlots, slots(), t0);
        assert!(matches!(posted(&out)[..], [Message::StartupDone { .. }]));
    }
}
