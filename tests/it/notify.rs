//! Notifications: real HTTP and SMTP servers started by the test receive what the daemon
//! sends (signed webhooks, mail), retries survive a restart, a 500 is retried.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use hmac::{KeyInit, Mac};
use nix::sys::signal::Signal;
use serde_json::Value;

use crate::util::*;

/// One request the test's HTTP server received.
#[derive(Debug, Clone)]
struct Received {
    headers: Vec<(String, String)>,
    body: String,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// An HTTP server on `listener` that records each POST and answers with the next status
/// of `statuses` (the last one repeats).
fn http_server(listener: TcpListener, statuses: Vec<u16>) -> Arc<Mutex<Vec<Received>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut n = 0;
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let status = statuses[n.min(statuses.len() - 1)];
            n += 1;
            if let Some(r) = serve_one(stream, status) {
                out.lock().unwrap().push(r);
            }
        }
    });
    seen
}

fn serve_one(stream: TcpStream, status: u16) -> Option<Received> {
    stream.set_read_timeout(Some(HANG)).ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':')?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} Whatever\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    );
    Some(Received {
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn hmac_hex(key: &str, body: &str) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn events(d: &Daemon, kind: &str) -> Vec<Value> {
    d.ctl_json(&["events", "--kind", kind, "--limit", "500"])
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn wait_posts(seen: &Arc<Mutex<Vec<Received>>>, n: usize, d: &Daemon) -> Vec<Received> {
    wait_until(&format!("{n} webhook posts"), HANG, || {
        let s = seen.lock().unwrap();
        (s.len() >= n).then(|| s.clone())
    });
    let s = seen.lock().unwrap().clone();
    assert!(s.len() >= n, "{}", d.log_text());
    s
}

#[test]
fn a_failure_posts_a_signed_webhook_and_a_recovery_posts_once() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = http_server(listener, vec![200]);
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("ok");
    let job = format!(
        "flaky:\n  schedule: '@yearly'\n  targets: [flaky-host]\n  command: 'echo checking; test -e {}'\n  notify:\n    - on: [failure, recovery]\n      webhook: http://127.0.0.1:{port}/hook\n      secret: 'shared-hmac-key'\n",
        flag.display()
    );
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", &job)]);

    let (r1, code) = d.run_wait("flaky");
    assert_eq!(code, 1, "{r1}");
    let posts = wait_posts(&seen, 1, &d);
    let p = &posts[0];
    let body = p.json();
    assert_eq!(body["event"], "failure");
    assert_eq!(body["job"], "flaky");
    assert_eq!(body["run"], r1["id"]);
    assert_eq!(body["state"], "failed");
    assert_eq!(body["targets"][0]["machine"], "flaky-host");
    assert_eq!(body["targets"][0]["exit_code"], 1);
    assert_eq!(body["targets"][0]["output_tail"], "checking\n");
    assert!(body["text"].as_str().unwrap().contains("flaky"), "{body}");
    assert_eq!(
        p.header("X-Saltpeter-Signature"),
        Some(format!("sha256={}", hmac_hex("shared-hmac-key", &p.body)).as_str())
    );
    assert_eq!(p.header("Content-Type"), Some("application/json"));

    std::fs::write(&flag, "").unwrap();
    let (r2, code) = d.run_wait("flaky");
    assert_eq!(code, 0, "{r2}");
    let (r3, _) = d.run_wait("flaky");
    std::fs::remove_file(&flag).unwrap();
    let (r4, _) = d.run_wait("flaky");
    let posts = wait_posts(&seen, 3, &d);
    // Give a stray fourth post (a second recovery) the time to show up.
    wait_until("the delivery events", HANG, || {
        (events(&d, "notification_delivered").len() >= 3).then_some(())
    });
    let got: Vec<(u64, String)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|p| {
            let b = p.json();
            (
                b["run"].as_u64().unwrap(),
                b["event"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut got = got;
    got.sort();
    let id = |r: &Value| r["id"].as_u64().unwrap();
    assert_eq!(
        got,
        vec![
            (id(&r1), "failure".to_string()),
            (id(&r2), "recovery".to_string()),
            (id(&r4), "failure".to_string()),
        ],
        "run {} (a second success) must not post; {posts:?}",
        id(&r3)
    );
    // Every post is valid JSON with the signature of its own body.
    for p in &posts {
        let sig = format!("sha256={}", hmac_hex("shared-hmac-key", &p.body));
        assert_eq!(p.header("X-Saltpeter-Signature"), Some(sig.as_str()));
    }
}

#[test]
fn an_unreachable_receiver_is_retried_and_the_delivery_survives_a_restart() {
    let port = free_port();
    let job = format!(
        "failing:\n  schedule: '@yearly'\n  targets: [f]\n  command: 'exit 2'\n  notify:\n    webhook: http://127.0.0.1:{port}/hook\n"
    );
    let mut d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", &job)]);
    let (r, code) = d.run_wait("failing");
    assert_eq!(code, 1, "{r}");
    let failed = wait_until("a failed attempt", HANG, || {
        let e = events(&d, "notification_failed");
        (!e.is_empty()).then_some(e)
    });
    assert!(
        failed[0]["message"]
            .as_str()
            .unwrap()
            .contains("cannot connect"),
        "{failed:?}"
    );
    d.signal(Signal::SIGTERM);
    let status = d.wait_exit();
    assert!(status.success(), "{status}");

    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let seen = http_server(listener, vec![200]);
    d.spawn();
    d.wait_ready();
    let posts = wait_posts(&seen, 1, &d);
    assert_eq!(posts[0].json()["run"], r["id"]);
    assert_eq!(posts[0].json()["state"], "failed");
    let delivered = wait_until("the delivered event", HANG, || {
        let e = events(&d, "notification_delivered");
        (!e.is_empty()).then_some(e)
    });
    assert!(
        delivered[0]["message"]
            .as_str()
            .unwrap()
            .contains("HTTP 200"),
        "{delivered:?}"
    );
    // saltpeterctl shows the delivery with its attempts.
    let list = wait_until("the delivery recorded", HANG, || {
        let v = d.ctl_json(&["deliveries", "--job", "failing"]);
        (v[0]["state"] == "delivered").then_some(v)
    });
    let one = &list[0];
    assert_eq!(one["run"], r["id"]);
    assert_eq!(one["event"], "failure");
    assert_eq!(one["channel"], "webhook");
    assert_eq!(one["destination"], format!("http://127.0.0.1:{port}/…"));
    assert!(one["attempts"].as_u64().unwrap() >= 2, "{one}");
    let table = d.ctl(&["deliveries"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("delivered"));
}

#[test]
fn a_500_is_retried_until_the_receiver_accepts() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = http_server(listener, vec![500, 200]);
    let job = format!(
        "always:\n  schedule: '@yearly'\n  targets: [a]\n  command: 'true'\n  notify:\n    - on: always\n      webhook: http://127.0.0.1:{port}/\n      format: slack\n"
    );
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", &job)]);
    let (_, code) = d.run_wait("always");
    assert_eq!(code, 0);
    let posts = wait_posts(&seen, 2, &d);
    // The same message both times, in Slack's form.
    assert_eq!(posts[0].body, posts[1].body);
    let body = posts[1].json();
    assert_eq!(body.as_object().map(|o| o.len()), Some(1), "{body}");
    assert!(body["text"].as_str().unwrap().contains("always"));
    let failed = events(&d, "notification_failed");
    assert!(
        failed[0]["message"].as_str().unwrap().contains("HTTP 500"),
        "{failed:?}"
    );
    wait_until("the delivered event", HANG, || {
        (!events(&d, "notification_delivered").is_empty()).then_some(())
    });
}

/// A small SMTP server: accepts one session, returns the DATA it received.
fn smtp_server(listener: TcpListener) -> std::sync::mpsc::Receiver<(Vec<String>, String)> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(HANG));
            let mut w = stream.try_clone().unwrap();
            let mut r = BufReader::new(stream);
            let _ = w.write_all(b"220 test.example ESMTP\r\n");
            let mut commands = Vec::new();
            let mut data = String::new();
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let cmd = line.trim_end().to_string();
                commands.push(cmd.clone());
                let upper = cmd.to_ascii_uppercase();
                if upper.starts_with("EHLO") {
                    let _ = w.write_all(b"250-test.example\r\n250 8BITMIME\r\n");
                } else if upper == "DATA" {
                    let _ = w.write_all(b"354 go on\r\n");
                    loop {
                        let mut l = String::new();
                        if r.read_line(&mut l).unwrap_or(0) == 0 || l == ".\r\n" {
                            break;
                        }
                        data.push_str(&l);
                    }
                    let _ = w.write_all(b"250 queued as 42\r\n");
                } else if upper == "QUIT" {
                    let _ = w.write_all(b"221 bye\r\n");
                    break;
                } else {
                    let _ = w.write_all(b"250 ok\r\n");
                }
            }
            let _ = tx.send((commands, data));
        }
    });
    rx
}

