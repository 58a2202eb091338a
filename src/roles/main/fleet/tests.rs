//! The fleet's transitions, with the time pinned: what each asks the shell to do.

use std::time::{Duration, Instant};

use super::launcher::default_wrapper_path;
use super::*;
use crate::config::LoadedConfig;
use crate::ipc::rpc::{CallError, RemoteError};
use crate::roles::main::messages::Cmd;
use crate::wire::db::DbReply;
use crate::wire::link::{BlockingReply, MinionOutcome, Resolution};

const PATH: &str = "/usr/local/bin/saltpeter-wrapper";

fn config() -> LoadedConfig {
    let yaml = "j:\n  schedule: '* * * * *'\n  command: 'true'\n  targets: a\n";
    crate::config::check_yaml(yaml, chrono::Utc::now())
}

fn at(base: Instant, s: u64) -> Now {
    Now {
        at: base + Duration::from_secs(s),
        wall: 1_000_000 + 1000 * s as i64,
    }
}

/// The daemon around the fleet: its settings, recovering, stopping.
fn up(sp: &SaltpeterConfig, recovering: bool, stopping: bool) -> Daemon<'_> {
    Daemon {
        sp,
        recovering,
        stopping,
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// What `out` asks for, one line per command.
fn said(out: Out) -> Vec<String> {
    said_and_replies(out).0
}

/// What `out` asks for, and its blocking calls' tells (to answer them).
fn said_and_replies(out: Out) -> (Vec<String>, Vec<crate::roles::main::messages::BlockingTell>) {
    let mut lines = Vec::new();
    let mut tells = Vec::new();
    for cmd in out.into_cmds() {
        lines.push(match cmd {
            Cmd::Db { req, then, due } => {
                let then = match then {
                    Then::Write(what) => format!("write {what}"),
                    Then::Tell(_) => "tell".to_string(),
                };
                let req = match req {
                    DbRequest::RecordWrappers(rows) => rows
                        .iter()
                        .map(|r| format!("record {} {} {} {}", r.minion, r.path, r.sha256, r.seen))
                        .collect::<Vec<_>>()
                        .join("; "),
                    other => format!("{other:?}"),
                };
                format!("db {req} ({then}, {due:?})")
            }
            Cmd::Blocking { req, local, tell } => {
                tells.push(tell);
                let req = match req {
                    BlockingRequest::Deploy {
                        minions,
                        wrapper_path,
                        ..
                    } => format!("deploy {minions:?} at {wrapper_path}"),
                    BlockingRequest::Resolve {
                        target,
                        target_type,
                        from_cache,
                        ..
                    } => format!("resolve {target} {target_type:?} cache {from_cache}"),
                    other => format!("{other:?}"),
                };
                format!("blocking {req}{}", if local { " (local)" } else { "" })
            }
            Cmd::Post(Message::FleetChanged) => "fleet changed".to_string(),
            Cmd::Post(_) => "another message".to_string(),
            Cmd::Hub(msg) => format!("hub {msg:?}"),
            Cmd::Event(e) => format!("event {} {:?}: {}", e.kind, e.machine, e.message),
            Cmd::Answer(call, resp) => format!("answer {call}: {resp:?}"),
        });
    }
    (lines, tells)
}

fn deployed(outcomes: Vec<MinionOutcome>, hash: &str) -> BlockingResult {
    Ok(BlockingReply::Deployed {
        outcomes,
        hash: hash.to_string(),
    })
}

fn ok(machine: &str) -> MinionOutcome {
    MinionOutcome {
        machine: machine.to_string(),
        result: Ok(()),
        silent: None,
        unreachable: None,
        server: None,
    }
}

fn failed(machine: &str, why: &str, silent: bool) -> MinionOutcome {
    MinionOutcome {
        machine: machine.to_string(),
        result: Err(why.to_string()),
        silent: silent.then(|| "Minion did not return".to_string()),
        unreachable: None,
        server: None,
    }
}

fn broken(why: &str) -> CallError {
    CallError::Remote(RemoteError::Failed(why.to_string()))
}

fn row(minion: &str, sha256: &str, seen: Millis) -> WrapperSeen {
    WrapperSeen {
        minion: minion.to_string(),
        path: PATH.to_string(),
        sha256: sha256.to_string(),
        seen,
    }
}

/// A fleet loaded with `rows` and this build's hash `build`, with what that asked for.
fn known(config: &LoadedConfig, rows: Vec<WrapperSeen>, build: &str) -> (Fleet, Vec<String>) {
    let now = at(Instant::now(), 0);
    let sp = &config.saltpeter;
    let mut fleet = Fleet::default();
    let _ = fleet.start(config);
    let _ = fleet.loaded(up(sp, true, false), Ok(DbReply::Wrappers(rows)), now);
    let out = fleet.hashed(up(sp, false, false), deployed(Vec::new(), build), now);
    (fleet, said(out))
}

#[test]
fn start_loads_the_fleet_once_and_asks_for_this_builds_hash() {
    let config = config();
    let mut fleet = Fleet::default();
    assert!(!fleet.busy());
    assert_eq!(
        said(fleet.start(&config)),
        [
            "db Wrappers (tell, Soon)".to_string(),
            format!("blocking deploy [] at {PATH}"),
        ]
    );
    assert!(fleet.busy());
    assert!(said(fleet.start(&config)).is_empty(), "nothing twice");
}

#[test]
fn an_operator_who_installs_the_wrapper_gets_no_hash_and_no_deployment() {
    let mut config = config();
    config.saltpeter.wrapper_deploy = false;
    let mut fleet = Fleet::default();
    assert_eq!(said(fleet.start(&config)), ["db Wrappers (tell, Soon)"]);
    let now = at(Instant::now(), 0);
    let out = fleet.loaded(
        up(&config.saltpeter, false, false),
        Ok(DbReply::Wrappers(vec![])),
        now,
    );
    assert_eq!(said(out), ["fleet changed"]);
    let (need, out) = fleet.need(&config, &names(&["a"]), PATH, now.at);
    assert!(matches!(need, Need::Ready));
    assert!(said(out).is_empty());
}

#[test]
fn a_need_before_the_load_starts_it_and_waits() {
    let config = config();
    let mut fleet = Fleet::default();
    let (need, out) = fleet.need(&config, &names(&["a"]), PATH, Instant::now());
    assert!(matches!(need, Need::Wait));
    assert_eq!(said(out).len(), 2, "the load and the hash");
}

#[test]
fn the_load_keeps_the_newest_row_of_each_minion() {
    let config = config();
    let sp = &config.saltpeter;
    let mut fleet = Fleet::default();
    let _ = fleet.start(&config);
    let rows = vec![row("a", "old", 5), row("a", "new", 9), row("b", "x", 1)];
    let out = fleet.loaded(
        up(sp, false, false),
        Ok(DbReply::Wrappers(rows)),
        at(Instant::now(), 0),
    );
    assert_eq!(said(out), ["fleet changed"], "no upgrade before the hash");
    assert_eq!(fleet.build_of("a", PATH), Some("new"));
    assert_eq!(fleet.build_of("b", PATH), Some("x"));
    assert_eq!(fleet.build_of("b", "/elsewhere"), None);
    assert!(fleet.busy(), "the hash is still asked for");
}

#[test]
fn a_failed_load_leaves_every_minion_unknown_but_loaded() {
    let config = config();
    let mut fleet = Fleet::default();
    let _ = fleet.start(&config);
    let now = at(Instant::now(), 0);
    let out = fleet.loaded(
        up(&config.saltpeter, false, false),
        Err(broken("gone")),
        now,
    );
    assert_eq!(said(out), ["fleet changed"]);
    let _ = fleet.hashed(
        up(&config.saltpeter, false, false),
        deployed(vec![], "h1"),
        now,
    );
    let (need, out) = fleet.need(&config, &names(&["a"]), PATH, now.at);
    assert!(matches!(need, Need::Wait));
    assert_eq!(said(out), [format!("blocking deploy [\"a\"] at {PATH}")]);
}

#[test]
fn the_hash_upgrades_every_stale_minion_once_per_path_after_start_up() {
    let config = config();
    let sp = &config.saltpeter;
    let now = at(Instant::now(), 0);
    let mut fleet = Fleet::default();
    let _ = fleet.start(&config);
    let rows = vec![
        row("c", "old", 1),
        row("a", "old", 1),
        row("b", "h1", 1),
        WrapperSeen {
            path: "/opt/w".to_string(),
            ..row("d", "old", 1)
        },
    ];
    let _ = fleet.loaded(up(sp, true, false), Ok(DbReply::Wrappers(rows)), now);
    // Still recovering: the upgrade waits for the end of start-up.
    let out = fleet.hashed(up(sp, true, false), deployed(vec![], "h1"), now);
    assert_eq!(said(out), ["fleet changed"]);
    assert_eq!(fleet.this_build(), Some("h1"));
    assert_eq!(
        said(fleet.upgrade_stale(up(sp, false, false))),
        [
            "blocking deploy [\"d\"] at /opt/w".to_string(),
            format!("blocking deploy [\"a\", \"c\"] at {PATH}"),
        ]
    );
    assert!(
        said(fleet.upgrade_stale(up(sp, false, false))).is_empty(),
        "once"
    );
    assert_eq!(fleet.deployments_total(), 3);
    let status = fleet.status();
    let a = status.iter().find(|r| r.minion == "a");
    assert!(a.is_some_and(|r| r.deploying && !r.current && r.deployments == 1));
    let b = status.iter().find(|r| r.minion == "b");
    assert!(b.is_some_and(|r| !r.deploying && r.current && r.deployments == 0));
}

#[test]
fn a_failed_hash_fails_the_runs_that_waited_for_it_and_is_asked_again_for_later_ones() {
    let config = config();
    let sp = &config.saltpeter;
    let base = Instant::now();
    let mut fleet = Fleet::default();
    let _ = fleet.start(&config);
    let _ = fleet.loaded(
        up(sp, false, false),
        Ok(DbReply::Wrappers(vec![])),
        at(base, 0),
    );
    let out = fleet.hashed(up(sp, false, false), Err(broken("no disk")), at(base, 5));
    assert_eq!(said(out), ["fleet changed"]);
    let (need, out) = fleet.need(&config, &names(&["a", "b"]), PATH, at(base, 1).at);
    let Need::Failed(failures) = need else {
        panic!("{need:?}")
    };
    assert!(said(out).is_empty());
    assert_eq!(failures.len(), 2);
    assert!(
        failures[0]
            .1
            .why
            .starts_with("this build's wrapper could not be published: ")
    );
    assert!(!failures[0].1.silent);
    // A run that starts waiting after the failure tries again.
    let (need, out) = fleet.need(&config, &names(&["a"]), PATH, at(base, 6).at);
    assert!(matches!(need, Need::Wait));
    assert_eq!(said(out), [format!("blocking deploy [] at {PATH}")]);
}

#[test]
fn a_need_starts_one_deployment_that_later_needs_wait_for() {
    let config = config();
    let base = Instant::now();
    let (mut fleet, _) = known(&config, vec![row("a", "h1", 1), row("b", "old", 1)], "h1");
    let (need, out) = fleet.need(&config, &names(&["a", "b", "c"]), PATH, base);
    assert!(matches!(need, Need::Wait));
    // `b` is being upgraded already: only `c` is deployed now.
    assert_eq!(said(out), [format!("blocking deploy [\"c\"] at {PATH}")]);
    let (need, out) = fleet.need(&config, &names(&["c"]), PATH, base);
    assert!(matches!(need, Need::Wait));
    assert!(said(out).is_empty(), "one deployment in flight per minion");
    let (need, _) = fleet.need(&config, &names(&["a"]), PATH, base);
    assert!(matches!(need, Need::Ready));
}

#[test]
fn a_deployment_records_its_builds_events_and_failures() {
    let config = config();
    let sp = &config.saltpeter;
    let base = Instant::now();
    let (mut fleet, _) = known(&config, vec![], "h1");
    let (_, out) = fleet.need(&config, &names(&["a", "b", "c"]), PATH, base);
    let (_, mut tells) = said_and_replies(out);
    let Some(tell) = tells.pop() else {
        panic!("no deployment")
    };
    let reply = deployed(
        vec![
            ok("a"),
            failed("b", "no space", false),
            failed("c", "?", true),
        ],
        "h2",
    );
    let Message::WrappersDeployed {
        path,
        minions,
        result,
    } = tell(reply)
    else {
        panic!("not the deployment's message")
    };
    assert_eq!(minions, names(&["a", "b", "c"]));
    let now = at(base, 10);
    let out = fleet.deployed(up(sp, false, false), path, minions, result, now);
    assert_eq!(
        said(out),
        [
            format!(
                "db record a {PATH} h2 {} (write a minion's wrapper build, By({}))",
                now.wall,
                now.wall + RECORD_WITHIN_MS
            ),
            format!("event wrapper_deployed Some(\"a\"): {PATH} (sha256 h2)"),
            "fleet changed".to_string(),
        ]
    );
    assert!(!fleet.busy());
    assert_eq!(fleet.this_build(), Some("h2"));
    assert_eq!(fleet.build_of("a", PATH), Some("h2"));
    let (need, out) = fleet.need(&config, &names(&["a", "b", "c"]), PATH, base);
    assert!(said(out).is_empty());
    let Need::Failed(failures) = need else {
        panic!("{need:?}")
    };
    let got: Vec<_> = failures
        .iter()
        .map(|(m, f)| (m.as_str(), f.why.as_str(), f.silent))
        .collect();
    assert_eq!(got, [("b", "no space", false), ("c", "?", true)]);
    // Failures older than the wait are tried again.
    let (need, out) = fleet.need(&config, &names(&["b"]), PATH, at(base, 11).at);
    assert!(matches!(need, Need::Wait));
    assert_eq!(said(out), [format!("blocking deploy [\"b\"] at {PATH}")]);
}

#[test]
fn a_deployment_that_failed_as_a_whole_fails_each_minion() {
    let config = config();
    let sp = &config.saltpeter;
    let base = Instant::now();
    let (mut fleet, _) = known(&config, vec![], "h1");
    let (_, _) = fleet.need(&config, &names(&["a", "b"]), PATH, base);
    let out = fleet.deployed(
        up(sp, false, false),
        PATH.to_string(),
        names(&["a", "b"]),
        Err(broken("salt is gone")),
        at(base, 1),
    );
    assert_eq!(said(out), ["fleet changed"]);
    let (need, _) = fleet.need(&config, &names(&["a", "b"]), PATH, base);
    let Need::Failed(failures) = need else {
        panic!("{need:?}")
    };
    assert_eq!(failures.len(), 2);
    assert!(failures.iter().all(|(_, f)| f.why.contains("salt is gone")));
}

#[test]
fn a_deployment_lost_to_an_ordered_stop_fails_nothing() {
    let config = config();
    let sp = &config.saltpeter;
    let base = Instant::now();
    let (mut fleet, _) = known(&config, vec![], "h1");
    let _ = fleet.need(&config, &names(&["a"]), PATH, base);
    let out = fleet.deployed(
        up(sp, false, true),
        PATH.to_string(),
        names(&["a"]),
        Err(broken("blocking stopped")),
        at(base, 1),
    );
    assert!(said(out).is_empty());
    let (need, _) = fleet.need(&config, &names(&["a"]), PATH, base);
    assert!(matches!(need, Need::Wait), "still in flight");
    assert!(fleet.busy());
}

#[test]
fn with_the_operators_wrapper_source_any_build_is_current_and_none_is_this_one() {
    let mut config = config();
    config.saltpeter.wrapper_source = Some("salt://wrapper".to_string());
    let sp = config.saltpeter.clone();
    let base = Instant::now();
    let mut fleet = Fleet::default();
    assert_eq!(said(fleet.start(&config)), ["db Wrappers (tell, Soon)"]);
    let rows = vec![row("a", "theirs", 1)];
    let _ = fleet.loaded(
        up(&sp, false, false),
        Ok(DbReply::Wrappers(rows)),
        at(base, 0),
    );
    let (need, out) = fleet.need(&config, &names(&["a", "b"]), PATH, base);
    assert!(matches!(need, Need::Wait));
    assert_eq!(said(out), [format!("blocking deploy [\"b\"] at {PATH}")]);
    let out = fleet.deployed(
        up(&sp, false, false),
        PATH.to_string(),
        names(&["b"]),
        deployed(vec![ok("b")], "ignored"),
        at(base, 1),
    );
    assert_eq!(said(out).len(), 3);
    assert_eq!(fleet.this_build(), None);
    assert_eq!(fleet.build_of("b", PATH), Some(""));
}

#[test]
fn a_hello_is_written_back_when_new_or_an_hour_old() {
    let base = Instant::now();
    let mut fleet = Fleet::default();
    let build = |sha: &str| WrapperBuild {
        path: PATH.to_string(),
        sha256: sha.to_string(),
    };
    let out = fleet.hello("a", build("h1"), at(base, 0));
    assert_eq!(said(out).len(), 1);
    assert!(said(fleet.hello("a", build("h1"), at(base, 60))).is_empty());
    assert_eq!(
        fleet.status()[0].seen,
        at(base, 60).wall,
        "seen, not written"
    );
    assert_eq!(said(fleet.hello("a", build("h2"), at(base, 61))).len(), 1);
    assert_eq!(fleet.build_of("a", PATH), Some("h2"));
    assert!(said(fleet.hello("a", build("h2"), at(base, 3600))).is_empty());
    assert_eq!(said(fleet.hello("a", build("h2"), at(base, 3661))).len(), 1);
}

#[test]
fn a_missing_wrapper_is_forgotten_once() {
    let mut fleet = Fleet::default();
    assert!(said(fleet.missing("a", PATH)).is_empty());
    let build = WrapperBuild {
        path: PATH.to_string(),
        sha256: "h1".to_string(),
    };
    let _ = fleet.hello("a", build, at(Instant::now(), 0));
    assert_eq!(
        said(fleet.missing("a", PATH)),
        [format!(
            "db ForgetWrapper {{ minion: \"a\", path: \"{PATH}\" }} (write a missing wrapper, Soon)"
        )]
    );
    assert_eq!(fleet.build_of("a", PATH), None);
    assert!(said(fleet.missing("a", PATH)).is_empty());
}

#[test]
fn a_deployment_on_demand_resolves_deploys_records_and_answers() {
    let config = config();
    let sp = &config.saltpeter;
    let (out_lines, mut tells) = said_and_replies(on_demand::start(sp, 7, None));
    assert_eq!(out_lines, ["blocking resolve * Glob cache false"]);
    let Some(tell) = tells.pop() else {
        panic!("no resolution")
    };
    let resolution = Resolution {
        live: names(&["a", "b"]),
        unreachable: vec![("c".to_string(), "no answer".to_string())],
        no_match: false,
        from_cache: false,
    };
    let Message::WrapperTargetResolved {
        call,
        target,
        path,
        result,
    } = tell(Ok(BlockingReply::Resolved(resolution)))
    else {
        panic!("not the resolution's message")
    };
    assert_eq!((call, target.as_str()), (7, "*"));
    assert_eq!(path, default_wrapper_path(sp));
    let (out_lines, mut tells) =
        said_and_replies(on_demand::resolved(sp, call, target, path, result));
    assert_eq!(
        out_lines,
        [format!("blocking deploy [\"a\", \"b\"] at {PATH}")]
    );
    let Some(tell) = tells.pop() else {
        panic!("no deployment")
    };
    let Message::WrapperDeployedOnDemand {
        call,
        path,
        lines,
        result,
    } = tell(deployed(vec![ok("a"), failed("b", "full", false)], "h3"))
    else {
        panic!("not the deployment's message")
    };
    let mut fleet = Fleet::default();
    let now = at(Instant::now(), 0);
    let out = fleet.deployed_on_demand(up(sp, false, false), call, path, lines, result, now);
    let text = format!("c: unreachable: no answer\na: ok ({PATH})\nb: failed: full");
    assert_eq!(
        said(out),
        [
            format!(
                "db record a {PATH} h3 {} (write a minion's wrapper build, By({}))",
                now.wall,
                now.wall + RECORD_WITHIN_MS
            ),
            format!("answer 7: Done({text:?})"),
        ]
    );
    assert_eq!(fleet.this_build(), Some("h3"));
    assert_eq!(fleet.build_of("a", PATH), Some("h3"));
}

#[test]
fn a_deployment_on_demand_answers_what_went_wrong() {
    let config = config();
    let sp = &config.saltpeter;
    let out = on_demand::resolved(sp, 3, "web*".into(), PATH.into(), Err(broken("x")));
    assert_eq!(
        said(out),
        [format!(
            "answer 3: Failure(Internal({:?}))",
            format!(
                "Failed({:?})",
                format!("target resolution failed: {}", broken("x"))
            )
        )]
    );
    let nobody = Resolution {
        live: vec![],
        unreachable: vec![],
        no_match: true,
        from_cache: false,
    };
    let out = on_demand::resolved(
        sp,
        4,
        "web*".into(),
        PATH.into(),
        Ok(BlockingReply::Resolved(nobody)),
    );
    assert_eq!(said(out), ["answer 4: Done(\"no minions matched web*\")"]);
    let mut fleet = Fleet::default();
    let out = fleet.deployed_on_demand(
        up(sp, false, false),
        5,
        PATH.into(),
        vec![],
        Err(broken("y")),
        at(Instant::now(), 0),
    );
    assert_eq!(
        said(out),
        [format!(
            "answer 5: Failure(Internal({:?}))",
            format!(
                "Failed({:?})",
                format!("deployment failed: {}", broken("y"))
            )
        )]
    );
}

#[test]
fn long_lists_of_minions_are_cut_for_the_log() {
    assert_eq!(deploy::some_names(&names(&["a", "b"])), "a, b");
    let many: Vec<String> = (0..12).map(|i| format!("m{i}")).collect();
    assert_eq!(deploy::some_names(&many), "m0, m1, m2, m3, m4 and 7 more");
}
