//! What the leader's commits changed, passed on to the standbys (docs/ha.md, "A
//! standby's live views").
//!
//! 1. **Leader.** Before each batch commits, [`announcements`] lists the runs it changed:
//!    `run <run> 0` for a run's or a target's record, `output <run> <seq>` for output
//!    (the highest frame seq of the batch), at most one per run and kind. The store sends
//!    them inside the batch's transaction (`Storage::announce_live`; PostgreSQL's
//!    `NOTIFY` is delivered only if the transaction commits), so a notification means
//!    committed data.
//! 2. **Standby.** Every [`POLL`] db takes what its listening connection heard
//!    (`Storage::hear_live`, only while a standby: a leader does not listen), coalesces
//!    it per run and kind ([`LiveWatch::poll`]) and the loop passes it to main as
//!    `DbNotice::Live`. A connection (re)made says `resync`: what was sent meanwhile is
//!    lost, and main reads every run in flight again. Notifications are hints; main
//!    reads what changed from the database.
//!
//! SQLite has one daemon: nothing is announced and nothing heard.

use std::collections::BTreeMap;
use std::time::Duration;

use super::storage::Storage;
use super::store::StoreError;
use crate::ipc::CallId;
use crate::wire::db::{DbReply, DbRequest, LiveChange, LiveKind, LiveNotice};
use crate::wire::records::RunId;

/// The PostgreSQL channel of the announcements.
pub(crate) const CHANNEL: &str = "saltpeter_live";

/// How often a standby's db takes what it heard: the delay a standby's live views add.
pub(crate) const POLL: Duration = Duration::from_millis(25);

/// Notifications taken in one poll at most (the rest wait for the next one).
pub(crate) const TAKE_MAX: usize = 10_000;

/// Runs one notice names at most; past it the notice says `resync` instead, and main
/// reads the runs in flight once rather than each run.
pub(crate) const NOTICE_MAX: usize = 4096;

/// The announcements of a batch: one per run and kind that a request of the batch
/// changed (and that succeeded), in run order.
pub(crate) fn announcements<E>(
    calls: &[(CallId, DbRequest)],
    results: &[Result<DbReply, E>],
) -> Vec<String> {
    let mut changed: BTreeMap<(RunId, LiveKind), u64> = BTreeMap::new();
    for ((_, req), result) in calls.iter().zip(results) {
        let Ok(reply) = result else {
            continue;
        };
        let change = match (req, reply) {
            (DbRequest::CreateRun(_), DbReply::RunCreated(Some(run))) => (*run, LiveKind::Run, 0),
            (DbRequest::UpdateRun { run, .. }, _)
            | (DbRequest::UpdateTarget { run, .. }, _)
            | (DbRequest::RetryTarget { run, .. }, _) => (*run, LiveKind::Run, 0),
            (DbRequest::AppendOutput { run, seq, .. }, _) => (*run, LiveKind::Output, *seq),
            _ => continue,
        };
        let seq = changed.entry((change.0, change.1)).or_insert(0);
        *seq = (*seq).max(change.2);
    }
    changed
        .into_iter()
        .map(|((run, kind), seq)| format(&LiveChange { run, kind, seq }))
        .collect()
}

/// `<kind> <run> <seq>`.
pub(crate) fn format(change: &LiveChange) -> String {
    let kind = match change.kind {
        LiveKind::Run => "run",
        LiveKind::Output => "output",
    };
    format!("{kind} {} {}", change.run, change.seq)
}

/// An announcement read back; `None` for anything else (a payload of a newer build, or
/// someone else's `NOTIFY` on the channel).
pub(crate) fn parse(payload: &str) -> Option<LiveChange> {
    let mut words = payload.split(' ');
    let kind = match words.next()? {
        "run" => LiveKind::Run,
        "output" => LiveKind::Output,
        _ => return None,
    };
    let run = words.next()?.parse().ok()?;
    let seq = words.next()?.parse().ok()?;
    if words.next().is_some() {
        return None;
    }
    Some(LiveChange { run, kind, seq })
}

/// What a standby heard, coalesced per run and kind into one notice for main.
pub(crate) fn coalesce(fresh: bool, payloads: &[String]) -> LiveNotice {
    let mut changed: BTreeMap<(RunId, LiveKind), u64> = BTreeMap::new();
    for payload in payloads {
        match parse(payload) {
            Some(c) => {
                let seq = changed.entry((c.run, c.kind)).or_insert(0);
                *seq = (*seq).max(c.seq);
            }
            None => log::debug!("ignoring a notification on {CHANNEL}: {payload:?}"),
        }
    }
    if changed.len() > NOTICE_MAX {
        return LiveNotice {
            resync: true,
            changes: Vec::new(),
        };
    }
    LiveNotice {
        resync: fresh,
        changes: changed
            .into_iter()
            .map(|((run, kind), seq)| LiveChange { run, kind, seq })
            .collect(),
    }
}

/// A standby's listening, as the db loop polls it.
#[derive(Default)]
pub(crate) struct LiveWatch {
    /// The last poll failed (logged once until one succeeds).
    failing: bool,
}

