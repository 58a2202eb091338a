//! Unit tests of the `salt` command line and its outcomes.

use super::*;

fn settings() -> SaltSettings {
    SaltSettings {
        salt_bin: "salt".into(),
        config_dir: Some("/etc/salt".into()),
        timeout_s: 20,
        concurrency: 4,
        bridge: false,
    }
}

#[test]
fn argv_has_no_shell_and_no_static() {
    let a = argv(
        &settings(),
        target_flag(SaltTargetType::Compound),
        &[],
        "G@role:web and G@env:prod",
        "test.ping",
        &[],
    );
    assert_eq!(
        a,
        [
            "-c",
            "/etc/salt",
            "--out=json",
            "--out-indent=-1",
            "-t",
            "20",
            "-C",
            "--",
            "G@role:web and G@env:prod",
            "test.ping"
        ]
    );
    assert!(!a.iter().any(|x| x == "--static"));
    assert_eq!(target_flag(SaltTargetType::Glob), None);
}

#[test]
fn parses_json_lines_and_skips_noise() {
    let out = "{\"minion-02\": true}\nnot json\n{\"minion-03\": \"Minion did not return. [No response]\\nThe minions may not...\"}\n{\"minion-01\": true}\n";
    let r = parse_returns(out);
    assert!(!r.no_match);
    assert_eq!(r.by_minion.len(), 3);
    assert_eq!(ping_result(&r.by_minion["minion-01"]), MinionResult::Ok);
    assert_eq!(
        ping_result(&r.by_minion["minion-03"]),
        MinionResult::NoReturn("the minion did not return [No response]".into())
    );
    let none = parse_returns(
        "No minions matched the target. No command was sent, no jid was assigned.\n{}\n",
    );
    assert!(none.no_match);
    assert!(none.by_minion.is_empty());
    // Truncated output: the cut line is skipped, not a crash.
    let cut = parse_returns("{\"minion-01\": tr");
    assert!(cut.by_minion.is_empty());
}

#[test]
fn run_all_and_state_results() {
    let ok: Value = serde_json::json!({"pid": 1, "retcode": 0, "stdout": "started", "stderr": ""});
    assert_eq!(run_all_result(&ok), MinionResult::Ok);
    let missing: Value = serde_json::json!({"pid": 1, "retcode": 127, "stdout": "", "stderr": "/x/saltpeter-wrapper: not found"});
    assert_eq!(
        run_all_result(&missing),
        MinionResult::Failed("exit code 127: /x/saltpeter-wrapper: not found".into())
    );
    let state: Value = serde_json::json!({"file_|-x_|-/w_|-managed": {"result": false, "comment": "Source file salt://nope not found"}});
    assert_eq!(
        state_result(&state),
        MinionResult::Failed("Source file salt://nope not found".into())
    );
    let good: Value =
        serde_json::json!({"file_|-x_|-/w_|-managed": {"result": true, "comment": "ok"}});
    assert_eq!(state_result(&good), MinionResult::Ok);
}

#[test]
fn the_batch_launch_is_one_call_with_nothing_secret_rendered_per_minion() {
    let minions = vec!["m1".to_string(), "m 2".to_string()];
    let call = launch_call(
        &minions,
        "/opt/sp wrapper",
        &[42, 43],
        "wss://h:8889/wrapper/v1#sha256=ab",
    );
    let argv = call.argv(&settings(), 0);
    assert_eq!(
        &argv[6..11],
        ["-L", "--no-parse=cmd", "--", "m1,m 2", "cmd.run_all"]
    );
    assert_eq!(
        argv[11],
        "cmd='/opt/sp wrapper' --daemonize --minion-id '{{ opts[\"id\"] }}' --minion-key \
         '{{ opts[\"pki_dir\"] }}/minion.pem'"
    );
    assert_eq!(&argv[12..14], ["template=jinja", "python_shell=False"]);
    let env: Value = serde_json::from_str(argv[14].trim_start_matches("env=")).unwrap();
    assert_eq!(
        env,
        serde_json::json!({"SP_URL": "wss://h:8889/wrapper/v1#sha256=ab", "SP_RUN": "42,43"})
    );
    // The same call for the salt bridge, typed.
    let req = call.bridge_request(20);
    assert_eq!(req["tgt_type"], "list");
    assert_eq!(req["tgt"], "m1,m 2");
    assert_eq!(req["kwarg"]["python_shell"], false);
    assert_eq!(req["kwarg"]["template"], "jinja");
    assert_eq!(req["kwarg"]["env"]["SP_RUN"], "42,43");
    assert_eq!(req["timeout"], 20);
    assert_eq!(req["returns"], true);
    let mut publish_only = call.clone();
    publish_only.returns = false;
    assert_eq!(publish_only.bridge_request(20)["returns"], false);
    assert_eq!(
        publish_only.argv(&settings(), 0),
        argv,
        "the command line always waits for the returns"
    );
}

