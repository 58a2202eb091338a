//! Applying a job's resource limits to its command (`job.limits`).
//!
//! `nice` and `ionice` are set on the command's first process (setpriority(2),
//! ioprio_set(2)) and inherited by everything it starts. `memory_max`, `cpu_quota` and
//! `tasks_max` bound the command's processes together, through the first of these that
//! works on the target:
//! 1. a transient systemd scope (`systemd-run --scope -p MemoryMax=...`), when systemd
//!    runs the host and the wrapper is root;
//! 2. a control group made directly: cgroup v2, else cgroup v1 (`cgroup.rs`);
//! 3. setrlimit(2): `memory_max` as RLIMIT_AS (address space, not resident memory),
//!    `tasks_max` as RLIMIT_NPROC (which counts every process of the user and does not
//!    bind root); `cpu_quota` has no stand-in and is not applied.
//!
//! What applied, and why a better way did not, is one line (`Plan::applied`) that the
//! wrapper sends with `started` and the server keeps in the target's record. After the
//! command, [`Plan::memory_killed`] tells whether the kernel killed it for `memory_max`;
//! dropping the plan removes the command's control group.

use std::ffi::{CString, OsString};
use std::path::Path;
use std::process::Command;

use nix::libc;

use super::cgroup::{self, Group};
use crate::wire::limits::{Limits, show_bytes};

/// Which way the group limits take: the best the target has (`Auto`), or setrlimit
/// only (tests of the last resort).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Way {
    Auto,
    Rlimit,
}

/// The limits as they will be applied to one command, prepared before the fork.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// What applied, for the target's record; `None` when the job has no limits.
    pub applied: Option<String>,
    /// Put before `/bin/sh -c COMMAND` (the systemd scope), else empty.
    pub prefix: Vec<OsString>,
    /// The systemd scope switches the user itself (`--uid`/`--gid`).
    pub scope_switches_user: bool,
    /// The transient unit, to ask systemd afterwards whether it ended by the OOM killer.
    scope: Option<String>,
    /// The command's own control group (its `cgroup.procs` files are what the child
    /// joins); removed when the plan is dropped.
    group: Option<Group>,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    nice: Option<i32>,
    ioprio: Option<i32>,
}

/// Who the command runs as, for the scope's `--uid`/`--gid`.
pub(super) struct Identity {
    pub uid: u32,
    pub gid: u32,
}

impl Plan {
    /// Prepares `limits` for the command of `run` on `machine`; never fails: what cannot
    /// be applied is said in `applied`.
    pub(super) fn prepare(
        limits: &Limits,
        run: u64,
        machine: &str,
        way: Way,
        user: Option<Identity>,
    ) -> Plan {
        let mut plan = Plan {
            nice: limits.nice,
            ioprio: limits.ionice.map(|i| i.ioprio()),
            ..Plan::default()
        };
        if limits.is_empty() {
            return plan;
        }
        let mut said = Vec::new();
        if limits.needs_group() {
            said.push(plan.bound_group(limits, run, machine, way, user));
        }
        if let Some(n) = limits.nice {
            said.push(format!("nice {n}"));
        }
        if let Some(io) = limits.ionice {
            said.push(format!("ionice {io}"));
        }
        plan.applied = Some(said.join("; "));
        plan
    }

    /// Chooses the way for the group limits and prepares it; returns what it says.
    fn bound_group(
        &mut self,
        limits: &Limits,
        run: u64,
        machine: &str,
        way: Way,
        user: Option<Identity>,
    ) -> String {
        let wanted = cgroup::describe(limits).join(" ");
        let mut why_not = Vec::new();
        if way == Way::Auto {
            match systemd_run() {
                Some(bin) => {
                    let unit = format!("saltpeter-{}", cgroup::leaf_name(run, machine));
                    self.prefix = scope_argv(&bin, &unit, limits, user.as_ref());
                    self.scope_switches_user = user.is_some();
                    self.scope = Some(format!("{unit}.scope"));
                    return format!("systemd scope {unit}.scope: {wanted}");
                }
                None => why_not.push("no systemd".to_string()),
            }
        }
        if way != Way::Rlimit {
            let leaf = cgroup::leaf_name(run, machine);
            let root = Path::new("/sys/fs/cgroup");
            let made = if root.join("cgroup.controllers").exists() {
                cgroup::make_v2(root, limits, &leaf)
            } else {
                cgroup::read(Path::new("/proc/self/mountinfo"))
                    .and_then(|info| cgroup::make_v1(&info, limits, &leaf))
            };
            match made {
                Ok(group) => {
                    let text = format!(
                        "cgroup {} {}: {wanted}",
                        group.version,
                        group
                            .dirs
                            .first()
                            .map(|d| d.display().to_string())
                            .unwrap_or_default()
                    );
                    self.group = Some(group);
                    return text;
                }
                Err(e) => why_not.push(format!("no control group ({e})")),
            }
        }
        let mut parts = Vec::new();
        if let Some(bytes) = limits.memory_max {
            self.rlimits.push((libc::RLIMIT_AS, bytes));
            parts.push(format!(
                "memory_max={} as RLIMIT_AS (address space)",
                show_bytes(bytes)
            ));
        }
        if let Some(n) = limits.tasks_max {
            self.rlimits.push((libc::RLIMIT_NPROC, n));
            parts.push(format!(
                "tasks_max={n} as RLIMIT_NPROC (per user; root is not bound)"
            ));
        }
        if let Some(pct) = limits.cpu_quota {
            parts.push(format!(
                "cpu_quota={pct}% NOT applied (needs systemd or cgroups)"
            ));
        }
        let why = if why_not.is_empty() {
            String::new()
        } else {
            format!(" [{}]", why_not.join("; "))
        };
        format!("setrlimit: {}{why}", parts.join(", "))
    }