impl LiveWatch {
    /// Takes what was heard while `standby`; stops listening otherwise. Returns the
    /// notice for main, if there is anything to say.
    pub(crate) fn poll(&mut self, store: &mut dyn Storage, standby: bool) -> Option<LiveNotice> {
        match store.hear_live(standby, TAKE_MAX) {
            Ok(Some(heard)) => {
                if self.failing {
                    log::info!("listening for the leader's changes again");
                }
                self.failing = false;
                let notice = coalesce(heard.fresh, &heard.payloads);
                (notice.resync || !notice.changes.is_empty()).then_some(notice)
            }
            Ok(None) => None,
            Err(e) => {
                if !self.failing {
                    log::warn!("a standby's live views wait: {e}");
                }
                self.failing = true;
                None
            }
        }
    }
}

/// Sends the batch's announcements inside its transaction. A lost connection fails the
/// batch (it is applied again); any other failure only costs the standbys a hint.
pub(crate) fn announce(
    store: &mut dyn Storage,
    calls: &[(CallId, DbRequest)],
    results: &[Result<DbReply, StoreError>],
) -> Result<(), StoreError> {
    if !store.shared() {
        return Ok(());
    }
    let payloads = announcements(calls, results);
    if payloads.is_empty() {
        return Ok(());
    }
    match store.announce_live(&payloads) {
        Err(lost @ StoreError::BatchLost { .. }) => Err(lost),
        Err(e) => {
            log::warn!("could not announce changes to the standbys: {e}");
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::db::{RunUpdate, TargetUpdate};
    use crate::wire::wrapper::Stream;

    fn output(run: RunId, seq: u64) -> DbRequest {
        DbRequest::AppendOutput {
            run,
            machine: "m1".into(),
            seq,
            stream: Stream::Stdout,
            data: b"x".to_vec(),
            limit: Default::default(),
        }
    }

    #[test]
    fn a_batch_announces_each_run_and_kind_once_and_only_what_succeeded() {
        let calls: Vec<(CallId, DbRequest)> = vec![
            (1, output(7, 3)),
            (2, output(7, 5)),
            (3, output(7, 4)),
            (
                4,
                DbRequest::UpdateTarget {
                    run: 7,
                    machine: "m1".into(),
                    update: TargetUpdate::default(),
                },
            ),
            (
                5,
                DbRequest::UpdateRun {
                    run: 7,
                    update: RunUpdate::default(),
                },
            ),
            (6, output(9, 1)),
            (7, DbRequest::GetRun(8)),
            (8, output(10, 1)),
        ];
        let results: Vec<Result<DbReply, ()>> = vec![
            Ok(DbReply::OutputStored { contiguous_seq: 3 }),
            Ok(DbReply::OutputStored { contiguous_seq: 5 }),
            Ok(DbReply::OutputStored { contiguous_seq: 5 }),
            Ok(DbReply::Done),
            Ok(DbReply::Done),
            Ok(DbReply::OutputStored { contiguous_seq: 1 }),
            Ok(DbReply::Run(None)),
            Err(()),
        ];
        assert_eq!(
            announcements(&calls, &results),
            ["run 7 0", "output 7 5", "output 9 1"]
        );
    }

    #[test]
    fn a_run_already_recorded_for_its_slot_is_not_announced() {
        let new = crate::wire::db::NewRun {
            job: "j".into(),
            slot: Some(1),
            trigger: crate::wire::records::Trigger::Schedule,
            state: crate::wire::records::RunState::Queued,
            reason: None,
            targets: Vec::new(),
            now: 1,
        };
        let calls = vec![
            (1, DbRequest::CreateRun(new.clone())),
            (2, DbRequest::CreateRun(new)),
        ];
        let results: Vec<Result<DbReply, ()>> = vec![
            Ok(DbReply::RunCreated(Some(4))),
            Ok(DbReply::RunCreated(None)),
        ];
        assert_eq!(announcements(&calls, &results), ["run 4 0"]);
    }

    #[test]
    fn what_a_standby_hears_is_coalesced_and_foreign_payloads_are_ignored() {
        let heard: Vec<String> = [
            "output 3 1",
            "output 3 9",
            "run 3 0",
            "hello",
            "run x 0",
            "run 2 0 extra",
            "output 2 4",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let notice = coalesce(false, &heard);
        assert!(!notice.resync);
        assert_eq!(
            notice.changes,
            [
                LiveChange {
                    run: 2,
                    kind: LiveKind::Output,
                    seq: 4
                },
                LiveChange {
                    run: 3,
                    kind: LiveKind::Run,
                    seq: 0
                },
                LiveChange {
                    run: 3,
                    kind: LiveKind::Output,
                    seq: 9
                },
            ]
        );
        assert!(
            coalesce(true, &[]).resync,
            "a new connection may have missed some"
        );
        for c in &notice.changes {
            assert_eq!(parse(&format(c)), Some(*c));
        }
    }

    #[test]
    fn too_many_runs_at_once_are_one_resync() {
        let heard: Vec<String> = (0..=NOTICE_MAX as u64)
            .map(|r| format!("run {r} 0"))
            .collect();
        let notice = coalesce(false, &heard);
        assert!(notice.resync);
        assert!(notice.changes.is_empty());
    }
}