#[test]
fn launch_outcomes_fail_at_once_or_wait_for_the_wrapper() {
    let minions: Vec<String> = ["ok", "broken", "silent", "absent"]
        .iter()
        .map(|m| m.to_string())
        .collect();
    let out = concat!(
        "{\"ok\": {\"retcode\": 0, \"stdout\": \"\", \"stderr\": \"\"}}\n",
        "{\"broken\": {\"retcode\": 127, \"stdout\": \"\", \"stderr\": \"not found\"}}\n",
        "{\"silent\": \"Minion did not return. [No response]\"}\n"
    );
    let outcomes = launch_outcomes(&[7], &minions, &parse_returns(out), "tail");
    let outcomes: Vec<MinionOutcome> = outcomes.into_iter().map(|(_, o)| o).collect();
    assert_eq!(outcomes[0].result, Ok(()));
    assert_eq!(outcomes[0].silent, None);
    assert!(
        outcomes[1]
            .result
            .as_ref()
            .unwrap_err()
            .contains("not found")
    );
    assert_eq!(outcomes[2].result, Ok(()));
    assert!(
        outcomes[2]
            .silent
            .as_ref()
            .unwrap()
            .contains("[No response]")
    );
    assert_eq!(outcomes[3].result, Ok(()));
    assert!(outcomes[3].silent.as_ref().unwrap().contains("tail"));
    // A publish without returns: the bridge's word for each minion it reached.
    let published =
        "{\"ok\": \"published\"}\n{\"silent\": \"Minion did not return. [No response]\"}\n";
    let two = &minions[..1]
        .iter()
        .chain(&minions[2..3])
        .cloned()
        .collect::<Vec<_>>();
    let outcomes = launch_outcomes(&[7], two, &parse_returns(published), "tail");
    assert_eq!(outcomes[0].1.result, Ok(()));
    assert_eq!(outcomes[0].1.silent, None);
    assert_eq!(outcomes[1].1.result, Ok(()));
    assert!(outcomes[1].1.silent.is_some());
}

#[test]
fn one_launch_command_answers_for_each_run() {
    let minions = vec!["m1".to_string(), "m2".to_string()];
    let out = concat!(
        "{\"m1\": {\"retcode\": 0, \"stdout\": \"\", \"stderr\": \"\"}}\n",
        "{\"m2\": {\"retcode\": 1, \"stdout\": \"saltpeter-wrapper: run 5 continues in ",
        "the background (pid 9)\\n\", \"stderr\": \"saltpeter-wrapper: run 6: cannot fork\"}}\n"
    );
    let outcomes = launch_outcomes(&[5, 6, 7], &minions, &parse_returns(out), "");
    assert_eq!(outcomes.len(), 6);
    let of = |run: u64, m: &str| {
        outcomes
            .iter()
            .find(|(r, o)| *r == run && o.machine == m)
            .map(|(_, o)| o.result.clone())
            .unwrap()
    };
    assert_eq!(of(5, "m1"), Ok(()));
    assert_eq!(of(7, "m1"), Ok(()));
    assert_eq!(of(5, "m2"), Ok(()));
    assert_eq!(
        of(6, "m2"),
        Err("wrapper launch failed: cannot fork".into())
    );
    assert!(of(7, "m2").unwrap_err().contains("exit code 1"));
}

#[test]
fn deployment_is_an_execution_function_with_the_hash() {
    let call = deploy_call(&["a".into()], "/w", "salt://saltpeter/w", Some("ab12"));
    assert_eq!(call.function, "file.manage_file");
    let req = call.bridge_request(20);
    assert_eq!(req["kwarg"]["source_sum"]["hsum"], "ab12");
    assert_eq!(req["kwarg"]["mode"], "0755");
    assert!(req["kwarg"]["ret"].is_null());
    assert!(!call.argv(&settings(), 0).iter().any(|a| a == "queue=True"));
}

