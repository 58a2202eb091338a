use super::*;

fn raw(stdout: &str, code: i32) -> RawOutput {
    RawOutput {
        stdout: stdout.as_bytes().to_vec(),
        code: Some(code),
        ..RawOutput::default()
    }
}

const HELLO: &str = r#"{"saltpeter_executor":1,"type":"hello","protocols":[1],"name":"t","version":"1","capabilities":["launch"]}"#;

#[test]
fn a_launch_reads_its_progress_and_result() {
    let out = format!(
        "{HELLO}\nsome library chatter\n\
         {{\"saltpeter_executor\":1,\"type\":\"launched\",\"machine\":\"a\"}}\n\
         {{\"saltpeter_executor\":1,\"type\":\"unreachable\",\"machine\":\"b\",\"reason\":\"no route\"}}\n\
         {{\"saltpeter_executor\":1,\"type\":\"result\",\"ok\":true}}\n"
    );
    let r = read_output(Op::Launch, &raw(&out, 0));
    assert_eq!(r.breach, None);
    assert_eq!(r.progress.len(), 2);
    assert_eq!(r.foreign, vec!["some library chatter".to_string()]);
    assert!(r.outcome().is_ok());
}

#[test]
fn each_breach_is_named() {
    let result = r#"{"saltpeter_executor":1,"type":"result","ok":true}"#;
    let cases: Vec<(String, i32, Option<u64>, &str)> = vec![
        (String::new(), 0, None, "no_hello"),
        (format!("{result}\n"), 0, None, "no_hello"),
        (
            r#"{"saltpeter_executor":1,"type":"hello","protocols":[2],"name":"t","version":"1"}"#
                .to_string(),
            0,
            None,
            "wrong_protocol",
        ),
        (
            format!("{HELLO}\n{{\"saltpeter_executor\":2,\"type\":\"result\",\"ok\":true}}"),
            0,
            None,
            "wrong_tag",
        ),
        (
            format!("{HELLO}\n{{\"saltpeter_executor\":1,\"type\":\"bogus\"}}"),
            0,
            None,
            "bad_line",
        ),
        (format!("{HELLO}\n"), 3, None, "no_result"),
        (
            format!("{HELLO}\n{result}\n{result}\n"),
            0,
            None,
            "line_after_result",
        ),
        (format!("{HELLO}\n{result}\n"), 1, None, "bad_exit"),
        (format!("{HELLO}\n"), 0, Some(5), "deadline"),
        (
            format!(
                "{HELLO}\n{{\"saltpeter_executor\":1,\"type\":\"reachable\",\"machine\":\"a\"}}\n{result}"
            ),
            0,
            None,
            "unexpected_line",
        ),
    ];
    for (stdout, code, deadline, name) in cases {
        let mut r = raw(&stdout, code);
        r.deadline = deadline;
        let reading = read_output(Op::Launch, &r);
        let breach = reading
            .breach
            .unwrap_or_else(|| panic!("no breach for {stdout:?}"));
        assert_eq!(breach.name(), name, "{stdout:?}: {breach}");
        assert!(breach.to_string().starts_with(name), "{breach}");
    }
}

#[test]
fn too_much_stdout_and_too_long_lines_are_breaches() {
    let mut r = raw(&format!("{HELLO}\n"), 0);
    r.dropped = 10;
    assert_eq!(
        read_output(Op::Ping, &r).breach.map(|b| b.name()),
        Some("stdout_too_large")
    );
    let long = format!("{HELLO}\n{}\n", "x".repeat(MAX_LINE + 1));
    let r = raw(&long, 0);
    assert_eq!(
        read_output(Op::Ping, &r).breach.map(|b| b.name()),
        Some("line_too_long")
    );
}

#[test]
fn a_failed_result_is_the_plugins_error() {
    let out = format!(
        "{HELLO}\n{{\"saltpeter_executor\":1,\"type\":\"result\",\"ok\":false,\"error\":\"no inventory\"}}\n"
    );
    let r = read_output(Op::Resolve, &raw(&out, 1));
    assert_eq!(r.breach, None);
    assert_eq!(r.outcome().unwrap_err(), "no inventory");
}

#[test]
fn lines_round_trip_with_their_tag() {
    let line = encode(&PluginLine::Launched {
        machine: "a".into(),
    });
    assert!(line.ends_with('\n'));
    let v: Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(v["saltpeter_executor"], 1);
    assert_eq!(v["type"], "launched");
    let req = request_line(
        Op::CheckConfig,
        "ssh",
        &Value::Null,
        serde_json::json!({"jobs": []}),
    );
    let back: Request = serde_json::from_str(req.trim()).unwrap();
    assert_eq!(back.op, Op::CheckConfig);
    assert_eq!(back.executor, "ssh");
}

#[test]
fn a_token_never_shows_in_debug() {
    let t = LaunchTarget {
        machine: "m".into(),
        token: "s3cr3t".into(),
        command: vec![],
        deploy: false,
    };
    assert!(!format!("{t:?}").contains("s3cr3t"));
}
