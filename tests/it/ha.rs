//! Several servers on one PostgreSQL database (docs/ha.md), with a throwaway cluster
//! (`tests/support/pg_cluster.rs`; without PostgreSQL they fail, unless `SALTPETER_TEST_SKIP`
//! names `postgres`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::pg_cluster::{self, PgCluster};
use crate::util::*;

/// 60 numbered lines over about 6 s, then exit 3.
pub const COUNTER: &str = "for i in $(seq 1 60); do echo line-$i; sleep 0.1; done; exit 3";

pub fn expected_counter() -> String {
    (1..=60).map(|i| format!("line-{i}\n")).collect()
}

/// A daemon on the database `url`, named `name`, whose wrapper port is `port`; wrappers
/// are told every port of `ports`.
pub fn server(url: &str, name: &str, port: u16, ports: &[u16], jobs: &str) -> Daemon {
    server_with(url, name, port, ports, jobs, "")
}

/// As [`server`], with `extra` lines (indented keys) added to its `saltpeter_config`.
pub fn server_with(
    url: &str,
    name: &str,
    port: u16,
    ports: &[u16],
    jobs: &str,
    extra: &str,
) -> Daemon {
    let mut d = server_prepared(url, name, port, ports, jobs, extra);
    d.spawn();
    d.wait_ready();
    d
}

/// As [`server_with`], prepared but not started (for a start without the database).
pub fn server_prepared(
    url: &str,
    name: &str,
    port: u16,
    ports: &[u16],
    jobs: &str,
    extra: &str,
) -> Daemon {
    let servers: Vec<String> = ports
        .iter()
        .map(|p| format!("ws://127.0.0.1:{p}"))
        .collect();
    // A short grace keeps takeover tests quick; `extra` may set its own.
    let grace = if extra.contains("recovery_grace:") {
        String::new()
    } else {
        "  recovery_grace: 10\n".to_string()
    };
    let ha = format!(
        "saltpeter_config:\n  machines_ws_port: {port}\n  database_url: '{url}'\n  \
         server_name: {name}\n  servers: [{}]\n{grace}  api_ws: true\n  \
         api_ws_port: 0\n  api_token: {}\n{extra}",
        servers.join(", "),
        crate::api::TOKEN
    );
    Daemon::prepare(&[
        ("01-fast.yaml", FAST),
        ("02-ha.yaml", &ha),
        ("jobs.yaml", jobs),
    ])
}

/// Two servers on `url` with `jobs`: "alpha" (with `extra_a` in its `saltpeter_config`)
/// once it leads, then "beta" (with `extra_b`) once it is the standby.
pub fn leader_and_standby(url: &str, jobs: &str, extra_a: &str, extra_b: &str) -> (Daemon, Daemon) {
    let (pa, pb) = (free_port(), free_port());
    let a = server_with(url, "alpha", pa, &[pa, pb], jobs, extra_a);
    wait_role(&a, "leader");
    let b = server_with(url, "beta", pb, &[pa, pb], jobs, extra_b);
    wait_role(&b, "standby");
    (a, b)
}

pub fn ha_role(d: &Daemon) -> Option<(String, Option<String>)> {
    let out = d.ctl(&["--json", "status"]);
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    let ha = &v["ha"];
    Some((
        ha["role"].as_str()?.to_string(),
        ha["leader"].as_str().map(str::to_string),
    ))
}

pub fn wait_role(d: &Daemon, role: &str) -> Duration {
    let start = Instant::now();
    wait_until(&format!("role {role}"), HANG, || {
        ha_role(d).filter(|(r, _)| r == role).map(|_| ())
    });
    start.elapsed()
}

/// Every process of the daemon, SIGKILLed at once (a dead machine); waits until gone.
pub fn kill_9(d: &mut Daemon) {
    let procs = d.processes();
    for (_, pid) in &procs {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), Signal::SIGKILL);
    }
    let _ = d.wait_exit();
    for (_, pid) in &procs {
        wait_until("daemon process gone", HANG, || (!alive(*pid)).then_some(()));
    }
}