#[test]
fn mail_reaches_a_real_smtp_server() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mails = smtp_server(listener);
    let config = format!(
        "saltpeter_config:\n  smtp: 127.0.0.1:{port}\n  mail_from: saltpeter@test.example\n  notify:\n    - on: [failure, lost]\n      email: ops@example.com\n"
    );
    let job = "nightly_backup:\n  schedule: '@yearly'\n  targets: [db1]\n  command: 'echo disk full; exit 3'\n";
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-mail.yaml", &config),
        ("jobs.yaml", job),
    ]);
    let (r, _) = d.run_wait("nightly_backup");
    let (commands, data) = mails.recv_timeout(HANG).unwrap_or_else(|_| {
        panic!("no mail arrived\n{}", d.log_text());
    });
    assert!(
        commands.contains(&"MAIL FROM:<saltpeter@test.example>".to_string()),
        "{commands:?}"
    );
    assert!(
        commands.contains(&"RCPT TO:<ops@example.com>".to_string()),
        "{commands:?}"
    );
    assert!(data.contains("To: ops@example.com\r\n"), "{data}");
    let subject = data
        .lines()
        .find(|l| l.starts_with("Subject: "))
        .expect("a subject");
    assert!(
        subject.contains("nightly_backup") && subject.contains(&format!("run {}", r["id"])),
        "{subject}"
    );
    assert!(data.contains("disk full"), "{data}");
    wait_until("the delivered event", HANG, || {
        let e = events(&d, "notification_delivered");
        e.iter()
            .any(|e| e["message"].as_str().unwrap_or("").contains("queued as 42"))
            .then_some(())
    });
}

