//! Starting the job's command and turning its end into protocol fields.
//!
//! The command runs as `/bin/sh -c COMMAND` in its own process group (so TERM and KILL
//! reach every process it started), stdin `/dev/null`, stdout and stderr as non-blocking
//! pipes for the loop. The environment is built by [`command_env`]: the wrapper's own
//! minus `SP_TOKEN`/`SP_URL`, the user's HOME/USER/LOGNAME, the job's `env`, then the
//! `SP_*` facts. Running as another user needs root: groups are computed with
//! `getgrouplist` before the fork (it reads NSS and allocates), and the child only calls
//! `setgroups`, `setgid`, `setuid` (async-signal-safe syscalls) before exec.

use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};

use mio::unix::pipe::Receiver;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Gid, Pid, Uid, User};

use super::limits::Plan;
use crate::wire::wrapper::{ENV_MACHINE, ENV_RUN, ENV_TOKEN, ENV_TOKEN_FILE, ENV_URL, JobSpec};

/// Why the command did not start; the text goes to the hub as the command's stderr with
/// reason `spawn_failed`.
#[derive(Debug, thiserror::Error)]
pub(super) enum SpawnError {
    #[error("unknown user {name:?} on this host")]
    UnknownUser { name: String },
    #[error("could not look up user {name:?}: {source}")]
    LookUpUser { name: String, source: nix::Error },
    #[error("user name {name:?} holds NUL")]
    NulInUser { name: String },
    #[error("could not list the groups of user {name:?}: {source}")]
    ListGroups { name: String, source: nix::Error },
    #[error("cannot run as user {name:?}: the wrapper runs as uid {euid}, not root")]
    NotRoot { name: String, euid: Uid },
    #[error("cwd {cwd:?} holds NUL")]
    NulInCwd { cwd: String },
    #[error("could not start /bin/sh -c in {cwd:?}: {source}")]
    StartIn { cwd: String, source: io::Error },
    #[error("could not start /bin/sh -c: {0}")]
    Start(io::Error),
    #[error("could not start the command: output pipes missing")]
    NoPipes,
    #[error("could not make an output pipe non-blocking: {0}")]
    NonBlocking(io::Error),
}

/// A started command: the child, its process group and its two output pipes.
pub(super) struct Spawned {
    pub child: Child,
    pub pgid: Pid,
    pub stdout: Receiver,
    pub stderr: Receiver,
}

/// Who to run as, resolved before the fork.
#[derive(Debug, Clone)]
pub(super) struct RunAs {
    pub name: String,
    pub uid: Uid,
    pub gid: Gid,
    pub home: String,
    /// Supplementary groups; `None` when no switch is needed (already that user).
    pub switch_groups: Option<Vec<Gid>>,
}

/// Resolves `user` against the current identity.
pub(super) fn resolve_user(name: &str) -> Result<RunAs, SpawnError> {
    let user = match User::from_name(name) {
        Ok(Some(u)) => u,
        Ok(None) => {
            return Err(SpawnError::UnknownUser {
                name: name.to_string(),
            });
        }
        Err(source) => {
            return Err(SpawnError::LookUpUser {
                name: name.to_string(),
                source,
            });
        }
    };
    let euid = Uid::effective();
    let switch_groups = if euid == user.uid {
        None
    } else if euid.is_root() {
        let cname = CString::new(name).map_err(|_| SpawnError::NulInUser {
            name: name.to_string(),
        })?;
        let groups = nix::unistd::getgrouplist(&cname, user.gid).map_err(|source| {
            SpawnError::ListGroups {
                name: name.to_string(),
                source,
            }
        })?;
        Some(groups)
    } else {
        return Err(SpawnError::NotRoot {
            name: name.to_string(),
            euid,
        });
    };
    Ok(RunAs {
        name: user.name,
        uid: user.uid,
        gid: user.gid,
        home: user.dir.to_string_lossy().into_owned(),
        switch_groups,
    })
}

