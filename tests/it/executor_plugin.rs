//! A job whose executor is a plugin (docs/executors.md), end to end with a real daemon.

use crate::util::*;

fn plugin_config(dir: &str, extra: &str) -> String {
    format!("saltpeter_config:\n  executor_path: [{dir}]\n{extra}")
}

#[test]
fn a_plugin_job_runs_reports_its_exit_and_skips_unreachable() {
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "02-plugins.yaml",
            &plugin_config(
                "/tmp/plug",
                "  executors:\n    demo:\n      config:\n        down: [m3]\n",
            ),
        ),
        (
            "jobs.yaml",
            &format!(
                "p:\n  schedule: '@yearly'\n  executor: demo\n  targets: [m1, m2, m3]\n  target_type: list\n  wrapper_path: {WRAPPER}\n  command: 'echo hi from $SP_MACHINE; exit 3'\n"
            ),
        ),
    ]);
    let id = d.run_now("p");
    let r = d.wait_run_final(id);
    eprintln!("{r:#}");
    eprintln!("{}", d.log_text());
    assert_eq!(target(&r, "m1")["exit_code"], 3, "{r}");
    assert_eq!(target(&r, "m3")["exit_code"], 255, "{r}");
}
