//! Resource limits (issue 29) with the real daemon, wrapper and commands, on the local
//! executor and on the Salt testbed: a command over its `memory_max` is really killed and
//! recorded as `memory_limit` (137) with the way the limit applied; `nice` and `ionice`
//! reach the command; a command within its limit succeeds. The control group tests need
//! root and a cgroup file system root may write (cgroup v1 or v2; systemd is not needed):
//! missing, they fail, unless `SALTPETER_TEST_SKIP` names `cgroups`.

use serde_json::Value;

use crate::util::*;

/// Whether the control group tests run here.
fn cgroups() -> bool {
    crate::components::present_or_skipped(
        "cgroups",
        || {
            nix::unistd::Uid::effective().is_root()
                && (std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
                    || std::path::Path::new("/sys/fs/cgroup/memory").is_dir())
        },
        "no control groups root may write (/sys/fs/cgroup), or not root",
    )
}

const HOG: &str = "dd if=/dev/zero of=/dev/null bs=256M count=1";

fn jobs(targets: &str) -> String {
    format!(
        "hog:\n  schedule: '@yearly'\n  targets: {targets}\n  command: '{HOG}'\n  \
         memory_max: 32M\n\
         fits:\n  schedule: '@yearly'\n  targets: {targets}\n  \
         command: 'dd if=/dev/zero of=/dev/null bs=4M count=1'\n  memory_max: 32M\n  \
         tasks_max: 16\n\
         polite:\n  schedule: '@yearly'\n  targets: {targets}\n  \
         command: 'nice; ionice -p $$'\n  nice: 10\n  ionice: idle\n"
    )
}

/// The three jobs' runs on `machine`: the hog killed by its limit, the one that fits
/// fine, the polite one with its priorities.
fn check_runs(d: &Daemon, machine: &str) {
    let (run, _) = d.run_wait("hog");
    let t = target(&run, machine);
    assert_eq!(t["reason"], "memory_limit", "{run}\n{}", d.log_text());
    assert_eq!(t["exit_code"], 137, "{run}");
    let limits = t["limits"].as_str().unwrap_or_default();
    assert!(limits.contains("memory_max=32 MiB"), "{run}");
    assert!(!limits.starts_with("setrlimit"), "no group applied: {run}");
    let id = run["id"].as_u64().expect("run id");
    let out = d.output(id, machine);
    assert!(out.contains("killed by its memory limit"), "{out}");
    let status = d.ctl(&["show-run", &id.to_string()]);
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(shown.contains(&format!("{machine} limits: ")), "{shown}");
    assert!(shown.contains("memory_limit"), "{shown}");

    let (run, _) = d.run_wait("fits");
    let t = target(&run, machine);
    assert_eq!(
        (t["reason"].clone(), t["exit_code"].clone()),
        (Value::from("exit"), Value::from(0)),
        "{run}"
    );
    assert!(
        t["limits"]
            .as_str()
            .unwrap_or_default()
            .contains("tasks_max=16"),
        "{run}"
    );

    let (run, _) = d.run_wait("polite");
    let t = target(&run, machine);
    assert_eq!(t["exit_code"], 0, "{run}");
    assert_eq!(t["limits"], "nice 10; ionice idle", "{run}");
    let id = run["id"].as_u64().expect("run id");
    let out = d.output(id, machine);
    assert!(out.starts_with("10\nidle"), "{out}");
}

#[test]
fn local_commands_get_their_limits_and_a_memory_kill_says_so() {
    if !cgroups() {
        return;
    }
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", &jobs("[lim-a]"))]);
    check_runs(&d, "lim-a");
}

#[test]
fn salt_commands_get_their_limits_and_a_memory_kill_says_so() {
    let Some((root, bin, _)) = crate::salt::testbed() else {
        return;
    };
    if !cgroups() {
        return;
    }
    let config_dir = root.join("master");
    let d = crate::salt::salt_daemon(&root, &bin, path_str(&config_dir), 10, &jobs("minion-02"));
    check_runs(&d, "minion-02");
}
