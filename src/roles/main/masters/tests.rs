//! The part's methods: where a call goes, how its parts come back and merge, what a
//! silent server costs. Pure: the replies are handed in, the time is pinned.

use std::time::{Duration, Instant};

use super::*;
use crate::ipc::Role;
use crate::ipc::rpc::CallError;
use crate::roles::main::messages::{BlockingResult, Cmd, DbResult};
use crate::wire::db::DbReply;
use crate::wire::link::{MinionOutcome, Resolution, SaltSettings};

const ME: &str = "a";

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn salt() -> SaltSettings {
    SaltSettings {
        salt_bin: "salt".into(),
        config_dir: None,
        timeout_s: 10,
        concurrency: 4,
        bridge: true,
    }
}

fn resolve(target: &str, target_type: SaltTargetType) -> BlockingRequest {
    BlockingRequest::Resolve {
        salt: salt(),
        target: target.into(),
        target_type,
        from_cache: false,
    }
}

fn launch(executor: ExecutorKind, runs: &[RunId], machines: &[&str]) -> BlockingRequest {
    BlockingRequest::Launch {
        executor,
        wrapper_path: "/w".into(),
        runs: runs.to_vec(),
        url: "wss://a:8889".into(),
        targets: machines
            .iter()
            .map(|m| LaunchTarget {
                machine: m.to_string(),
                token: None,
            })
            .collect(),
        salt: Some(salt()),
        await_returns: false,
    }
}

fn resolved(live: &[&str]) -> BlockingReply {
    BlockingReply::Resolved(Resolution {
        live: strings(live),
        ..Default::default()
    })
}

fn ok(machine: &str) -> MinionOutcome {
    MinionOutcome {
        machine: machine.into(),
        result: Ok(()),
        silent: None,
        unreachable: None,
        server: None,
    }
}

/// Two servers, `a` (this one) and `b`; `a`'s master accepted m1, `b` published m2.
fn two_servers() -> Delegation {
    let mut d = Delegation::default();
    d.peers(strings(&["b"]));
    d.keys(MinionKeys {
        own: strings(&["m1"]),
        others: vec![("b".into(), "m2".into(), vec![1, 2, 3])],
    });
    d
}

/// What a db reply becomes.
type DbTell = Box<dyn FnOnce(DbResult) -> Message>;

/// What a spread call asks for: this server's part (its request, and the message its
/// reply becomes) and the other servers' rows (to whom, and the message db's answer
/// becomes).
struct Asked {
    local: Vec<(BlockingRequest, crate::roles::main::messages::BlockingTell)>,
    rows: Vec<(String, BlockingRequest, DbTell)>,
}

fn spread(route: Option<Out>) -> Asked {
    let Some(out) = route else {
        panic!("the call went unchanged");
    };
    let mut asked = Asked {
        local: Vec::new(),
        rows: Vec::new(),
    };
    for cmd in out.into_cmds() {
        match cmd {
            Cmd::Blocking {
                req,
                local: true,
                tell,
            } => asked.local.push((req, tell)),
            Cmd::Db {
                req: DbRequest::SendSaltCall { from, to, request },
                then: Then::Tell(tell),
                ..
            } => {
                assert_eq!(from, ME);
                let req = bincode::deserialize(&request).unwrap_or_else(|e| panic!("{e}"));
                asked.rows.push((to, req, tell));
            }
            _ => panic!("a spread call asks only for blocking calls and rows"),
        }
    }
    asked
}

/// The merged answer `out` hands to the caller of `call`, if it does.
fn merged(out: Out, call: CallId) -> Option<BlockingResult> {
    let mut answer = None;
    for cmd in out.into_cmds() {
        if let Cmd::Post(Message::SaltCallMerged { call: c, result }) = cmd {
            assert_eq!(c, call);
            assert!(answer.is_none(), "one merged answer");
            answer = Some(result);
        }
    }
    answer
}