#[test]
fn state_call_arguments_are_typed_for_the_bridge_and_words_for_the_cli() {
    let mut call = SaltCall::new(SaltTargetType::List, "a,b", "state.single")
        .kwarg("name", Value::String("/w".into()))
        .kwarg("mode", Value::String("0755".into()))
        .kwarg("queue", Value::Bool(true));
    call.arg.push("file.managed".into());
    let argv = call.argv(&settings(), 120);
    assert_eq!(argv[5], "140", "the extra time lengthens -t");
    assert_eq!(
        &argv[6..],
        [
            "-L",
            "--",
            "a,b",
            "state.single",
            "file.managed",
            "name=/w",
            "mode=0755",
            "queue=True"
        ]
    );
    let req = call.bridge_request(140);
    assert_eq!(req["arg"], serde_json::json!(["file.managed"]));
    assert_eq!(req["kwarg"]["queue"], true);
    assert_eq!(req["kwarg"]["mode"], "0755");
    assert_eq!(tgt_type_name(SaltTargetType::GrainPcre), "grain_pcre");
}

#[test]
fn a_target_that_reads_as_an_option_stays_a_target() {
    // A minion id first in a list, or a row another server wrote: after `--`, salt's
    // option parser takes it as it is.
    let minions = vec!["--out-file=/tmp/x".to_string(), "m1".to_string()];
    let argv = launch_call(&minions, "/w", &[1], "wss://h/wrapper/v1").argv(&settings(), 0);
    let sep = argv.iter().position(|a| a == "--").expect("a `--`");
    assert_eq!(argv[sep + 1], "--out-file=/tmp/x,m1");
    // Every option is before it, the function's arguments after.
    assert!(
        argv[..sep]
            .iter()
            .all(|a| a.starts_with('-') || !a.contains('='))
    );
    assert!(argv[..sep].contains(&"--no-parse=cmd".to_string()));
    assert!(argv[sep + 2..].iter().all(|a| !a.starts_with("--")));
    let deploy = deploy_call(&minions, "/w", "salt://w", None).argv(&settings(), 0);
    let sep = deploy.iter().position(|a| a == "--").expect("a `--`");
    assert_eq!(deploy[sep + 1], "--out-file=/tmp/x,m1");
    let ping = SaltCall::new(SaltTargetType::Glob, "-c/tmp/evil", "test.ping").argv(&settings(), 0);
    assert_eq!(&ping[ping.len() - 3..], ["--", "-c/tmp/evil", "test.ping"]);
}

#[test]
fn a_minions_words_are_escaped_and_clipped() {
    let hostile = format!(
        "boom\n1999-01-01 ERROR forged\u{1b}]0;x\u{7}{}",
        "y".repeat(3_000_000)
    );
    let value = serde_json::json!({"retcode": 1, "stdout": "", "stderr": hostile});
    let MinionResult::Failed(why) = run_all_result(&value) else {
        panic!("not a failure");
    };
    assert!(
        why.starts_with("exit code 1: boom\\n1999-01-01 ERROR forged\\u{1b}]0;x\\u{7}"),
        "{}",
        &why[..100]
    );
    assert!(
        why.len() < 2 * crate::logsafe::REASON_MAX,
        "{} bytes",
        why.len()
    );
    assert!(!why.contains('\n') && !why.contains('\u{1b}'));
    let state = serde_json::json!({"s": {"result": false, "comment": hostile}});
    let MinionResult::Failed(why) = state_result(&state) else {
        panic!("not a failure");
    };
    assert!(why.len() < 2 * crate::logsafe::REASON_MAX && !why.contains('\n'));
    let ping = ping_result(&serde_json::json!(hostile));
    assert!(matches!(ping, MinionResult::Failed(w) if w.len() < 2 * crate::logsafe::REASON_MAX));
    // A launch line naming the run is clipped too.
    let line = serde_json::json!({"retcode": 1, "stdout": "",
        "stderr": format!("saltpeter-wrapper: run 7: {hostile}")});
    let returns = Returns {
        by_minion: [("m".to_string(), line)].into_iter().collect(),
        no_match: false,
    };
    let out = launch_outcomes(&[7], &["m".to_string()], &returns, "");
    let err = out[0].1.result.clone().unwrap_err();
    assert!(
        err.len() < 2 * crate::logsafe::REASON_MAX && !err.contains('\n'),
        "{}",
        err.len()
    );
}
