use super::verdict::{breach as breach_verdict, file_problem, per_machine};
use super::*;
use crate::executor::protocol::{Breach, RawOutput};

fn check(name: &'static str, verdict: Verdict) -> String {
    Check { name, verdict }.to_string()
}

#[test]
fn each_verdict_reads_as_one_line() {
    assert_eq!(check("ping", Verdict::Ok(String::new())), "ok ping");
    assert_eq!(
        check("ping", Verdict::Ok("a reachable".into())),
        "ok ping: a reachable"
    );
    assert_eq!(
        check("unknown_key", Verdict::Warn("w".into())),
        "warn unknown_key: w"
    );
    assert_eq!(check("kill", Verdict::Skip("s".into())), "skip kill: s");
    let breach = Breach::NoResult {
        status: "with status 3".into(),
    };
    let verdict = breach_verdict(&breach, &RawOutput::default());
    assert_eq!(
        check("describe", verdict),
        "FAIL describe: no_result: the plugin exited (with status 3) without a result line"
    );
    let missing = file_problem(&FileProblem::Missing {
        path: "/nowhere".into(),
    });
    assert_eq!(
        check("file", missing),
        "FAIL file: missing: /nowhere does not exist"
    );
}

#[test]
fn a_machine_asked_must_be_answered_and_only_those() {
    let asked = vec!["a".to_string(), "b".to_string()];
    let reachable = |m: &str| PluginLine::Reachable { machine: m.into() };
    let both = [
        reachable("a"),
        PluginLine::Unreachable {
            machine: "b".into(),
            reason: "down".into(),
        },
    ];
    assert_eq!(
        per_machine(&asked, &both),
        Ok("a reachable, b unreachable (down)".to_string())
    );
    let one = [reachable("a")];
    assert!(matches!(
        per_machine(&asked, &one),
        Err(Verdict::Fail {
            problem: "silent",
            ..
        })
    ));
    let deployed_only = [
        reachable("a"),
        PluginLine::Deployed {
            machine: "b".into(),
        },
    ];
    assert!(matches!(
        per_machine(&asked, &deployed_only),
        Err(Verdict::Fail {
            problem: "silent",
            ..
        })
    ));
    let stranger = [reachable("a"), reachable("b"), reachable("c")];
    assert!(matches!(
        per_machine(&asked, &stranger),
        Err(Verdict::Fail {
            problem: "unasked",
            ..
        })
    ));
}

#[test]
fn the_file_name_gives_the_executor_name() {
    let (name, verdict) = executor_name(Path::new("/x/saltpeter-executor-pyexec"));
    assert_eq!(name, "pyexec");
    assert!(matches!(verdict, Verdict::Ok(_)));
    for odd in [
        "/x/plugin.py",
        "/x/saltpeter-executor-local",
        "/x/saltpeter-executor-Up",
    ] {
        let (name, verdict) = executor_name(Path::new(odd));
        assert_eq!(name, FALLBACK_NAME, "{odd}");
        assert!(matches!(verdict, Verdict::Warn(_)), "{odd}");
    }
}