/// Feed a message back to the part, as the dispatch does.
fn back(d: &mut Delegation, msg: Message, now: Instant) -> Out {
    match msg {
        Message::SaltCallSent {
            call,
            index,
            wait,
            result,
        } => d.sent(ME, call, index, wait, result, now),
        Message::SaltPartAnswered {
            call,
            index,
            result,
        } => d.local_part(ME, call, index, result),
        _ => panic!("not a message of a spread call"),
    }
}

fn row_answer(answer: Result<BlockingReply, String>) -> Vec<u8> {
    bincode::serialize(&answer).unwrap_or_default()
}

#[test]
fn a_call_goes_unchanged_unless_other_servers_share_the_database() {
    let glob = || resolve("web*", SaltTargetType::Glob);
    let mut alone = Delegation::default();
    assert!(alone.route(1, &glob(), ME, true, 20).is_none());
    let mut d = two_servers();
    assert!(d.route(2, &glob(), ME, false, 20).is_none());
    // A local launch, and a call whose minions are all this server's, go unchanged.
    let local = launch(ExecutorKind::Local, &[1], &["m2"]);
    assert!(d.route(3, &local, ME, true, 20).is_none());
    let mine = resolve("m1,m9", SaltTargetType::List);
    assert!(d.route(4, &mine, ME, true, 20).is_none());
    assert!(d.calls.is_empty());
}

#[test]
fn an_expression_is_resolved_by_every_server_and_the_answers_merge() {
    let mut d = two_servers();
    let t0 = Instant::now();
    let asked = spread(d.route(5, &resolve("web*", SaltTargetType::Glob), ME, true, 20));
    let [(mine, local_tell)] = <[_; 1]>::try_from(asked.local).unwrap_or_else(|_| panic!());
    assert!(matches!(mine, BlockingRequest::Resolve { ref target, .. } if target == "web*"));
    let [(to, theirs, row_tell)] = <[_; 1]>::try_from(asked.rows).unwrap_or_else(|_| panic!());
    assert_eq!(to, "b");
    assert!(matches!(theirs, BlockingRequest::Resolve { ref target, .. } if target == "web*"));

    let out = back(&mut d, local_tell(Ok(resolved(&["m1"]))), t0);
    assert!(out.is_empty(), "b has not answered yet");
    let out = back(&mut d, row_tell(Ok(DbReply::SaltCallSent(77))), t0);
    assert!(out.is_empty());
    let out = d.replies(ME, vec![(77, row_answer(Ok(resolved(&["m2", "m3"]))))]);
    let Some(Ok(BlockingReply::Resolved(res))) = merged(out, 5) else {
        panic!("the merged resolution");
    };
    assert_eq!(res.live, strings(&["m1", "m2", "m3"]));
    assert!(d.calls.is_empty() && d.remote_parts.is_empty());

    // m3 was found on b: a list naming it goes to b, only for m3.
    let asked = spread(d.route(6, &resolve("m1,m3", SaltTargetType::List), ME, true, 20));
    assert!(matches!(
        &asked.local[..],
        [(BlockingRequest::Resolve { target, .. }, _)] if target == "m1"
    ));
    assert!(matches!(
        &asked.rows[..],
        [(to, BlockingRequest::Resolve { target, .. }, _)] if to == "b" && target == "m3"
    ));
}