/// The command's environment (pure; `base` is the wrapper's environment).
pub(super) fn command_env(
    base: impl IntoIterator<Item = (OsString, OsString)>,
    job: &JobSpec,
    run: u64,
    machine: &str,
    run_as: Option<&RunAs>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = base
        .into_iter()
        .filter(|(k, _)| k != ENV_TOKEN && k != ENV_TOKEN_FILE && k != ENV_URL)
        .collect();
    let mut set = |k: &str, v: &str| {
        env.retain(|(ek, _)| ek != k);
        env.push((k.into(), v.into()));
    };
    if let Some(u) = run_as {
        set("HOME", &u.home);
        set("USER", &u.name);
        set("LOGNAME", &u.name);
    }
    for (k, v) in &job.env {
        set(k, v);
    }
    let run_text = run.to_string();
    set("SP_JOB_NAME", &job.name);
    set(ENV_RUN, &run_text);
    set("SP_JOB_INSTANCE", &run_text);
    set(ENV_MACHINE, machine);
    env
}

/// Starts the command.
/// `limits` is prepared by the caller (`limits::Plan::prepare`): its scope prefix goes
/// before `/bin/sh`, its child steps run in the child before the user switch.
pub(super) fn spawn(
    job: &JobSpec,
    env: Vec<(OsString, OsString)>,
    run_as: Option<&RunAs>,
    limits: &Plan,
) -> Result<Spawned, SpawnError> {
    let mut cmd = match limits.prefix.split_first() {
        Some((bin, args)) => {
            let mut cmd = Command::new(bin);
            cmd.args(args).arg("/bin/sh");
            cmd
        }
        None => Command::new("/bin/sh"),
    };
    cmd.arg("-c")
        .arg(&job.command)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let cwd = job.cwd.as_deref().filter(|c| !c.is_empty());
    let steps = limits.child_steps();
    // The scope switches the user itself (after systemd made it, as root).
    let switch = run_as
        .filter(|_| !limits.scope_switches_user)
        .and_then(|u| u.switch_groups.clone().map(|g| (u, g)));
    match switch {
        Some((u, groups)) => {
            let (uid, gid) = (u.uid, u.gid);
            // The directory is entered after the switch, so the user needs access to it.
            let cwd = cwd
                .map(|c| CString::new(c).map_err(|_| SpawnError::NulInCwd { cwd: c.to_string() }))
                .transpose()?;
            // SAFETY: the closure runs in the forked child before exec and only makes
            // syscalls (the limits' steps, setgroups/setgid/setuid/chdir) on data prepared
            // before the fork; it does not allocate or take locks. Limits first, while
            // still root; then groups and gid.
            unsafe {
                cmd.pre_exec(move || {
                    steps.apply()?;
                    nix::unistd::setgroups(&groups)?;
                    nix::unistd::setgid(gid)?;
                    nix::unistd::setuid(uid)?;
                    if let Some(dir) = &cwd {
                        nix::unistd::chdir(dir.as_c_str())?;
                    }
                    Ok(())
                });
            }
        }
        None => {
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            // SAFETY: as above, only the prepared syscalls of the limits.
            unsafe {
                cmd.pre_exec(move || steps.apply());
            }
        }
    }
    let mut child = cmd.spawn().map_err(|source| match job.cwd.as_deref() {
        Some(cwd) => SpawnError::StartIn {
            cwd: cwd.to_string(),
            source,
        },
        None => SpawnError::Start(source),
    })?;
    let pgid = Pid::from_raw(child.id() as i32);
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        kill_group(pgid, Signal::SIGKILL);
        let _ = child.wait();
        return Err(SpawnError::NoPipes);
    };
    let stdout = Receiver::from(out);
    let stderr = Receiver::from(err);
    for pipe in [&stdout, &stderr] {
        if let Err(e) = pipe.set_nonblocking(true) {
            kill_group(pgid, Signal::SIGKILL);
            let _ = child.wait();
            return Err(SpawnError::NonBlocking(e));
        }
    }
    Ok(Spawned {
        child,
        pgid,
        stdout,
        stderr,
    })
}

/// Signals the whole process group; a group that is already gone is not an error.
pub(super) fn kill_group(pgid: Pid, signal: Signal) {
    match killpg(pgid, signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => log::warn!("could not send {signal} to process group {pgid}: {e}"),
    }
}

/// Whether any process of the group is still alive.
pub(super) fn group_alive(pgid: Pid) -> bool {
    !matches!(killpg(pgid, None), Err(nix::errno::Errno::ESRCH))
}