#[test]
fn a_daemon_on_postgresql_runs_jobs_and_says_it_leads() {
    let Some(url) = pg_cluster::fresh_database() else {
        return;
    };
    let port = free_port();
    let d = server(
        &url,
        "solo",
        port,
        &[port],
        "hello:\n  schedule: '@yearly'\n  targets: [m1]\n  command: 'echo hello from pg'\n",
    );
    wait_role(&d, "leader");
    let (run, code) = d.run_wait("hello");
    assert_eq!(code, 0, "{run}\n{}", d.log_text());
    let id = run["id"].as_u64().expect("run id");
    assert_eq!(d.output(id, "m1"), "hello from pg\n");
    let status = d.ctl_json(&["status"]);
    assert_eq!(status["ha"]["server"], "solo");
    assert_eq!(status["ha"]["leader"], "solo");
    let out = d.ctl(&["status"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("server solo is leader; leader: solo"),
        "{text}"
    );
    // The shared secret is in the database and nowhere in the log (the daemon logs at
    // debug level here; the PostgreSQL client's statement lines are kept out).
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("admin connection");
    let secret: String = admin
        .query_one("SELECT value FROM meta WHERE key = 'server_secret'", &[])
        .expect("the shared secret")
        .get(0);
    assert_eq!(secret.len(), 64);
    let log = d.log_text();
    assert!(!log.contains(&secret), "the shared secret is in the log");
    assert!(
        !log.contains("executing statement"),
        "statement parameters in the log"
    );
    let api_port = status["api_port"].as_u64().expect("api_port") as u16;
    let metrics = crate::api::get(api_port, "/metrics").text();
    assert!(
        metrics.contains("saltpeter_ha_leader{server=\"solo\",role=\"leader\"} 1"),
        "{metrics}"
    );
}

/// A database that cannot be reached at start (its socket directory does not exist: the
/// server is not up yet) is waited for, named without its password; a stop while
/// waiting is prompt. (One that answers and refuses is exit 2: `pg_tls.rs`.)
#[test]
fn an_unreachable_database_at_start_is_waited_for_without_the_password() {
    let mut d = Daemon::prepare(&[(
        "02-db.yaml",
        "saltpeter_config:\n  database_url: 'postgres://sp:hunter2@%2Fnonexistent-sp-dir/sp'\n",
    )]);
    d.spawn();
    wait_until("db to wait for its database", HANG, || {
        d.log_text().contains("waiting for it").then_some(())
    });
    assert!(d.try_status().is_none(), "exited: {}", d.log_text());
    let asked = Instant::now();
    d.signal(Signal::SIGTERM);
    let status = d.wait_exit();
    let took = asked.elapsed();
    let log = d.log_text();
    // Well under the 10 s of grace an orderly stop of a ready db may take.
    assert!(
        took < Duration::from_secs(5),
        "took {took:?} to stop:\n{log}"
    );
    assert!(
        log.contains("db was not ready yet; sending SIGTERM"),
        "{log}"
    );
    assert!(status.code().is_some(), "{status}\n{log}");
    assert!(log.contains("could not connect to the database"), "{log}");
    assert!(log.contains("postgres://sp:***@"), "{log}");
    assert!(!log.contains("hunter2"), "the password leaked: {log}");
}

#[test]
fn a_database_url_that_is_not_postgresql_is_a_configuration_error() {
    // A configuration error: the daemon runs (on SQLite) and says what is wrong.
    let d = Daemon::start(&[(
        "02-db.yaml",
        "saltpeter_config:\n  database_url: 'mysql://u:secretpw@h/db'\n",
    )]);
    let status = d.ctl_json(&["status"]);
    let errors = status["config_errors"].to_string();
    assert!(errors.contains("database_url"), "{status}");
    assert!(errors.contains("02-db.yaml"), "names the file: {status}");
    assert!(
        !errors.contains("secretpw"),
        "the password leaked: {status}"
    );
    assert!(!d.log_text().contains("secretpw"), "the password leaked");
}

/// The slots of `runs` (scheduled runs only) in unix milliseconds, one per run.
pub fn slots(runs: &[Value]) -> Vec<i64> {
    runs.iter()
        .filter_map(|r| r["slot"].as_str())
        .filter_map(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.timestamp_millis())
        .collect()
}

#[test]
fn kill_9_of_the_leader_mid_run_the_standby_takes_over_and_the_run_completes_whole() {
    let Some(url) = pg_cluster::fresh_database() else {
        return;
    };
    let (pa, pb) = (free_port(), free_port());
    let jobs = format!(
        "counter:\n  schedule: '@yearly'\n  targets: [ha1]\n  command: '{COUNTER}'\n\
         tick:\n  schedule: '*/2 * * * * *'\n  targets: [tick1]\n  command: 'true'\n  \
         overlap: allow\n"
    );
    let mut a = server(&url, "alpha", pa, &[pa, pb], &jobs);
    wait_role(&a, "leader");
    let b = server(&url, "beta", pb, &[pa, pb], &jobs);
    wait_role(&b, "standby");
    wait_until("the standby to know the leader", HANG, || {
        (ha_role(&b).and_then(|(_, l)| l).as_deref() == Some("alpha")).then_some(())
    });
    // A standby refuses what only the leader may do.
    let refused = b.ctl(&["run", "counter"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("standby"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let id = a.run_now("counter");
    wait_until("some output", HANG, || {
        a.output(id, "ha1").contains("line-10\n").then_some(())
    });
    // The standby serves the run and its output from the shared database.
    assert!(b.output(id, "ha1").contains("line-10\n"));
    assert_eq!(b.run_record(id)["state"], "running");
    kill_9(&mut a);
    let killed = Instant::now();
    wait_role(&b, "leader");
    eprintln!("takeover after {:?}", killed.elapsed());

    let run = b.wait_run_final(id);
    let t = target(&run, "ha1");
    assert_eq!(t["exit_code"], 3, "{run}\n{}", b.log_text());
    assert_eq!(t["reason"], "exit");
    assert_eq!(b.output(id, "ha1"), expected_counter(), "{}", b.log_text());

    // The tick job: every slot once, those missed during the takeover recorded as
    // skipped (its `missed: skip` policy), none twice.
    std::thread::sleep(Duration::from_secs(5));
    let runs = b.runs("tick");
    let mut all = slots(&runs);
    let count = all.len();
    all.sort();
    let unique: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(unique.len(), count, "a slot recorded twice: {runs:?}");
    let (first, last) = (all[0], all[count - 1]);
    let expected: BTreeSet<i64> = (0..)
        .map(|i| first + i * 2000)
        .take_while(|s| *s <= last)
        .collect();
    assert_eq!(unique, expected, "a slot lost: {runs:?}");
}

#[test]
fn slots_missed_before_a_server_takes_over_follow_the_missed_policy() {
    let Some(url) = pg_cluster::fresh_database() else {
        return;
    };
    let (pa, pb) = (free_port(), free_port());
    let jobs = "tick:\n  schedule: '*/2 * * * * *'\n  targets: [tick2]\n  command: 'true'\n  overlap: allow\n";
    let mut a = server(&url, "alpha", pa, &[pa, pb], jobs);
    wait_role(&a, "leader");
    wait_until("a tick", HANG, || {
        (!a.runs("tick").is_empty()).then_some(())
    });
    kill_9(&mut a);
    // Nobody leads for a while: the slots meanwhile are missed.
    std::thread::sleep(Duration::from_secs(5));
    let b = server(&url, "beta", pb, &[pa, pb], jobs);
    wait_role(&b, "leader");
    std::thread::sleep(Duration::from_secs(3));
    let runs = b.runs("tick");
    let mut all = slots(&runs);
    all.sort();
    let unique: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "a slot recorded twice: {runs:?}");
    let expected: BTreeSet<i64> = (0..)
        .map(|i| all[0] + i * 2000)
        .take_while(|s| s <= all.last().unwrap())
        .collect();
    assert_eq!(unique, expected, "a slot lost: {runs:?}");
    let skipped: Vec<&Value> = runs.iter().filter(|r| r["state"] == "skipped").collect();
    assert!(
        skipped.len() >= 2,
        "the slots nobody led were not recorded: {runs:?}"
    );
    assert!(
        skipped.iter().all(|r| r["reason"]
            .as_str()
            .is_some_and(|why| why.starts_with("missed"))),
        "{skipped:?}"
    );
}

#[test]
fn the_database_lost_mid_run_holds_new_runs_and_nothing_is_lost_when_it_returns() {
    let Some(cluster) = pg_cluster::private_cluster() else {
        return;
    };
    let url = cluster.fresh_database();
    let port = free_port();
    let jobs =
        format!("counter:\n  schedule: '@yearly'\n  targets: [lost1]\n  command: '{COUNTER}'\n");
    let d = server(&url, "solo", port, &[port], &jobs);
    wait_role(&d, "leader");
    let id = d.run_now("counter");
    wait_until("some output", HANG, || {
        d.output(id, "lost1").contains("line-5\n").then_some(())
    });
    cluster.stop_immediately();
    wait_role(&d, "unconfirmed");
    // No new run while the database is away.
    let refused = d.ctl(&["run", "counter"]);
    assert!(
        !refused.status.success(),
        "a run started without the database"
    );
    std::thread::sleep(Duration::from_secs(3));
    restart(&cluster);
    wait_role(&d, "leader");
    let run = wait_final_or_log(&d, id);
    let t = target(&run, "lost1");
    assert_eq!(t["exit_code"], 3, "{run}\n{}", d.log_text());
    assert_eq!(
        d.output(id, "lost1"),
        expected_counter(),
        "{}",
        d.log_text()
    );
    let (after, code) = d.run_wait("counter");
    assert_eq!(code, 1, "the next run works again: {after}");
}

fn wait_final_or_log(d: &Daemon, id: u64) -> Value {
    let start = Instant::now();
    loop {
        let run = d.run_record(id);
        if is_final(&run) {
            return run;
        }
        assert!(
            start.elapsed() < HANG,
            "run {id} did not finish: {run}\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn restart(cluster: &PgCluster) {
    cluster.start_again();
}

/// A leader whose sessions the database ended (as after a network partition) while the
/// standby took the lease stops, rather than lead next to it.
#[test]
fn a_leader_whose_lease_another_took_meanwhile_stops() {
    let Some(url) = pg_cluster::fresh_database() else {
        return;
    };
    let (pa, pb) = (free_port(), free_port());
    let jobs = "tick:\n  schedule: '*/2 * * * * *'\n  targets: [split1]\n  command: 'true'\n";
    let mut a = server(&url, "alpha", pa, &[pa, pb], jobs);
    wait_role(&a, "leader");
    let b = server(&url, "beta", pb, &[pa, pb], jobs);
    wait_role(&b, "standby");
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("admin connection");
    // End alpha's sessions until beta got the lease first.
    wait_until("beta to lead", HANG, || {
        let _ = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = 'saltpeter-db alpha'",
            &[],
        );
        std::thread::sleep(Duration::from_millis(100));
        ha_role(&b).filter(|(r, _)| r == "leader").map(|_| ())
    });
    let status = a.wait_exit();
    assert_eq!(status.code(), Some(1), "{}", a.log_text());
    assert!(
        a.log_text()
            .contains("took the leader lease while alpha could not confirm it"),
        "{}",
        a.log_text()
    );
    // beta runs the schedule alone.
    let before = b.runs("tick").len();
    wait_until("beta to fire", HANG, || {
        (b.runs("tick").len() > before).then_some(())
    });
}

/// A run the database has in flight that the leader never learned of (its recording's
/// COMMIT applied, the answer lost): the leader's sweep adopts it within two sweeps, as
/// a takeover would, instead of leaving it `dispatching` until the next takeover.
#[test]
fn a_run_recorded_behind_the_leaders_back_is_adopted_without_a_takeover() {
    let Some(url) = pg_cluster::fresh_database() else {
        return;
    };
    let port = free_port();
    let jobs = "orphan:\n  schedule: '@yearly'\n  targets: [lost1]\n  command: 'true'\n\
                warmup:\n  schedule: '@yearly'\n  targets: [warm1]\n  command: 'true'\n";
    let d = server(&url, "solo", port, &[port], jobs);
    wait_role(&d, "leader");
    // Past its start-up (which adopts whatever is in flight): a run goes through.
    d.run_wait("warmup");
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("admin connection");
    let now = chrono::Utc::now().timestamp_millis();
    let id: i64 = admin
        .query_one(
            "INSERT INTO runs (job, slot, trigger, state, reason, created) \
             VALUES ('orphan', NULL, 'manual', 'dispatching', NULL, $1) RETURNING id",
            &[&now],
        )
        .expect("a run behind the leader's back")
        .get(0);
    admin
        .execute(
            "INSERT INTO targets (run_id, machine, state) VALUES ($1, 'lost1', 'pending')",
            &[&id],
        )
        .expect("its target");
    let started = Instant::now();
    let run = wait_until("the orphan settled", Duration::from_secs(150), || {
        let r = d.run_record(id as u64);
        is_final(&r).then_some(r)
    });
    eprintln!(
        "settled {:?} after it was written: {run}",
        started.elapsed()
    );
    assert_ne!(run["state"], "dispatching");
    let events = d.ctl_json(&["events", "--kind", "run_orphan_adopted"]);
    assert!(events.to_string().contains("adopted"), "{events:#}");
}
