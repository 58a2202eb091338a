//! A configuration directory with 200,000 errors (100,000 invalid jobs in one file, one
//! job with 100,000 bad `notify` rules in another): `/api/v1/jobs`, `saltpeterctl jobs`
//! and the `/ws` config push answer at once, small, with the count of what they leave
//! out; the daemon's log holds a bounded number of lines for them (docs/security.md,
//! "Limits on what a peer can make the server write").

use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;

/// 100,000 jobs that are not mappings (one error each).
fn many_invalid_jobs() -> String {
    (0..100_000).map(|n| format!("j{n:06}: 0\n")).collect()
}

/// One job with 100,000 errors (each rule of `notify` is not a mapping).
fn one_job_with_many_errors() -> String {
    format!(
        "big: {{schedule: '@daily', command: 'true', targets: a, notify: [{}]}}\n",
        vec!["1"; 100_000].join(",")
    )
}

/// A request's answer and how long it took.
fn timed_get(port: u16, path: &str) -> (Resp, Duration) {
    let started = Instant::now();
    let resp = get(port, path);
    (resp, started.elapsed())
}

/// Well under the hub's 30 s wait for main, and what an unbounded answer took here
/// (14 s for 100,000 invalid jobs, a 504 for 200,000).
const PROMPT: Duration = Duration::from_secs(5);
/// An answer within the bounds: 20 entries of a file, 100 in all, each cut to 1 KiB.
const SMALL: usize = 256 << 10;

#[test]
fn two_hundred_thousand_config_errors_keep_every_answer_prompt_and_small() {
    let d = Daemon::start(&[
        ("01-api.yaml", &api_config("")),
        ("many.yaml", &many_invalid_jobs()),
        ("one.yaml", &one_job_with_many_errors()),
    ]);
    // The ports reach main with the process table, just after READY=1.
    let port = wait_until("the API port", HANG, || {
        d.ctl_json(&["status"])["api_port"]
            .as_u64()
            .filter(|p| *p != 0)
    }) as u16;

    // The list: every valid job, 20 invalid ones of each file, and the count of the rest.
    let (jobs, took) = timed_get(port, "/api/v1/jobs");
    assert_eq!(jobs.status, 200, "{}", jobs.text());
    assert!(took < PROMPT, "/api/v1/jobs took {took:?}");
    assert!(jobs.body.len() < SMALL, "{} bytes", jobs.body.len());
    let listed = jobs.json();
    let listed = listed.as_array().expect("an array");
    assert_eq!(listed.len(), 21, "20 of many.yaml and big");
    assert_eq!(
        jobs.header("X-Saltpeter-Invalid-Jobs-Omitted"),
        Some("99980")
    );
    let big = listed
        .iter()
        .find(|j| j["name"] == "big")
        .expect("big listed");
    let line = big["error"].as_str().expect("its error");
    assert!(line.ends_with("; … and 99997 more"), "{line}");

    // The errors: 20 of each file, then what was left out.
    let (errors, took) = timed_get(port, "/api/v1/config/errors");
    assert_eq!(errors.status, 200);
    assert!(took < PROMPT, "/api/v1/config/errors took {took:?}");
    let errors: Vec<String> =
        serde_json::from_value(errors.json()["errors"].clone()).expect("a list of errors");
    assert_eq!(errors.len(), 42, "{errors:#?}");
    assert!(errors[40].contains("… and 199960 more configuration error(s)"));
    assert!(errors[41].contains("99980 more invalid job(s) are not listed"));

    // A job's detail: its first 100 errors and the count of the rest.
    let (detail, took) = timed_get(port, "/api/v1/jobs/big");
    assert_eq!(detail.status, 200);
    assert!(took < PROMPT && detail.body.len() < SMALL, "{took:?}");
    let shown = d.ctl_json(&["show", "big"])["errors"].clone();
    let shown = shown.as_array().expect("errors");
    assert_eq!(shown.len(), 101);
    assert!(
        shown[100]
            .as_str()
            .is_some_and(|s| s.contains("99900 more configuration error(s) of job big")),
        "{:?}",
        shown[100]
    );
    let metrics = get(port, "/metrics").text();
    assert!(
        metrics
            .lines()
            .any(|l| l == "saltpeter_config_errors 200000")
    );

    // saltpeterctl jobs: the same list, and a line with the count.
    let started = Instant::now();
    let out = d.ctl(&["jobs"]);
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(took < PROMPT && out.stdout.len() < SMALL, "{took:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("99980 more invalid job(s) not listed"),
        "{text}"
    );

    // /ws: the config message arrives first, small, with the count in its errors.
    let started = Instant::now();
    let mut ws = ws_connect(port);
    let config = next_msg(&mut ws).expect("the config message");
    assert_eq!(config["type"], "config", "{config}");
    assert!(started.elapsed() < PROMPT);
    assert!(config.to_string().len() < SMALL);
    assert_eq!(
        config["config"]["crons"].as_object().map(|c| c.len()),
        Some(21)
    );
    let pushed: Vec<String> =
        serde_json::from_value(config["config"]["errors"].clone()).expect("errors");
    assert_eq!(pushed, errors);

    // The log: at most 20 lines of a file and 100 in all, and one counting the rest.
    let log = d.log_text();
    let logged = log.lines().filter(|l| l.contains("must be a")).count();
    assert_eq!(logged, 40, "{}", d.log_tail(50));
    assert!(log.contains("… and 199960 more configuration problem(s) not logged"));
    assert!(log.len() < 64 << 10, "log of {} bytes", log.len());

    // A reload that adds 1,000 more: answered, and its new errors are logged bounded.
    let more: String = (0..1_000).map(|n| format!("k{n:04}: 0\n")).collect();
    // Written whole under a name the daemon skips, then renamed: the watch's own reload
    // never sees half of it.
    d.write_config(".more.yaml", &more);
    std::fs::rename(
        d.config_dir().join(".more.yaml"),
        d.config_dir().join("more.yaml"),
    )
    .expect("rename");
    let reload = d.ctl(&["reload"]);
    assert!(
        reload.status.success(),
        "{}",
        String::from_utf8_lossy(&reload.stderr)
    );
    let (jobs, took) = timed_get(port, "/api/v1/jobs");
    assert!(took < PROMPT && jobs.body.len() < SMALL, "{took:?}");
    assert_eq!(
        jobs.header("X-Saltpeter-Invalid-Jobs-Omitted"),
        Some("100960")
    );
    let log = d.log_text();
    assert!(log.contains("… and 980 more configuration problem(s) not logged"));
    assert!(log.len() < 64 << 10, "log of {} bytes", log.len());
    let status: Value = d.ctl_json(&["status"]);
    assert_eq!(
        status["config_errors"].as_array().map(Vec::len),
        Some(62),
        "20 of each of three files, a count, the jobs not listed: {status}"
    );
}
