//! Wrappers of a daemon that stops for good, crashes, or comes back (issue 20), with the
//! real daemon: staged wrappers (pre-staged by the salt executor, here through a `salt`
//! stand-in that starts the real wrapper on this host) give up at their slot plus the
//! stage grace and run nothing; running wrappers keep their command, also past a
//! daemon with another state directory, and re-attach when the daemon comes back on its
//! own state; staged ones re-attach too when it is back within the grace.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{Datelike, Timelike};
use nix::sys::signal::Signal;

use crate::util::*;

/// 40 numbered lines over about 4 s.
const COUNTER: &str = "for i in $(seq 1 40); do echo line-$i; sleep 0.1; done";

fn expected_counter() -> String {
    (1..=40).map(|i| format!("line-{i}\n")).collect()
}

/// How the daemon goes away.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// `systemctl stop`: SIGTERM, the ordered stop.
    Ordered,
    /// kill -9 of every process of the daemon.
    Crash,
}

/// Stops `d` as `how` says and waits until every one of its processes is gone.
fn stop(d: &mut Daemon, how: Stop) {
    let procs = d.processes();
    match how {
        Stop::Ordered => d.signal(Signal::SIGTERM),
        Stop::Crash => {
            for (_, pid) in &procs {
                let pid = nix::unistd::Pid::from_raw(*pid as i32);
                let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            }
        }
    }
    let _ = d.wait_exit();
    for (_, pid) in &procs {
        wait_until("daemon process gone", HANG, || (!alive(*pid)).then_some(()));
    }
}

/// Starts `d` with `SP_STAGE_GRACE_S` in its environment (local wrappers inherit it).
fn spawn_with_grace(d: &mut Daemon, grace_s: u64) {
    d.spawn_with_env(&[("SP_STAGE_GRACE_S", &grace_s.to_string())]);
    d.wait_ready();
}

fn restart(d: &mut Daemon, grace_s: u64) {
    d.cleaned_up();
    spawn_with_grace(d, grace_s);
}

#[test]
fn running_wrappers_outlive_a_stopped_daemon_and_reattach_on_restart() {
    let port = fixed_port_config();
    for how in [Stop::Ordered, Stop::Crash] {
        let machine = format!("keeps-{how:?}").to_lowercase();
        let mut d = Daemon::prepare(&[
            ("01-fast.yaml", FAST),
            ("02-port.yaml", &port),
            (
                "jobs.yaml",
                &format!(
                    "counter:\n  schedule: '@yearly'\n  targets: [{machine}]\n  command: '{COUNTER}'\n"
                ),
            ),
        ]);
        spawn_with_grace(&mut d, 1);
        let id = d.run_now("counter");
        wait_until("some output", HANG, || {
            d.output(id, &machine).contains("line-5\n").then_some(())
        });
        let wrappers = wrapper_pids(id, &machine);
        assert_eq!(wrappers.len(), 1, "{}", d.log_text());
        stop(&mut d, how);

        // Down for longer than the stage grace and the command: the wrapper stays.
        std::thread::sleep(Duration::from_secs(5));
        assert!(alive(wrappers[0]), "the running wrapper gave up ({how:?})");

        if matches!(how, Stop::Ordered) {
            // A daemon with another state directory answers on the same port for a
            // while; it does not know the run, and the wrapper keeps its command.
            let mut stranger = Daemon::prepare(&[("02-port.yaml", &port)]);
            spawn_with_grace(&mut stranger, 1);
            wait_until("the stranger to reject the wrapper", HANG, || {
                stranger
                    .log_text()
                    .contains(&format!("wrapper on {machine} from"))
                    .then_some(())
            });
            stop(&mut stranger, Stop::Ordered);
            assert!(
                alive(wrappers[0]),
                "rejected by a stranger, the wrapper gave up"
            );
        }

        restart(&mut d, 1);
        let run = wait_until(&format!("run {id} to finish"), 2 * HANG, || {
            let r = d.run_record(id);
            is_final(&r).then_some(r)
        });
        let t = target(&run, &machine);
        assert_eq!(t["exit_code"], 0, "{run}\n{}", d.log_text());
        assert_eq!(t["reason"], "exit");
        assert_eq!(d.output(id, &machine), expected_counter());
        wait_until("the wrapper to exit", HANG, || {
            (!alive(wrappers[0])).then_some(())
        });
    }
}

