//! Log export: per-job log files in the original's layout, and Elasticsearch/OpenSearch
//! bulk requests received by an HTTP endpoint of the test (no search server here).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;

use serde_json::Value;

use crate::util::*;

#[test]
fn per_job_log_files_match_the_output() {
    let logs = tempfile::tempdir().unwrap();
    let config = format!("saltpeter_config:\n  logdir: {}\n", logs.path().display());
    let jobs = "logged:\n  schedule: '@yearly'\n  targets: [l1, l2]\n  command: 'echo hello from $SP_MACHINE_NAME; echo second line; exit 5'\n";
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-logs.yaml", &config),
        ("jobs.yaml", jobs),
    ]);
    let (run, _) = d.run_wait("logged");
    let id = run["id"].as_u64().unwrap();
    let path = logs.path().join("logged.log");
    let text = wait_until("the job log's end", HANG, || {
        let t = std::fs::read_to_string(&path).ok()?;
        t.contains("###### Finished").then_some(t)
    });
    let instance = format!("logged_{id}");
    assert!(
        text.starts_with(&format!("###### Starting {instance} at ")),
        "{text}"
    );
    for m in ["l1", "l2"] {
        let out = d.output(id, m);
        let block = format!(
            "########## {m} from {instance} ################\n**** Exit Code 5 ******\n{out}####### END {m} from {instance} at "
        );
        assert!(text.contains(&block), "{block}\nnot in\n{text}");
    }
    assert!(text.trim_end().ends_with("################"), "{text}");
    // Command output is the daemon user's only, whatever the umask.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "job log mode {mode:o}");
}

#[test]
fn a_bulk_export_reaches_the_endpoint_in_the_documented_format() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel::<(String, Vec<String>, String)>();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut r = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let mut headers = Vec::new();
            loop {
                let mut h = String::new();
                r.read_line(&mut h).unwrap();
                if h.trim().is_empty() {
                    break;
                }
                headers.push(h.trim().to_string());
            }
            let len: usize = headers
                .iter()
                .find_map(|h| h.strip_prefix("Content-Length: "))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            let answer = "{\"took\":1,\"errors\":false,\"items\":[]}";
            let mut w = stream;
            let _ = write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
                answer.len()
            );
            let _ = tx.send((
                line.trim().to_string(),
                headers,
                String::from_utf8(body).unwrap(),
            ));
        }
    });
    let config = format!(
        "saltpeter_config:\n  opensearch: http://127.0.0.1:{port}\n  opensearch_index: sp-test\n  opensearch_user: exporter\n  opensearch_password: s3cret\n"
    );
    let jobs =
        "exported:\n  schedule: '@yearly'\n  targets: [e1]\n  command: 'echo exported output'\n";
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-export.yaml", &config),
        ("jobs.yaml", jobs),
    ]);
    let (run, code) = d.run_wait("exported");
    assert_eq!(code, 0);
    let id = run["id"].as_u64().unwrap();
    let mut docs: Vec<(Value, Value)> = Vec::new();
    // Requests may arrive in any order (they are sent side by side).
    let seen = |docs: &[(Value, Value)], t: &str| docs.iter().any(|(_, d)| d["msg_type"] == t);
    while !(seen(&docs, "start") && seen(&docs, "end")) {
        let (line, headers, body) = rx.recv_timeout(HANG).expect("a bulk request");
        assert_eq!(line, "POST /_bulk HTTP/1.1");
        assert!(
            headers.contains(&"Content-Type: application/x-ndjson".to_string()),
            "{headers:?}"
        );
        // exporter:s3cret
        assert!(
            headers.contains(&"Authorization: Basic ZXhwb3J0ZXI6czNjcmV0".to_string()),
            "{headers:?}"
        );
        assert!(body.ends_with('\n'));
        let lines: Vec<&str> = body.lines().collect();
        assert_eq!(lines.len() % 2, 0, "{body}");
        for pair in lines.chunks(2) {
            docs.push((
                serde_json::from_str(pair[0]).unwrap(),
                serde_json::from_str(pair[1]).unwrap(),
            ));
        }
    }
    let mut types: Vec<&str> = docs
        .iter()
        .filter_map(|(_, d)| d["msg_type"].as_str())
        .collect();
    types.sort();
    assert_eq!(types, ["end", "machine_result", "start"]);
    let (action, result) = docs
        .iter()
        .find(|(_, d)| d["msg_type"] == "machine_result")
        .unwrap();
    let index = action["index"]["_index"].as_str().unwrap();
    assert!(index.starts_with("sp-test-20"), "{index}");
    assert_eq!(result["job_name"], "exported");
    assert_eq!(result["group"], "jobs");
    assert_eq!(result["job_instance"], format!("exported_{id}"));
    assert_eq!(result["machine"], "e1");
    assert_eq!(result["return_code"], 0);
    assert_eq!(result["output"], "exported output\n");
    assert!(result["@timestamp"].as_str().unwrap().ends_with('Z'));
    // The password is nowhere in what operators see.
    let events = d.ctl(&["events", "--limit", "200"]);
    assert!(!String::from_utf8_lossy(&events.stdout).contains("s3cret"));
    assert!(!d.log_text().contains("s3cret"));
}
