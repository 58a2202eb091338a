//! A control group of the command's own, made directly in the cgroup file system when
//! the target has no systemd: under cgroup v2 one group with the memory, cpu and pids
//! controllers; under cgroup v1 one group in each controller's hierarchy. The group is a
//! child of the wrapper's own group (so the command stays inside whatever limits the
//! wrapper already has), named after the run, and removed when the command has ended.
//!
//! Everything here runs before the fork or after the command ended, in the wrapper's
//! process; the forked child only writes `0` to the prepared `cgroup.procs` files.

use std::ffi::CString;
use std::fs;
use std::io::{self, ErrorKind};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::wire::limits::{Limits, show_bytes};

/// The CFS period the quota is a share of (100 ms, as systemd uses).
const PERIOD_US: u64 = 100_000;

/// `cpu_quota` (percent of one CPU) as microseconds of CPU time per period.
fn quota_us(pct: u32) -> u64 {
    u64::from(pct) * PERIOD_US / 100
}

/// Why no control group of the command's own could be made (said in the limits' record,
/// and the next way is tried).
#[derive(Debug, thiserror::Error)]
pub(super) enum CgroupError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("the {controller} controller is not available in {parent}")]
    Unavailable {
        controller: &'static str,
        parent: PathBuf,
    },
    #[error("no cgroup v1 hierarchy has the {controller} controller")]
    NoHierarchy { controller: &'static str },
    #[error("/proc/self/cgroup names no {controller} group")]
    NoOwnGroup { controller: String },
    #[error("/proc/self/cgroup names no cgroup v2 group")]
    NoOwnV2Group,
    #[error("control group path {dir} holds NUL")]
    Nul { dir: PathBuf },
    #[error("cannot create {dir}: {source}")]
    Create { dir: PathBuf, source: io::Error },
    #[error("cannot write {value} to {file}: {source}")]
    Write {
        file: PathBuf,
        value: String,
        source: io::Error,
    },
}

/// A group made for one command.
#[derive(Debug)]
pub(super) struct Group {
    /// `v2` or `v1`.
    pub version: &'static str,
    /// Every directory made (one for v2, one per controller for v1), removed at the end.
    pub dirs: Vec<PathBuf>,
    /// The `cgroup.procs` files the child joins.
    pub procs: Vec<CString>,
    /// The file whose `oom_kill N` line counts kills by the memory limit.
    pub oom_file: Option<PathBuf>,
}

impl Group {
    /// How many processes of the group the kernel killed for its memory limit.
    pub(super) fn oom_kills(&self) -> u64 {
        let Some(file) = &self.oom_file else {
            return 0;
        };
        let text = fs::read_to_string(file).unwrap_or_default();
        text.lines()
            .filter_map(|l| l.strip_prefix("oom_kill "))
            .filter_map(|n| n.trim().parse::<u64>().ok())
            .next()
            .unwrap_or(0)
    }

    /// Removes the group's directories (they must be empty of processes; a command that
    /// left a process behind keeps its group, which is said in the log).
    fn remove(&self) {
        for dir in &self.dirs {
            // The kernel lets go of a reaped process's group a moment after the reap:
            // a few short tries (at the end of the run, 50 ms at most).
            let mut tries = 0;
            loop {
                match fs::remove_dir(dir) {
                    Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) && tries < 10 => {
                        tries += 1;
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    Err(e) if e.kind() != ErrorKind::NotFound => {
                        log::warn!("could not remove control group {}: {e}", dir.display());
                        break;
                    }
                    _ => break,
                }
            }
        }
    }
}