/// A `salt` stand-in: answers `test.ping` and the deployment (`file.manage_file`) for every named minion,
/// and runs `cmd.run_all` (the batch's wrapper launch) on this host once per minion, as
/// Salt would: the command rendered with the minion's id and pki directory (each minion
/// has a real RSA key under `<dir>/pki/<minion>`, accepted in `<dir>/master-pki`), with
/// the launch's `env`, logging each wrapper to `<logs>/<run>-<minion>.log`.
pub(crate) fn fake_salt(dir: &Path, logs: &Path, grace_s: u64) -> String {
    for m in STAGED {
        minion_key(dir, m);
    }
    let path = dir.join("salt");
    let script = format!(
        r#"#!/bin/bash
prev=""; fn=""; target=""; envjson=""; cmd=""
for a in "$@"; do
  if [ -z "$fn" ]; then
    case "$a" in test.ping|cmd.run_all|state.single|file.manage_file) fn="$a"; target="$prev";; esac
    prev="$a"
  else
    case "$a" in env=*) envjson="${{a#env=}}";; cmd=*) cmd="${{a#cmd=}}";; esac
  fi
done
v() {{ printf '%s' "$envjson" | sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p"; }}
case "$fn" in
  test.ping)
    for m in $(printf '%s' "$target" | tr ',' ' '); do printf '{{"%s": true}}\n' "$m"; done;;
  state.single|file.manage_file)
    for m in $(printf '%s' "$target" | tr ',' ' '); do
      printf '{{"%s": {{"file_|-w_|-w_|-managed": {{"result": true, "comment": "ok"}}}}}}\n' "$m"
    done;;
  cmd.run_all)
    run=$(v SP_RUN)
    for m in $(printf '%s' "$target" | tr ',' ' '); do
      c="${{cmd//'{{{{ opts["id"] }}}}'/$m}}"
      c="${{c//'{{{{ opts["pki_dir"] }}}}'/{dir}/pki/$m}}"
      SP_URL=$(v SP_URL) SP_RUN=$run SP_STAGE_GRACE_S={grace_s} \
        eval "$c --log '{logs}/$run-$m.log'" >/dev/null 2>&1
      printf '{{"%s": {{"retcode": %d, "stdout": "", "stderr": ""}}}}\n' "$m" $?
    done;;
esac
"#,
        dir = dir.display(),
        logs = logs.display()
    );
    std::fs::write(&path, script).expect("write fake salt");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.to_string_lossy().into_owned()
}

/// A real RSA minion key for `minion`: private in `<dir>/pki/<minion>/minion.pem`, its
/// public half accepted in `<dir>/master-pki/minions/<minion>` (as a master keeps it).
/// Returns the private key's path.
pub(crate) fn minion_key(dir: &Path, minion: &str) -> PathBuf {
    let private = dir.join("pki").join(minion);
    let accepted = dir.join("master-pki").join("minions");
    std::fs::create_dir_all(&private).expect("minion pki dir");
    std::fs::create_dir_all(&accepted).expect("master pki dir");
    let key = private.join("minion.pem");
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&["genrsa", "-traditional", "-out", path_str(&key), "2048"]);
    openssl(&[
        "rsa",
        "-in",
        path_str(&key),
        "-pubout",
        "-out",
        path_str(&accepted.join(minion)),
    ]);
    key
}

const STAGED: [&str; 2] = ["st1", "st2"];

/// A started daemon on the salt stand-in with the wrapper deployed (hashing the debug
/// wrapper for the first deployment can take longer than the pre-staging lead), then one
/// job whose only slot is ~12 s away, so its run is pre-staged; each target's command
/// removes its marker in `markers`.
fn staged_daemon(
    grace_s: u64,
    markers: &Path,
    logs: &Path,
) -> (Daemon, chrono::DateTime<chrono::Utc>) {
    let mut d = Daemon::prepare(&[]);
    let salt = fake_salt(d.root.path(), logs, grace_s);
    for m in STAGED {
        std::fs::write(markers.join(m), "").expect("marker");
    }
    d.write_config(
        "02-salt.yaml",
        &format!(
            "saltpeter_config:\n  executor: salt\n  salt_bin: {salt}\n  wrapper_source: \
             salt://saltpeter-wrapper\n  default_wrapper_path: {WRAPPER}\n  heartbeat: 1\n  \
             pickup_timeout: 20\n  machines_ws_port: {}\n  salt_pki_dir: {}\n",
            free_port(),
            d.root.path().join("master-pki").display()
        ),
    );
    d.spawn();
    d.wait_ready();
    let out = d.ctl(&["wrapper", "deploy", &STAGED.join(",")]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let slot = chrono::Utc::now() + chrono::Duration::seconds(12);
    d.write_config(
        "jobs.yaml",
        &format!(
            "staged:\n  schedule: '{} {} {} {} {} *'\n  targets: [{}]\n  command: 'rm {}/$SP_MACHINE'\n",
            slot.second(),
            slot.minute(),
            slot.hour(),
            slot.day(),
            slot.month(),
            STAGED.join(", "),
            markers.display()
        ),
    );
    (d, slot)
}

/// Waits until every staged wrapper is welcomed, and checks the slot is still ahead.
fn await_staged(d: &Daemon, slot: chrono::DateTime<chrono::Utc>) {
    wait_until("the staged wrappers to connect", HANG, || {
        let log = d.log_text();
        STAGED
            .iter()
            .all(|m| log.contains(&format!(" on {m} (pid")))
            .then_some(())
    });
    assert!(
        chrono::Utc::now() < slot,
        "the wrappers connected only after their slot; the machine is too slow for this \
         test\n{}",
        d.log_text()
    );
}

/// The staged wrappers' pids (once the launches' intermediate processes are gone).
fn staged_wrappers(logs: &Path) -> Vec<u32> {
    wait_until("one process per staged wrapper", HANG, || {
        let pids = pids_with(path_str(logs));
        (pids.len() == STAGED.len()).then_some(pids)
    })
}

#[test]
fn staged_wrappers_of_a_daemon_stopped_for_good_give_up_without_running() {
    for how in [Stop::Ordered, Stop::Crash] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (markers, logs) = (dir.path().join("markers"), dir.path().join("logs"));
        std::fs::create_dir_all(&markers).expect("markers dir");
        std::fs::create_dir_all(&logs).expect("logs dir");
        let (mut d, slot) = staged_daemon(1, &markers, &logs);
        await_staged(&d, slot);
        let wrappers = staged_wrappers(&logs);
        stop(&mut d, how);
        for pid in &wrappers {
            wait_until("the staged wrapper to give up", 2 * HANG, || {
                (!alive(*pid)).then_some(())
            });
        }
        for m in STAGED {
            assert!(
                markers.join(m).exists(),
                "{m} ran without its daemon ({how:?})"
            );
        }
        for entry in std::fs::read_dir(&logs).expect("logs") {
            let text = std::fs::read_to_string(entry.expect("entry").path()).unwrap_or_default();
            assert!(text.contains("nothing was run"), "{how:?}: {text}");
        }
    }
}

