use serde_json::json;

use super::*;
use crate::executor::protocol::{RawOutput, Reading, read_output, request_line};

/// A plugin for the tests: `ping` reports from many threads at once, `launch` panics
/// when told to, `resolve` echoes its target.
struct Echo;

impl Executor for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn version(&self) -> &str {
        "0.1"
    }
    fn capabilities(&self) -> Vec<String> {
        vec!["deploy".to_string()]
    }
    fn describe(&self, _config: &Value) -> Result<Description, String> {
        Ok(Description {
            keys: vec![KeyDoc {
                name: "greeting".to_string(),
                required: false,
                doc: "what to say".to_string(),
            }],
            target_types: vec!["list".to_string()],
        })
    }
    fn check_config(
        &self,
        args: &CheckConfigArgs,
        config: &Value,
    ) -> Result<Vec<ConfigError>, String> {
        let mut errors = Vec::new();
        if config.get("bad").is_some() {
            errors.push(ConfigError {
                job: None,
                key: Some("config.bad".to_string()),
                message: "bad is bad".to_string(),
            });
        }
        for job in &args.jobs {
            if job.target_type != "list" {
                errors.push(ConfigError {
                    job: Some(job.name.clone()),
                    key: Some("target_type".to_string()),
                    message: format!("unknown target type {}", job.target_type),
                });
            }
        }
        Ok(errors)
    }
    fn resolve(&self, args: &ResolveArgs, _config: &Value) -> Result<Vec<String>, String> {
        if args.target.is_empty() {
            return Err("empty target".to_string());
        }
        Ok(args.target.split(',').map(str::to_string).collect())
    }
    fn ping(&self, args: &PingArgs, _config: &Value, report: &Reporter) -> Result<(), String> {
        std::thread::scope(|s| {
            for machine in &args.machines {
                s.spawn(move || {
                    for _ in 0..50 {
                        report.reachable(machine);
                    }
                });
            }
        });
        Ok(())
    }
    fn launch(&self, args: &LaunchArgs, _config: &Value, report: &Reporter) -> Result<(), String> {
        for target in &args.targets {
            if target.machine == "boom" {
                panic!("boom on purpose");
            }
            report.launched(&target.machine);
        }
        Ok(())
    }
}

/// Serve `input` with the daemon speaking `versions`; what came out, read as the daemon
/// reads it.
fn serve_text(versions: &str, op: Op, input: &[u8]) -> (bool, Reading) {
    let mut out = Vec::new();
    let ok = serve(&Echo, versions, input, &mut out);
    let raw = RawOutput {
        stdout: out,
        code: Some(if ok { 0 } else { 1 }),
        ..RawOutput::default()
    };
    (ok, read_output(op, &raw))
}

fn request(op: Op, config: Value, args: Value) -> Vec<u8> {
    request_line(op, "echo", &config, args).into_bytes()
}

#[test]
fn describe_answers_after_the_hello() {
    let (ok, reading) = serve_text(
        "1",
        Op::Describe,
        &request(Op::Describe, json!({}), json!({})),
    );
    assert!(ok);
    assert_eq!(reading.breach, None);
    let hello = reading.hello.expect("hello");
    assert_eq!((hello.name.as_str(), hello.protocols), ("echo", vec![1]));
    assert_eq!(hello.capabilities, vec!["deploy".to_string()]);
    let result = reading.result.expect("result");
    assert_eq!(result.keys.expect("keys")[0].name, "greeting");
    assert_eq!(result.target_types, Some(vec!["list".to_string()]));
}

#[test]
fn check_config_and_resolve_carry_their_answers() {
    let args = json!({"jobs": [{"name": "j", "target": "a", "target_type": "glob"}]});
    let input = request(Op::CheckConfig, json!({"bad": 1}), args);
    let (ok, reading) = serve_text("1", Op::CheckConfig, &input);
    assert!(ok);
    let errors = reading.result.and_then(|r| r.errors).expect("errors");
    let keys: Vec<_> = errors.iter().map(|e| e.key.clone()).collect();
    assert_eq!(
        keys,
        vec![
            Some("config.bad".to_string()),
            Some("target_type".to_string())
        ]
    );
    assert_eq!(errors[1].job.as_deref(), Some("j"));

    let input = request(
        Op::Resolve,
        Value::Null,
        json!({"target": "a,b", "target_type": "list"}),
    );
    let (ok, reading) = serve_text("2, 1", Op::Resolve, &input);
    assert!(ok);
    assert_eq!(
        reading.result.and_then(|r| r.machines),
        Some(vec!["a".to_string(), "b".to_string()])
    );
}