/// A group goes when its command has ended (or was never started): however its owner
/// is dropped, no directory is left behind.
impl Drop for Group {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The group's directory name: the run, the machine and the wrapper's pid (unique on the
/// host), in characters a cgroup name may hold.
pub(super) fn leaf_name(run: u64, machine: &str) -> String {
    let machine: String = machine
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("run-{run}-{machine}-{}", std::process::id())
}

/// Makes the group under cgroup v2 (unified hierarchy at `root`), or says why not.
pub(super) fn make_v2(root: &Path, limits: &Limits, leaf: &str) -> Result<Group, CgroupError> {
    let wanted = controllers(limits);
    let own = own_path(None)?;
    let parent = root.join(own.trim_start_matches('/'));
    let available = read(&parent.join("cgroup.controllers"))?;
    for &c in &wanted {
        if !available.split_whitespace().any(|a| a == c) {
            return Err(CgroupError::Unavailable {
                controller: c,
                parent,
            });
        }
    }
    let enable: String = wanted.iter().map(|c| format!("+{c} ")).collect();
    // A group with processes cannot pass controllers down (except the root): the
    // commands get a group of their own beside the wrapper's only at the root, or in a
    // group delegated without processes.
    let base = parent.join("saltpeter");
    write(&parent.join("cgroup.subtree_control"), enable.trim())?;
    mkdir(&base)?;
    write(&base.join("cgroup.subtree_control"), enable.trim())?;
    let dir = base.join(leaf);
    mkdir(&dir)?;
    let group = Group {
        version: "v2",
        dirs: vec![dir.clone()],
        procs: vec![procs_file(&dir)?],
        oom_file: limits.memory_max.map(|_| dir.join("memory.events")),
    };
    let set = || -> Result<(), CgroupError> {
        if let Some(bytes) = limits.memory_max {
            write(&dir.join("memory.max"), &bytes.to_string())?;
            write_if_present(&dir.join("memory.swap.max"), "0")?;
        }
        if let Some(pct) = limits.cpu_quota {
            let quota = quota_us(pct);
            write(&dir.join("cpu.max"), &format!("{quota} {PERIOD_US}"))?;
        }
        if let Some(n) = limits.tasks_max {
            write(&dir.join("pids.max"), &n.to_string())?;
        }
        Ok(())
    };
    // A limit that cannot be set drops the group, which removes it.
    set()?;
    Ok(group)
}

/// Makes the group under cgroup v1 (one hierarchy per controller, found in
/// `mountinfo`), or says why not.
pub(super) fn make_v1(mountinfo: &str, limits: &Limits, leaf: &str) -> Result<Group, CgroupError> {
    let mut group = Group {
        version: "v1",
        dirs: Vec::new(),
        procs: Vec::new(),
        oom_file: None,
    };
    let made = (|| -> Result<(), CgroupError> {
        for controller in controllers(limits) {
            let mount =
                v1_mount(mountinfo, controller).ok_or(CgroupError::NoHierarchy { controller })?;
            let own = own_path(Some(controller))?;
            let base = mount.join(own.trim_start_matches('/')).join("saltpeter");
            mkdir(&base)?;
            let dir = base.join(leaf);
            mkdir(&dir)?;
            group.dirs.push(dir.clone());
            group.procs.push(procs_file(&dir)?);
            match controller {
                "memory" => {
                    if let Some(bytes) = limits.memory_max {
                        write(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
                        // With swap accounting, memory and swap together get the same
                        // limit: the command cannot swap its way past it.
                        write_if_present(
                            &dir.join("memory.memsw.limit_in_bytes"),
                            &bytes.to_string(),
                        )?;
                        group.oom_file = Some(dir.join("memory.oom_control"));
                    }
                }
                "cpu" => {
                    if let Some(pct) = limits.cpu_quota {
                        let quota = quota_us(pct);
                        write(&dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
                        write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
                    }
                }
                _ => {
                    if let Some(n) = limits.tasks_max {
                        write(&dir.join("pids.max"), &n.to_string())?;
                    }
                }
            }
        }
        Ok(())
    })();
    // On an error the group is dropped, which removes what was made.
    made.map(|()| group)
}

/// What the group limits, for the target's record.
pub(super) fn describe(limits: &Limits) -> Vec<String> {
    let mut parts = Vec::new();
    if let Some(bytes) = limits.memory_max {
        parts.push(format!("memory_max={}", show_bytes(bytes)));
    }
    if let Some(pct) = limits.cpu_quota {
        parts.push(format!("cpu_quota={pct}%"));
    }
    if let Some(n) = limits.tasks_max {
        parts.push(format!("tasks_max={n}"));
    }
    parts
}

/// The controllers the limits need, in a fixed order.
fn controllers(limits: &Limits) -> Vec<&'static str> {
    let mut out = Vec::new();
    if limits.memory_max.is_some() {
        out.push("memory");
    }
    if limits.cpu_quota.is_some() {
        out.push("cpu");
    }
    if limits.tasks_max.is_some() {
        out.push("pids");
    }
    out
}

/// The mount point of the v1 hierarchy that has `controller` among its options.
pub(super) fn v1_mount(mountinfo: &str, controller: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split_whitespace();
        let (fstype, _source, options) = (right.next()?, right.next()?, right.next()?);
        if fstype != "cgroup" || !options.split(',').any(|o| o == controller) {
            return None;
        }
        left.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// The wrapper's own group: for v2 (`None`) the `0::` line of /proc/self/cgroup, for v1
/// the line whose controller list names `controller`.
fn own_path(controller: Option<&str>) -> Result<String, CgroupError> {
    let text = read(Path::new("/proc/self/cgroup"))?;
    own_path_in(&text, controller).ok_or_else(|| match controller {
        Some(c) => CgroupError::NoOwnGroup {
            controller: c.to_string(),
        },
        None => CgroupError::NoOwnV2Group,
    })
}

/// A file of the kernel's (`/proc`, the cgroup file system) as text.
pub(super) fn read(path: &Path) -> Result<String, CgroupError> {
    fs::read_to_string(path).map_err(|source| CgroupError::Read {
        path: path.to_path_buf(),
        source,
    })
}

pub(super) fn own_path_in(text: &str, controller: Option<&str>) -> Option<String> {
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_id, list, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = match controller {
            None => list.is_empty(),
            Some(c) => list.split(',').any(|l| l == c),
        };
        matches.then(|| path.to_string())
    })
}

fn procs_file(dir: &Path) -> Result<CString, CgroupError> {
    CString::new(dir.join("cgroup.procs").as_os_str().as_bytes()).map_err(|_| CgroupError::Nul {
        dir: dir.to_path_buf(),
    })
}

fn mkdir(dir: &Path) -> Result<(), CgroupError> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(CgroupError::Create {
            dir: dir.to_path_buf(),
            source,
        }),
    }
}

