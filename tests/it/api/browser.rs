//! The dashboard in a real browser: headless Chromium driven through chromedriver's
//! WebDriver HTTP API. Log in, see the jobs, open one, press "Run now", watch its output
//! stream in, kill a run; pause, resume and skip a job and see the maintenance windows
//! listed. A screenshot of the jobs table is saved to
//! `target/dashboard.png` (and of the job and maintenance pages next to it; to `docs/` with
//! `SALTPETER_UPDATE_SCREENSHOT=1`).
//!
//! Without chromium or chromedriver the tests fail, unless `SALTPETER_TEST_SKIP` names
//! `browser`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::client::{Resp, base64_decode, request};
use super::*;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The WebDriver element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

struct Driver {
    child: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = request(
            self.port,
            "DELETE",
            &format!("/session/{}", self.session),
            &[],
            b"",
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wd(port: u16, method: &str, path: &str, body: Option<Value>) -> Resp {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let headers: &[(&str, &str)] = &[("Content-Type", "application/json")];
    request(port, method, path, headers, body.as_bytes())
}

impl Driver {
    fn start() -> Option<Driver> {
        if !crate::components::present_or_skipped(
            "browser",
            || Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists(),
            &format!("{CHROMIUM} or {CHROMEDRIVER} is missing (Debian: chromium chromium-driver)"),
        ) {
            return None;
        }
        let port = free_port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let profile = tempfile::tempdir().expect("profile dir");
        let mut driver = Driver {
            child,
            port,
            session: String::new(),
            _profile: profile,
        };
        wait_until("chromedriver", HANG, || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .and_then(|_| {
                    let r = wd(port, "GET", "/status", None);
                    (r.json()["value"]["ready"] == true).then_some(())
                })
        });
        let profile_arg = format!("--user-data-dir={}", driver._profile.path().display());
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--no-first-run", "--window-size=1280,900",
                // The TLS test's daemon serves its self-signed certificate.
                "--ignore-certificate-errors",
                profile_arg,
            ]},
        }}});
        let created = wd(port, "POST", "/session", Some(caps));
        assert_eq!(created.status, 200, "new session: {}", created.text());
        driver.session = created.json()["value"]["sessionId"]
            .as_str()
            .expect("session id")
            .to_string();
        Some(driver)
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let r = wd(
            self.port,
            method,
            &format!("/session/{}{path}", self.session),
            body,
        );
        assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
        r.json()["value"].clone()
    }

    fn go(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    /// Run a script in the page; returns its value.
    fn js(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    fn find(&self, css: &str) -> Option<String> {
        let r = wd(
            self.port,
            "POST",
            &format!("/session/{}/element", self.session),
            Some(json!({"using": "css selector", "value": css})),
        );
        (r.status == 200).then(|| {
            r.json()["value"][ELEMENT]
                .as_str()
                .expect("element id")
                .to_string()
        })
    }

    fn wait_for(&self, css: &str) -> String {
        wait_until(&format!("element {css}"), HANG, || self.find(css))
    }

    fn click(&self, css: &str) {
        let id = self.wait_for(css);
        self.call("POST", &format!("/element/{id}/click"), Some(json!({})));
    }

    fn type_into(&self, css: &str, text: &str) {
        let id = self.wait_for(css);
        self.call(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        );
    }

    /// Wait until `script` (an expression) is truthy in the page.
    fn wait_js(&self, what: &str, expr: &str) -> Value {
        let start = Instant::now();
        loop {
            let v = self.js(&format!("return {expr};"));
            if !v.is_null() && v != false && v != "" {
                return v;
            }
            assert!(start.elapsed() < HANG, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn screenshot(&self, path: &Path) {
        let png = base64_decode(self.call("GET", "/screenshot", None).as_str().expect("png"));
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::write(path, png).expect("write screenshot");
    }
}

fn output_of(machine: &str) -> String {
    format!("document.querySelector('pre.output[data-machine=\"{machine}\"]')?.textContent")
}

#[test]
fn browser_dashboard_runs_and_kills_a_job() {
    let jobs = "ticker:\n  schedule: '*/10 * * * *'\n  targets: [br1]\n  \
         command: 'for i in $(seq 1 6); do echo \"tick $i\"; sleep 0.4; done'\n  \
         env:\n    API_KEY: hunter2-never-shown\n\
         sleeper:\n  schedule: '@daily'\n  targets: [br2]\n  \
         command: 'echo going to sleep; sleep 120'\n  kill_grace: 1\n\
         nightly_backup:\n  schedule: '30 2 * * *'\n  targets: [br3]\n  command: 'true'\n";
    // A fixed API port, so that the page can reconnect after a restart.
    let config = api_config("").replace("api_ws_port: 0", &format!("api_ws_port: {}", free_port()));
    let (mut d, port) = start_with(&config, jobs);
    let Some(driver) = Driver::start() else {
        return;
    };
    let base = format!("http://127.0.0.1:{port}/");
    driver.go(&base);

    // Log in with the token.
    driver.type_into("#login-token", TOKEN);
    driver.click("#login-submit");
    driver.wait_for("tr[data-job=\"ticker\"]");
    driver.wait_for("tr[data-job=\"nightly_backup\"]");
    driver.wait_js(
        "the live connection",
        "document.querySelector('#conn').textContent === 'live'",
    );
    assert!(
        !driver
            .js("return document.body.innerHTML;")
            .to_string()
            .contains(SECRET),
        "no secret in the page"
    );

    // Open a job and run it: its output streams in while it runs.
    driver.click("tr[data-job=\"ticker\"]");
    driver.wait_js(
        "the details page",
        "document.querySelector('#job-name').textContent === 'ticker'",
    );
    driver.click("#run-now");
    driver.wait_js(
        "the first ticks",
        &format!("({})?.includes('tick 2')", output_of("br1")),
    );
    let status = driver.js("return document.querySelector('#job-status').textContent;");
    assert_eq!(status, "Running", "output arrives while the job runs");
    driver.wait_js(
        "all ticks",
        &format!("({})?.includes('tick 6')", output_of("br1")),
    );
    driver.wait_js(
        "the success badge",
        "document.querySelector('#job-status').textContent === 'Success'",
    );
    assert_eq!(
        driver.js(&format!("return {};", output_of("br1"))),
        "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\ntick 6\n"
    );
    driver.wait_js(
        "the run in the history",
        "document.querySelector('#job-history tbody tr') !== null",
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let update_docs = std::env::var("SALTPETER_UPDATE_SCREENSHOT").is_ok();
    driver.screenshot(&root.join("target/dashboard-job.png"));
    if update_docs {
        driver.screenshot(&root.join("docs/dashboard-job.png"));
    }

    // Another job: run it, then kill it from the page.
    driver.go(&format!("{base}#/job/sleeper"));
    driver.wait_js(
        "the sleeper page",
        "document.querySelector('#job-name').textContent === 'sleeper'",
    );
    driver.click("#run-now");
    driver.wait_js(
        "it runs",
        &format!("({})?.includes('going to sleep')", output_of("br2")),
    );
    // Suspend and resume its target, suspend the run, then kill it while suspended.
    let facts = "document.querySelector('.target[data-machine=\"br2\"] .facts')?.textContent";
    let sus = ".target[data-machine=\"br2\"] .suspend-machine";
    driver.wait_js(
        "the suspend button",
        &format!("!document.querySelector('{sus}').disabled"),
    );
    driver.click(sus);
    driver.wait_js("suspended", &format!("({facts})?.startsWith('suspended')"));
    driver.wait_js(
        "resume run enabled",
        "!document.querySelector('#resume-run').disabled",
    );
    driver.click(sus);
    driver.wait_js(
        "running again",
        &format!("({facts})?.startsWith('running')"),
    );
    driver.wait_js(
        "suspend run enabled",
        "!document.querySelector('#suspend-run').disabled",
    );
    driver.click("#suspend-run");
    driver.wait_js(
        "suspended again",
        &format!("({facts})?.startsWith('suspended')"),
    );
    driver.wait_js(
        "the kill button",
        "!document.querySelector('#kill-job').disabled",
    );
    driver.click("#kill-job");
    driver.wait_js(
        "the killed target",
        "document.querySelector('.target[data-machine=\"br2\"] .facts')?.textContent.includes('exit 143')",
    );
    let runs = d.runs("sleeper");
    let run = d.wait_run_final(runs[0]["id"].as_u64().unwrap());
    assert_eq!(run["state"], "canceled", "{run}");

    // The jobs table, for the screenshot.
    driver.go(&base);
    driver.wait_for("tr[data-job=\"ticker\"]");
    driver.wait_js(
        "the table's statuses",
        "document.querySelector('tr[data-job=\"ticker\"] .badge').textContent === 'Success'",
    );
    driver.wait_js(
        "the countdowns",
        "document.querySelector('td.next')?.textContent.includes('(in ')",
    );
    driver.screenshot(&root.join("target/dashboard.png"));
    if update_docs {
        driver.screenshot(&root.join("docs/dashboard.png"));
    }

    // A daemon restart: the page notices, reconnects by itself and is live again, without
    // a reload (the marker set in the page survives).
    driver.js("window.__before_restart = 42; return true;");
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.wait_exit();
    driver.wait_js(
        "the page to notice the restart",
        "document.querySelector('#conn').textContent !== 'live'",
    );
    d.spawn();
    d.wait_ready();
    driver.wait_js(
        "the live connection again",
        "document.querySelector('#conn').textContent === 'live'",
    );
    assert_eq!(
        driver.js("return window.__before_restart;"),
        42,
        "no reload"
    );
    driver.click("tr[data-job=\"ticker\"]");
    driver.wait_js(
        "the last run's output after the restart",
        &format!("({})?.includes('tick 6')", output_of("br1")),
    );
}

/// Job control in the page (issue 19): pause (until resumed, then until a time), resume and
/// skip-next from a job's page, the pause shown in the jobs table as the API reports it,
/// and the configured maintenance windows listed on the maintenance page. A screenshot of
/// that page is saved to `target/dashboard-maintenance.png`.
#[test]
fn browser_dashboard_pauses_resumes_skips_and_lists_windows() {
    let jobs = "nightly:\n  schedule: '@daily'\n  targets: [br1]\n  command: 'true'\n\
                weekly:\n  schedule: '@weekly'\n  targets: [br2]\n  command: 'true'\n";
    // The one-off window opens before the sixth opening of the weekly one, so that both
    // are among the next ones listed (the list is the next openings of all windows).
    let start = chrono::Utc::now() + chrono::Duration::hours(25);
    let end = start + chrono::Duration::hours(4);
    let rfc =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let shown = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    let config = format!(
        "{}saltpeter_maintenance:\n  windows:\n    \
         - name: sunday-patch\n      schedule: '0 2 * * 0'\n      duration: 2h\n      \
         timezone: Europe/Berlin\n      machines: ['db*']\n      policy: defer\n    \
         - name: migration\n      start: '{}'\n      end: '{}'\n      \
         groups: [jobs]\n      policy: skip\n",
        api_config(""),
        rfc(start),
        rfc(end),
    );
    let (d, port) = start_with(&config, jobs);
    let Some(driver) = Driver::start() else {
        return;
    };
    let base = format!("http://127.0.0.1:{port}/");
    driver.go(&base);
    driver.type_into("#login-token", TOKEN);
    driver.click("#login-submit");
    driver.wait_for("tr[data-job=\"nightly\"]");
    // Times in UTC, so that the until typed below means the same in any test machine's zone.
    driver.click("#tz-utc");
    let paused_api = || get(port, "/api/v1/jobs/nightly").json()["paused"].clone();

    // Pause from the job's page, until resumed.
    driver.go(&format!("{base}#/job/nightly"));
    driver.wait_js(
        "the nightly page",
        "document.querySelector('#job-name').textContent === 'nightly' && !document.querySelector('#pause-job').disabled",
    );
    driver.click("#pause-job");
    driver.wait_js(
        "the paused badge",
        "!document.querySelector('#job-paused').hidden && document.querySelector('#job-paused').textContent === 'Paused'",
    );
    assert!(paused_api().is_string(), "the API says paused too");

    // The jobs table shows it as paused; the other job is not.
    driver.go(&base);
    driver.wait_js(
        "the paused row",
        "document.querySelector('tr[data-job=\"nightly\"][data-paused=\"1\"] .st-Paused')?.textContent === 'Paused'",
    );
    assert_eq!(
        driver
            .js("return document.querySelector('tr[data-job=\"weekly\"]').dataset.paused ?? null;"),
        Value::Null,
        "only the paused job shows as paused"
    );

    // Resume: no longer paused, on the page, in the table and in the API.
    driver.go(&format!("{base}#/job/nightly"));
    driver.wait_js(
        "the resume button",
        "!document.querySelector('#resume-job').disabled",
    );
    driver.click("#resume-job");
    driver.wait_js(
        "the badge gone",
        "document.querySelector('#job-paused').hidden && !document.querySelector('#pause-job').disabled",
    );
    assert_eq!(paused_api(), Value::Null, "resumed in the API");
    driver.go(&base);
    driver.wait_js(
        "the row without pause",
        "document.querySelector('tr[data-job=\"nightly\"]') && !document.querySelector('tr[data-job=\"nightly\"] .st-Paused')",
    );

    // Pause until a time (read in UTC, as chosen), and skip the next slot.
    driver.go(&format!("{base}#/job/nightly"));
    driver.wait_js(
        "the pause button",
        "!document.querySelector('#pause-job').disabled",
    );
    driver.js("document.querySelector('#pause-until').value = '2099-01-02T03:04:05'; return true;");
    driver.click("#pause-job");
    driver.wait_js(
        "the pause with its end",
        "document.querySelector('#job-paused').textContent === 'Paused until 2099-01-02 03:04:05 UTC'",
    );
    let ctl = get(port, "/api/v1/jobctl").json();
    assert_eq!(ctl["jobs"][0]["job"], "nightly", "{ctl}");
    assert_eq!(ctl["jobs"][0]["until"], "2099-01-02T03:04:05Z", "{ctl}");
    driver.click("#skip-job");
    driver.wait_js(
        "the pending skip",
        "document.querySelector('#job-skips').textContent.includes('next 1 slot')",
    );
    driver.go(&base);
    driver.wait_js(
        "the table's pause and skip",
        "document.querySelector('tr[data-job=\"nightly\"] td.status')?.textContent.includes('Paused until 2099-01-02 03:04:05 UTC')",
    );
    let status = driver
        .js("return document.querySelector('tr[data-job=\"nightly\"] td.status').textContent;");
    assert!(
        status.as_str().is_some_and(|s| s.contains("skips next 1")),
        "{status}"
    );
    driver.go(&format!("{base}#/job/nightly"));
    driver.wait_js(
        "the resume button",
        "!document.querySelector('#resume-job').disabled",
    );
    driver.click("#resume-job");
    driver.wait_js(
        "pause and skips cleared",
        "document.querySelector('#job-paused').hidden && document.querySelector('#job-skips').textContent === ''",
    );
    let ctl = get(port, "/api/v1/jobctl").json();
    assert_eq!(
        ctl["jobs"],
        json!([]),
        "resume cancels the skips too: {ctl}"
    );

    // The maintenance page lists the configured windows.
    driver.go(&format!("{base}#/maintenance"));
    driver.wait_for("tr[data-window=\"sunday-patch\"]");
    driver.wait_for("tr[data-window=\"migration\"]");
    let row = |name: &str| {
        driver
            .js(&format!(
                "return [...document.querySelectorAll('tr[data-window=\"{name}\"] td')].map((td) => td.textContent);"
            ))
            .as_array()
            .expect("cells")
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    let migration = row("migration");
    assert_eq!(
        migration,
        [
            "migration",
            shown(start).as_str(),
            shown(end).as_str(),
            "whole fleet; groups jobs (UTC)",
            "skip"
        ],
        "{migration:?}"
    );
    let patch = row("sunday-patch");
    assert!(patch[3].contains("machines db*"), "{patch:?}");
    assert!(patch[3].contains("Europe/Berlin"), "{patch:?}");
    assert_eq!(patch[4], "defer", "{patch:?}");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    driver.screenshot(&root.join("target/dashboard-maintenance.png"));
    if std::env::var("SALTPETER_UPDATE_SCREENSHOT").is_ok() {
        driver.screenshot(&root.join("docs/dashboard-maintenance.png"));
    }
    drop(d);
}

/// The dashboard over https (the default TLS with the self-signed certificate): login,
/// the jobs table, the live `/ws` connection over wss, a run's output.
#[test]
fn browser_dashboard_over_https() {
    let jobs =
        "hello_tls:\n  schedule: '@daily'\n  targets: [brt]\n  command: 'echo secure-hello'\n";
    let config = api_config("  tls: true\n");
    let (_d, port) = start_with(&config, jobs);
    let Some(driver) = Driver::start() else {
        return;
    };
    driver.go(&format!("https://127.0.0.1:{port}/"));
    driver.type_into("#login-token", TOKEN);
    driver.click("#login-submit");
    driver.wait_for("tr[data-job=\"hello_tls\"]");
    driver.wait_js(
        "the live connection over wss",
        "document.querySelector('#conn').textContent === 'live'",
    );
    assert_eq!(driver.js("return location.protocol;"), "https:");
    driver.click("tr[data-job=\"hello_tls\"]");
    driver.wait_js(
        "the details page",
        "document.querySelector('#job-name').textContent === 'hello_tls'",
    );
    driver.click("#run-now");
    driver.wait_js(
        "the output",
        &format!("({})?.includes('secure-hello')", output_of("brt")),
    );
}