#[test]
fn progress_from_many_threads_stays_whole_lines() {
    let machines: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
    let input = request(
        Op::Ping,
        json!({}),
        json!({"machines": machines, "timeout_s": 5}),
    );
    let (ok, reading) = serve_text("1", Op::Ping, &input);
    assert!(ok);
    assert_eq!(reading.breach, None);
    assert_eq!(reading.progress.len(), 8 * 50);
    assert!(reading.foreign.is_empty());
}

#[test]
fn an_operation_error_is_a_failed_result() {
    let input = request(
        Op::Resolve,
        json!({}),
        json!({"target": "", "target_type": "list"}),
    );
    let (ok, reading) = serve_text("1", Op::Resolve, &input);
    assert!(!ok);
    assert_eq!(reading.breach, None);
    assert_eq!(reading.outcome().err().as_deref(), Some("empty target"));
}

#[test]
fn kill_is_unsupported_by_default() {
    let input = request(Op::Kill, json!({}), json!({"run": 1, "machines": ["a"]}));
    let (ok, reading) = serve_text("1", Op::Kill, &input);
    assert!(!ok);
    let error = reading.outcome().expect_err("unsupported");
    assert!(error.contains("does not implement kill"), "{error}");
}

#[test]
fn a_panic_is_a_failed_result_after_the_progress_so_far() {
    let args = json!({
        "run": 7, "urls": [], "wrapper": {"path": "/w", "source": "/s", "sha256": "00"},
        "targets": [
            {"machine": "a", "token": "t1", "command": ["x"]},
            {"machine": "boom", "token": "t2", "command": ["x"]},
        ],
    });
    let (ok, reading) = serve_text("1", Op::Launch, &request(Op::Launch, json!({}), args));
    assert!(!ok);
    assert_eq!(reading.breach, None);
    assert_eq!(reading.progress.len(), 1);
    let error = reading.outcome().expect_err("panic");
    assert!(
        error.contains("panicked in launch: boom on purpose"),
        "{error}"
    );
}

#[test]
fn a_daemon_without_protocol_1_gets_a_hello_and_a_refusal() {
    let (ok, reading) = serve_text(
        "2,3",
        Op::Describe,
        &request(Op::Describe, json!({}), json!({})),
    );
    assert!(!ok);
    assert!(reading.hello.is_some());
    let error = reading.outcome().expect_err("refused");
    assert!(error.contains("\"2,3\""), "{error}");
}

#[test]
fn each_bad_request_is_named() {
    let long = vec![b'x'; MAX_LINE + 10];
    let cases: [(&[u8], &str); 8] = [
        (b"", "no request line"),
        (b"\n", "no request line"),
        (b"not json\n", "not JSON"),
        (b"[1]\n", "not a JSON object"),
        (
            br#"{"op":"describe","executor":"e"}"#,
            "no \"saltpeter_executor\" tag",
        ),
        (
            br#"{"saltpeter_executor":2,"op":"describe","executor":"e"}"#,
            "tagged saltpeter_executor: 2",
        ),
        (
            br#"{"saltpeter_executor":1,"op":"dance","executor":"e"}"#,
            "not protocol v1",
        ),
        (&long, "over 1048576 bytes"),
    ];
    for (input, expected) in cases {
        let (ok, reading) = serve_text("1", Op::Describe, input);
        assert!(!ok);
        assert_eq!(reading.breach, None);
        let error = reading.outcome().expect_err("bad request");
        assert!(error.contains(expected), "{expected:?} not in {error:?}");
    }
    let input = br#"{"saltpeter_executor":1,"op":"ping","executor":"e","args":{"machines":3}}"#;
    let (ok, reading) = serve_text("1", Op::Ping, input);
    assert!(!ok);
    let error = reading.outcome().expect_err("bad args");
    assert!(error.starts_with("bad args for ping:"), "{error}");
}

#[test]
fn only_one_request_line_is_read() {
    let mut input = request(Op::Describe, json!({}), json!({}));
    input.extend_from_slice(b"more lines the plugin never reads\n");
    let (ok, reading) = serve_text("1", Op::Describe, &input);
    assert!(ok);
    assert_eq!(reading.breach, None);
}

#[test]
fn by_hand_says_what_it_is() {
    let text = by_hand(&Echo);
    assert!(
        text.starts_with("saltpeter-executor-echo 0.1: a Saltpeter executor plugin, protocol 1")
    );
    assert!(text.contains("docs/executors.md"));
}