#[test]
fn bad_urls_and_addresses_are_configuration_errors_at_their_line() {
    let (passed, text) = config_check(
        "jobs.yaml",
        "j:\n  schedule: '@daily'\n  targets: [a]\n  command: 'true'\n  notify:\n    - webhook: ftp://example.com/\n    - email: 'not an address'\n",
    );
    assert!(!passed, "{text}");
    assert!(text.contains("jobs.yaml:6"), "{text}");
    assert!(text.contains("ftp://example.com/"), "{text}");
    assert!(text.contains("jobs.yaml:7"), "{text}");
    assert!(text.contains("not a mail address"), "{text}");
}

#[test]
fn the_api_lists_deliveries() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = http_server(listener, vec![200]);
    let jobs = format!(
        "apijob:\n  schedule: '@yearly'\n  targets: [a1]\n  command: 'exit 1'\n  notify:\n    webhook: http://127.0.0.1:{port}/x\n    secret: never-shown-secret\n"
    );
    let (d, api) = crate::api::start(&jobs);
    let (r, _) = d.run_wait("apijob");
    wait_posts(&seen, 1, &d);
    let list = wait_until("the delivery in the API", HANG, || {
        let resp = crate::api::get(api, "/api/v1/deliveries?job=apijob&state=delivered");
        assert_eq!(resp.status, 200);
        let v: Value = serde_json::from_slice(&resp.body).unwrap();
        (v.as_array().is_some_and(|a| !a.is_empty())).then_some(v)
    });
    assert_eq!(list[0]["run"], r["id"]);
    assert_eq!(list[0]["event"], "failure");
    assert_eq!(list[0]["state"], "delivered");
    let bad = crate::api::get(api, "/api/v1/deliveries?state=lost");
    assert_eq!(bad.status, 400);
    // The rule's secret is shown as *** in the job's JSON, never itself.
    let all = crate::api::get(api, "/api/v1/jobs");
    assert!(!String::from_utf8_lossy(&all.body).contains("never-shown-secret"));
    assert!(!d.log_text().contains("never-shown-secret"));
}

/// A target declared lost in a network cut whose wrapper comes back with its exit: the
/// run's end is corrected, and the correction is sent as well (it is news), once.
#[test]
fn a_corrected_end_is_notified_after_the_lost_one() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = listener.local_addr().unwrap().port();
    let seen = http_server(listener, vec![200]);
    let wrapper_port = free_port();
    let proxy = Proxy::start(wrapper_port);
    let config = format!(
        "saltpeter_config:\n  machines_ws_port: {wrapper_port}\n  \
         default_saltpeter_server_host: '127.0.0.1:{}'\n",
        proxy.port
    );
    let job = format!(
        "cut:\n  schedule: '@yearly'\n  targets: [cut-host]\n  \
         command: 'for i in $(seq 1 300); do echo line-$i; sleep 0.1; done'\n  notify:\n    \
         - on: [always]\n      webhook: http://127.0.0.1:{hook}/hook\n"
    );
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-proxy.yaml", &config),
        ("jobs.yaml", &job),
    ]);
    let id = d.run_now("cut");
    wait_until("output flowing", HANG, || {
        d.output(id, "cut-host").contains("line-10\n").then_some(())
    });
    proxy.cut();
    wait_until(
        "the target declared lost",
        std::time::Duration::from_secs(60),
        || (target(&d.run_record(id), "cut-host")["reason"] == "lost").then_some(()),
    );
    let lost = wait_posts(&seen, 1, &d);
    assert_eq!(lost[0].json()["state"], "failed", "{:?}", lost[0].json());
    proxy.restore();
    let run = wait_until(
        "the real exit recorded",
        std::time::Duration::from_secs(120),
        || {
            let r = d.run_record(id);
            (target(&r, "cut-host")["reason"] == "exit" && is_final(&r)).then_some(r)
        },
    );
    assert_eq!(run["state"], "succeeded", "{run}");
    let posts = wait_posts(&seen, 2, &d);
    let states: Vec<(u64, String)> = posts
        .iter()
        .map(|p| {
            let b = p.json();
            (
                b["run"].as_u64().unwrap_or(0),
                b["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [(id, "failed".to_string()), (id, "succeeded".to_string())],
        "{}",
        d.log_text()
    );
    // Nothing more: each end once.
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(seen.lock().unwrap().len(), 2);
}