#[test]
fn staged_wrappers_reattach_to_a_daemon_restarted_on_the_same_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (markers, logs) = (dir.path().join("markers"), dir.path().join("logs"));
    std::fs::create_dir_all(&markers).expect("markers dir");
    std::fs::create_dir_all(&logs).expect("logs dir");
    let (mut d, slot) = staged_daemon(60, &markers, &logs);
    await_staged(&d, slot);
    let wrappers = staged_wrappers(&logs);
    stop(&mut d, Stop::Ordered);
    d.start_again();
    let runs = d.wait_final_runs("staged", 1);
    for m in STAGED {
        let t = target(&runs[0], m);
        assert_eq!(t["exit_code"], 0, "{}\n{}", runs[0], d.log_text());
        assert!(
            !markers.join(m).exists(),
            "{m} did not run after the restart"
        );
    }
    for pid in &wrappers {
        wait_until("the wrapper to exit", HANG, || (!alive(*pid)).then_some(()));
    }
}

#[test]
fn a_run_recovered_after_a_crash_keeps_its_batch_size() {
    let ledger_dir = tempfile::tempdir().expect("ledger dir");
    let ledger = ledger_dir.path().join("ledger");
    let l = ledger.display();
    let port = fixed_port_config();
    let mut d = Daemon::prepare(&[
        ("01-fast.yaml", FAST),
        ("02-port.yaml", &port),
        (
            "jobs.yaml",
            &format!(
                "batched:\n  schedule: '@yearly'\n  targets: [r1, r2, r3]\n  batch_size: 1\n  \
                 command: 'echo \"start $SP_MACHINE $(date +%s%N)\" >> {l}; sleep 3; \
                 echo \"end $SP_MACHINE $(date +%s%N)\" >> {l}'\n"
            ),
        ),
    ]);
    spawn_with_grace(&mut d, 1);
    let id = d.run_now("batched");
    wait_until("the first batch to start", HANG, || {
        std::fs::read_to_string(&ledger)
            .is_ok_and(|t| t.contains("start "))
            .then_some(())
    });
    stop(&mut d, Stop::Crash);
    restart(&mut d, 1);
    let deadline = std::time::Instant::now() + 2 * HANG;
    let run = loop {
        let r = d.run_record(id);
        if is_final(&r) {
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "run {id} did not finish: {r}\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(run["state"], "succeeded", "{run}\n{}", d.log_text());
    // Each machine ran once, and no two ran at the same time.
    let text = std::fs::read_to_string(&ledger).expect("ledger");
    let mut spans = Vec::new();
    for m in ["r1", "r2", "r3"] {
        let at = |what: &str| -> Vec<u128> {
            text.lines()
                .filter_map(|line| {
                    let mut f = line.split(' ');
                    (f.next() == Some(what) && f.next() == Some(m))
                        .then(|| f.next().and_then(|t| t.parse().ok()))
                        .flatten()
                })
                .collect()
        };
        let (starts, ends) = (at("start"), at("end"));
        assert_eq!((starts.len(), ends.len()), (1, 1), "{m}:\n{text}");
        spans.push((starts[0], ends[0]));
    }
    spans.sort();
    for pair in spans.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "two targets of a batch_size 1 run overlapped:\n{text}\n{}",
            d.log_text()
        );
    }
}