#[test]
fn a_silent_server_fails_its_minions_at_its_deadline_with_an_event_per_run() {
    let mut d = two_servers();
    let t0 = Instant::now();
    let asked = spread(d.route(
        8,
        &launch(ExecutorKind::Salt, &[1, 2], &["m1", "m2"]),
        ME,
        true,
        20,
    ));
    let [(mine, local_tell)] = <[_; 1]>::try_from(asked.local).unwrap_or_else(|_| panic!());
    assert!(matches!(mine, BlockingRequest::Launch { ref targets, .. }
        if targets.len() == 1 && targets[0].machine == "m1"));
    let [(_, _, row_tell)] = <[_; 1]>::try_from(asked.rows).unwrap_or_else(|_| panic!());
    let out = back(&mut d, row_tell(Ok(DbReply::SaltCallSent(9))), t0);
    assert!(out.is_empty());
    let launched = BlockingReply::Launched(vec![(1, ok("m1")), (2, ok("m1"))]);
    assert!(back(&mut d, local_tell(Ok(launched)), t0).is_empty());

    // A launch waits twice the ping timeout and 15 s.
    let wait = Duration::from_secs(55);
    assert!(
        d.expire(ME, t0 + wait - Duration::from_millis(1))
            .is_empty()
    );
    let out = d.expire(ME, t0 + wait);
    let events: Vec<Option<RunId>> = out
        .cmds()
        .iter()
        .filter_map(|c| match c {
            Cmd::Event(e) => {
                assert_eq!(e.kind, "salt_server_silent");
                assert!(
                    e.message
                        .starts_with("b did not answer within 55 s to a launch")
                );
                Some(e.run)
            }
            _ => None,
        })
        .collect();
    assert_eq!(events, [Some(1), Some(2)]);
    let Some(Ok(BlockingReply::Launched(outcomes))) = merged(out, 8) else {
        panic!("the merged launch");
    };
    let failed: Vec<(RunId, &str, Option<&str>)> = outcomes
        .iter()
        .filter(|(_, o)| o.result.is_err())
        .map(|(run, o)| (*run, o.machine.as_str(), o.server.as_deref()))
        .collect();
    assert_eq!(failed, [(1, "m2", Some("b")), (2, "m2", Some("b"))]);
    // Its answer, late, is dropped.
    let late = d.replies(ME, vec![(9, row_answer(Err("late".into())))]);
    assert!(late.is_empty());
}

#[test]
fn a_part_that_cannot_be_sent_fails_and_a_call_that_ended_drops_its_parts() {
    let mut d = two_servers();
    let t0 = Instant::now();
    let asked = spread(d.route(
        11,
        &BlockingRequest::Deploy {
            salt: salt(),
            minions: strings(&["m1", "m2"]),
            wrapper_path: "/w".into(),
            wrapper_source: None,
        },
        ME,
        true,
        20,
    ));
    let [(_, local_tell)] = <[_; 1]>::try_from(asked.local).unwrap_or_else(|_| panic!());
    let [(_, _, row_tell)] = <[_; 1]>::try_from(asked.rows).unwrap_or_else(|_| panic!());
    let deployed = BlockingReply::Deployed {
        outcomes: vec![ok("m1")],
        hash: "h".into(),
    };
    assert!(back(&mut d, local_tell(Ok(deployed)), t0).is_empty());
    let gone = Err(CallError::PeerGone(Role::Db));
    let out = back(&mut d, row_tell(gone), t0);
    let Some(Ok(BlockingReply::Deployed { outcomes, hash })) = merged(out, 11) else {
        panic!("the merged deployment");
    };
    assert_eq!(hash, "h");
    assert!(outcomes.iter().any(|o| {
        o.machine == "m2"
            && o.result
                .as_ref()
                .is_err_and(|why| why.contains("could not write the call"))
    }));

    // The caller's call ends first (its deadline): the parts that come later are dropped.
    let asked = spread(d.route(12, &resolve("*", SaltTargetType::Glob), ME, true, 20));
    d.ended(12, &Err(CallError::Timeout(Role::Blocking, Duration::ZERO)));
    for (_, tell) in asked.local {
        assert!(back(&mut d, tell(Ok(resolved(&["m1"]))), t0).is_empty());
    }
    assert!(d.calls.is_empty());
}

#[test]
fn the_keys_other_servers_published_are_kept_for_proofs() {
    let d = two_servers();
    assert_eq!(d.published_keys("m2"), [("b".to_string(), vec![1, 2, 3])]);
    assert!(d.published_keys("m1").is_empty());
}
