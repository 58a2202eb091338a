//! db answers every request with the reply shape `wire::db::calls` binds it to: the table
//! main unpacks replies with and the store's `apply` cannot drift apart unnoticed.

use super::apply;
use crate::ipc::rpc::{Call, CallError};
use crate::roles::db::store::tests::{new_run, temp_store};
use crate::wire::db::{
    DbReply, DbRequest, EventFilter, NewEvent, OutputLimit, OutputQuery, Retention, RunFilter,
    RunUpdate, TargetUpdate, WrapperSeen, calls,
};
use crate::wire::records::RunState;
use crate::wire::wrapper::Stream;

/// `apply` the request and unpack the reply as `C`; a mismatch fails the test by name.
fn check<C: Call<DbReply>>(store: &mut dyn super::Storage, req: DbRequest) -> C::Reply {
    let reply = apply(store, &req).unwrap_or_else(|e| panic!("{req:?}: {e}"));
    C::take(Ok(reply)).unwrap_or_else(|e| panic!("{e}"))
}

/// `apply` a write main sends without a typed call kind (`DbWait::write`): it answers
/// `Done`.
fn done(store: &mut dyn super::Storage, req: DbRequest) {
    let reply = apply(store, &req).unwrap_or_else(|e| panic!("{req:?}: {e}"));
    assert!(matches!(reply, DbReply::Done), "{req:?} answered {reply:?}");
}

#[test]
fn every_request_gets_the_reply_its_call_kind_expects() {
    let (_dir, mut store) = temp_store();
    every_request(&mut store);
}

#[test]
fn every_request_gets_the_reply_its_call_kind_expects_on_postgres() {
    let Some(url) = super::pg_cluster::fresh_database() else {
        return;
    };
    let mut store = super::pg::PgStore::connect(&url).unwrap_or_else(|e| panic!("{e}"));
    every_request(&mut store);
}

fn every_request(s: &mut dyn super::Storage) {
    let run = check::<calls::CreateRun>(
        s,
        DbRequest::CreateRun(new_run("j", Some(1), RunState::Running, &["m"])),
    )
    .expect("a new slot is recorded");
    check::<calls::UpdateRun>(
        s,
        DbRequest::UpdateRun {
            run,
            update: RunUpdate::default(),
        },
    );
    done(
        s,
        DbRequest::UpdateTarget {
            run,
            machine: "m".into(),
            update: TargetUpdate::default(),
        },
    );
    let seq = check::<calls::AppendOutput>(
        s,
        DbRequest::AppendOutput {
            run,
            machine: "m".into(),
            seq: 1,
            stream: Stream::Stdout,
            data: b"hi".to_vec(),
            limit: OutputLimit::default(),
        },
    );
    assert_eq!(seq, 1);
    assert!(check::<calls::GetRun>(s, DbRequest::GetRun(run)).is_some());
    assert_eq!(
        check::<calls::InFlightDetails>(s, DbRequest::InFlightDetails).len(),
        1
    );
    assert_eq!(
        check::<calls::ListRuns>(s, DbRequest::ListRuns(RunFilter::default())).len(),
        1
    );
    check::<calls::LastRuns>(s, DbRequest::LastRuns);
    let out = check::<calls::Output>(
        s,
        DbRequest::Output {
            run,
            machine: "m".into(),
            query: OutputQuery::default(),
        },
    );
    assert_eq!(out.data, b"hi");
    check::<calls::SetMeta>(
        s,
        DbRequest::SetMeta {
            key: "k".into(),
            value: "v".into(),
        },
    );
    assert_eq!(
        check::<calls::GetMeta>(s, DbRequest::GetMeta("k".into())).as_deref(),
        Some("v")
    );
    done(
        s,
        DbRequest::RecordEvent(NewEvent {
            at: 1,
            kind: "run_created".into(),
            job: Some("j".into()),
            run: Some(run),
            machine: None,
            message: "created".into(),
            uid: None,
        }),
    );
    assert_eq!(
        check::<calls::ListEvents>(s, DbRequest::ListEvents(EventFilter::default())).len(),
        1
    );
    check::<calls::Prune>(
        s,
        DbRequest::Prune {
            job: "j".into(),
            retention: Retention::default(),
        },
    );
    done(s, DbRequest::Reclaim);
    assert!(check::<calls::RunDetails>(s, DbRequest::RunDetails(run)).is_some());
    assert_eq!(
        check::<calls::LastSlots>(s, DbRequest::LastSlots).get("j"),
        Some(&1)
    );
    let wrapper = WrapperSeen {
        minion: "m".into(),
        path: "/usr/bin/saltpeter-wrapper".into(),
        sha256: "ab".repeat(32),
        seen: 1,
    };
    done(s, DbRequest::RecordWrappers(vec![wrapper.clone()]));
    let listed = check::<calls::Wrappers>(s, DbRequest::Wrappers);
    assert_eq!(listed, std::slice::from_ref(&wrapper));
    done(
        s,
        DbRequest::ForgetWrapper {
            minion: wrapper.minion,
            path: wrapper.path,
        },
    );
    assert_eq!(check::<calls::Wrappers>(s, DbRequest::Wrappers), []);
}

#[test]
fn a_reply_of_another_shape_is_one_wrong_reply_error() {
    let err = calls::GetRun::take(Ok(DbReply::Done)).unwrap_err();
    assert!(
        matches!(err, CallError::WrongReply { call: "GetRun", .. }),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "the db process answered GetRun with Done");
    // Failures of the call itself pass through untouched.
    let gone = CallError::PeerGone(crate::ipc::Role::Db);
    assert_eq!(calls::GetRun::take(Err(gone.clone())), Err(gone));
}