fn write(file: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(file, value).map_err(|source| CgroupError::Write {
        file: file.to_path_buf(),
        value: value.to_string(),
        source,
    })
}

fn write_if_present(file: &Path, value: &str) -> Result<(), CgroupError> {
    if file.exists() {
        write(file, value)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
35 25 0:30 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu
38 25 0:33 / /sys/fs/cgroup/memory rw,relatime shared:12 - cgroup cgroup rw,memory
41 25 0:36 / /sys/fs/cgroup/pids rw,relatime shared:15 - cgroup cgroup rw,pids
42 25 0:37 / /sys/fs/cgroup/unified rw,relatime shared:16 - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_v1_hierarchies_and_own_groups() {
        assert_eq!(
            v1_mount(MOUNTINFO, "memory"),
            Some("/sys/fs/cgroup/memory".into())
        );
        assert_eq!(
            v1_mount(MOUNTINFO, "pids"),
            Some("/sys/fs/cgroup/pids".into())
        );
        assert_eq!(v1_mount(MOUNTINFO, "blkio"), None);
        let own = "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu,cpuacct:/x\n0::/\n";
        assert_eq!(
            own_path_in(own, Some("memory")).as_deref(),
            Some("/process_api/abc")
        );
        assert_eq!(own_path_in(own, Some("cpu")).as_deref(), Some("/x"));
        assert_eq!(own_path_in(own, None).as_deref(), Some("/"));
        assert_eq!(own_path_in(own, Some("pids")), None);
    }

    #[test]
    fn leaf_names_are_safe() {
        let name = leaf_name(7, "web/../1 x");
        assert!(name.starts_with("run-7-web_.._1_x-"), "{name}");
        assert!(!name.contains('/'));
    }
}