    /// What the forked child does before exec (and before switching user): join the
    /// group, set the rlimits, nice and ionice. Only syscalls on data prepared before
    /// the fork: no allocation, no locks.
    pub(super) fn child_steps(&self) -> ChildSteps {
        ChildSteps {
            join: self
                .group
                .as_ref()
                .map(|g| g.procs.clone())
                .unwrap_or_default(),
            rlimits: self.rlimits.clone(),
            nice: self.nice,
            ioprio: self.ioprio,
        }
    }

    /// Whether the kernel killed the command for its memory limit (asked once the
    /// command ended: the group's OOM kill count, or the scope's result).
    pub(super) fn memory_killed(&self) -> bool {
        if let Some(group) = &self.group {
            return group.oom_kills() > 0;
        }
        if let Some(unit) = &self.scope {
            let out = Command::new("systemctl")
                .args(["show", "--property=Result", "--value", unit])
                .output();
            let oom =
                matches!(&out, Ok(o) if String::from_utf8_lossy(&o.stdout).trim() == "oom-kill");
            // A failed scope stays loaded until reset; a finished one is gone already.
            let _ = Command::new("systemctl")
                .args(["reset-failed", unit])
                .output();
            return oom;
        }
        false
    }
}

/// The child's part of a plan (moved into `pre_exec`).
pub(super) struct ChildSteps {
    join: Vec<CString>,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    nice: Option<i32>,
    ioprio: Option<i32>,
}

impl ChildSteps {
    /// Runs in the forked child before exec. Async-signal-safe syscalls only.
    pub(super) fn apply(&self) -> std::io::Result<()> {
        for file in &self.join {
            // SAFETY: open/write/close on a NUL-terminated path made before the fork.
            unsafe {
                let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let wrote = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if wrote != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        for &(resource, value) in &self.rlimits {
            let lim = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            // SAFETY: setrlimit with a valid struct.
            if unsafe { libc::setrlimit(resource, &lim) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        if let Some(n) = self.nice {
            // SAFETY: setpriority on this process.
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, n) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        if let Some(prio) = self.ioprio {
            const IOPRIO_WHO_PROCESS: libc::c_long = 1;
            // SAFETY: ioprio_set(IOPRIO_WHO_PROCESS, self, prio) has no pointer arguments.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_ioprio_set,
                    IOPRIO_WHO_PROCESS,
                    0 as libc::c_long,
                    prio as libc::c_long,
                )
            };
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// `systemd-run`, when systemd runs this host and the wrapper may make system scopes.
fn systemd_run() -> Option<std::path::PathBuf> {
    if !Path::new("/run/systemd/system").is_dir() || !nix::unistd::Uid::effective().is_root() {
        return None;
    }
    ["/usr/bin/systemd-run", "/bin/systemd-run"]
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
}

/// `systemd-run --scope` with the limits as unit properties.
fn scope_argv(bin: &Path, unit: &str, limits: &Limits, user: Option<&Identity>) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![bin.into(), "--scope".into(), "--quiet".into()];
    argv.push(format!("--unit={unit}").into());
    if let Some(bytes) = limits.memory_max {
        argv.push("--property".into());
        argv.push(format!("MemoryMax={bytes}").into());
        argv.push("--property".into());
        argv.push("MemorySwapMax=0".into());
    }
    if let Some(pct) = limits.cpu_quota {
        argv.push("--property".into());
        argv.push(format!("CPUQuota={pct}%").into());
    }
    if let Some(n) = limits.tasks_max {
        argv.push("--property".into());
        argv.push(format!("TasksMax={n}").into());
    }
    if let Some(id) = user {
        argv.push(format!("--uid={}", id.uid).into());
        argv.push(format!("--gid={}", id.gid).into());
    }
    argv.push("--".into());
    argv
}

#[cfg(test)]
#[path = "limits_tests.rs"]
mod tests;