/// `(code, signal)` of `exited`: a death by signal reports the signal, never a negative
/// code.
pub(super) fn exit_fields(status: ExitStatus) -> (Option<i32>, Option<i32>) {
    match (status.code(), status.signal()) {
        (_, Some(sig)) => (None, Some(sig)),
        (Some(code), None) => (Some(code), None),
        (None, None) => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn job() -> JobSpec {
        JobSpec {
            name: "backup".into(),
            command: "true".into(),
            user: None,
            cwd: None,
            env: BTreeMap::from([("FOO".into(), "bar".into()), ("HOME".into(), "/j".into())]),
            timeout_s: 0,
            kill_grace_s: 5,
            heartbeat_s: 5,
            overlap_lock: false,
            splay_s: 0,
            timeout_counts_suspended: true,
            limits: Default::default(),
            staged_heartbeat_s: 0,
        }
    }

    fn get<'a>(env: &'a [(OsString, OsString)], k: &str) -> Option<&'a str> {
        env.iter()
            .find(|(ek, _)| ek == k)
            .and_then(|(_, v)| v.to_str())
    }

    #[test]
    fn env_drops_secrets_and_sets_run_facts() {
        let base = vec![
            ("SP_TOKEN".into(), "sekrit".into()),
            ("SP_URL".into(), "ws://h:1".into()),
            ("PATH".into(), "/bin".into()),
            ("SP_JOB_NAME".into(), "spoofed".into()),
        ];
        let u = RunAs {
            name: "alice".into(),
            uid: Uid::from_raw(1000),
            gid: Gid::from_raw(1000),
            home: "/home/alice".into(),
            switch_groups: None,
        };
        let env = command_env(base, &job(), 7, "web1", Some(&u));
        assert_eq!(get(&env, "SP_TOKEN"), None);
        assert_eq!(get(&env, "SP_URL"), None);
        assert_eq!(get(&env, "PATH"), Some("/bin"));
        assert_eq!(get(&env, "FOO"), Some("bar"));
        assert_eq!(
            get(&env, "HOME"),
            Some("/j"),
            "job env overrides the user's HOME"
        );
        assert_eq!(get(&env, "USER"), Some("alice"));
        assert_eq!(get(&env, "SP_JOB_NAME"), Some("backup"));
        assert_eq!(get(&env, "SP_JOB_INSTANCE"), Some("7"));
        assert_eq!(get(&env, "SP_RUN"), Some("7"));
        assert_eq!(get(&env, "SP_MACHINE"), Some("web1"));
        assert_eq!(env.iter().filter(|(k, _)| k == "HOME").count(), 1);
    }

    #[test]
    fn exit_status_maps_to_code_or_signal() {
        let run = |cmd: &str| Command::new("/bin/sh").args(["-c", cmd]).status().unwrap();
        assert_eq!(exit_fields(run("exit 3")), (Some(3), None));
        assert_eq!(exit_fields(run("kill -TERM $$")), (None, Some(15)));
        assert_eq!(exit_fields(run("kill -KILL $$")), (None, Some(9)));
    }

    #[test]
    fn unknown_user_and_bad_cwd_fail_with_text() {
        let err = resolve_user("no-such-user-sp").unwrap_err();
        assert!(matches!(err, SpawnError::UnknownUser { .. }), "{err}");
        assert!(err.to_string().contains("unknown user"), "{err}");
        let mut j = job();
        j.cwd = Some("/nonexistent/dir".into());
        let err = spawn(&j, vec![], None, &Plan::default()).err().unwrap();
        assert!(matches!(err, SpawnError::StartIn { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/dir"), "{err}");
    }

    #[test]
    fn runs_as_another_user_with_its_groups_when_root() {
        if !Uid::effective().is_root() {
            let err = resolve_user("root").unwrap_err();
            assert!(err.to_string().contains("not root"), "{err}");
            return;
        }
        let u = resolve_user("nobody").unwrap();
        let mut j = job();
        j.command = "id -u; id -g; id -G; echo $HOME".into();
        let env = command_env(vec![], &j, 1, "m", Some(&u));
        let mut sp = spawn(&j, env, Some(&u), &Plan::default()).unwrap();
        let status = sp.child.wait().unwrap();
        assert!(status.success());
        sp.stdout.set_nonblocking(false).unwrap();
        let mut out = String::new();
        std::io::Read::read_to_string(&mut sp.stdout, &mut out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], u.uid.to_string());
        assert_eq!(lines[1], u.gid.to_string());
        assert!(
            !lines[2].split(' ').any(|g| g == "0"),
            "root group kept: {out}"
        );
    }
}
