//! The original Saltpeter as a process: its configuration directory, its start in a
//! private mount namespace (it reads the Salt master configuration from the fixed path
//! `/etc/salt/master`), its stop, and what it stored (its per-job log files).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::BenchError;
use crate::harness::free_port;

/// Run as `sh -c NS_SCRIPT sh MASTER SCRATCH EXE ARGS…` inside `unshare --mount
/// --propagation private`: the testbed's master configuration appears at
/// /etc/salt/master for the original only. When that path does not exist, /etc gets a
/// private overlay (its upper layer on a tmpfs mounted on the empty directory SCRATCH) so
/// the file can be created there; the host's /etc is never written.
const NS_SCRIPT: &str = r#"set -e
master="$1"; ov="$2"; shift 2
if [ ! -e /etc/salt/master ]; then
    mount -t tmpfs sp-bench "$ov"
    mkdir "$ov/upper" "$ov/work"
    mount -t overlay sp-bench -o "lowerdir=/etc,upperdir=$ov/upper,workdir=$ov/work" /etc
    mkdir -p /etc/salt
    : > /etc/salt/master
fi
mount --bind "$master" /etc/salt/master
exec "$@"
"#;

/// Where the original runs from: `DIR/config` (its job directory), `DIR/log` (its
/// per-job logs), `DIR/wrapper-log` (its wrappers' logs).
pub struct OriginalSetup<'a> {
    pub exe: &'a str,
    /// The wrapper to launch on the minions (`default_wrapper_path`), if there is one.
    pub wrapper: Option<&'a str>,
    /// The Salt master configuration file to show it at /etc/salt/master.
    pub salt_master: Option<&'a str>,
}

pub struct Original {
    child: Child,
    pub dir: PathBuf,
}

impl Original {
    pub fn start(setup: &OriginalSetup, dir: &Path, jobs: &str) -> Result<Original, BenchError> {
        let config = dir.join("config");
        for d in ["config", "log", "wrapper-log", "ns"] {
            std::fs::create_dir_all(dir.join(d)).map_err(BenchError::io("original dirs"))?;
        }
        let mut base = format!(
            "saltpeter_config:\n  machines_ws_port: {}\n  machines_ws_bind_addr: 127.0.0.1\n  \
             default_saltpeter_server_host: 127.0.0.1\n  api_ws: false\n  logdir: {}\n  \
             default_wrapper_logdir: {}\n",
            free_port()?,
            dir.join("log").display(),
            dir.join("wrapper-log").display()
        );
        if let Some(w) = setup.wrapper {
            base.push_str(&format!("  default_wrapper_path: {w}\n"));
        }
        std::fs::write(config.join("00-base.yaml"), base)
            .map_err(BenchError::io("original config"))?;
        std::fs::write(config.join("jobs.yaml"), jobs)
            .map_err(BenchError::io("original config"))?;
        let log = std::fs::File::create(dir.join("original.log")).map_err(BenchError::io("log"))?;
        let err = log.try_clone().map_err(BenchError::io("log"))?;
        let mut cmd = match setup.salt_master {
            Some(master) => {
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
                    .arg(NS_SCRIPT)
                    .arg("sh")
                    .arg(master)
                    .arg(dir.join("ns"))
                    .arg(setup.exe);
                c
            }
            None => Command::new(setup.exe),
        };
        let child = cmd
            .arg("-c")
            .arg(&config)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(BenchError::io("start the original saltpeter"))?;
        Ok(Original {
            child,
            dir: dir.to_path_buf(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn write_jobs(&self, jobs: &str) -> Result<(), BenchError> {
        std::fs::write(self.dir.join("config/jobs.yaml"), jobs)
            .map_err(BenchError::io("original jobs"))
    }

    /// The original's own output (stdout and stderr) so far.
    pub fn console(&self) -> String {
        std::fs::read_to_string(self.dir.join("original.log")).unwrap_or_default()
    }

    /// What it logged for `job` (`{logdir}/{job}.log`).
    pub fn job_log(&self, job: &str) -> String {
        std::fs::read_to_string(self.dir.join("log").join(format!("{job}.log"))).unwrap_or_default()
    }

    /// Whether it died (its main loop has no guard: a traceback there ends it).
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

impl Drop for Original {
    fn drop(&mut self) {
        // Its own process group: the multiprocessing children go with it.
        let group = nix::unistd::Pid::from_raw(-(self.child.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGTERM);
        std::thread::sleep(Duration::from_secs(2));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
        // Its wrappers are daemons of their own (double fork, setsid); the ones still
        // running (e.g. a command cut off by a deadline) have this directory's
        // wrapper-log in their environment. Their commands go on a closed pipe.
        let marker = format!(
            "SP_WRAPPER_LOGDIR={}",
            self.dir.join("wrapper-log").display()
        );
        for pid in crate::procstat::pids_with("wrapper.py") {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            if environ.split(|b| *b == 0).any(|v| v == marker.as_bytes()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// One firing of a job as the original logged it: its instance's second (the instance is
/// `{job}_{unix seconds}`, taken when it fired) and the machines whose result is stored
/// (the `####### END {machine} from {instance} at …` line that closes each result).
#[derive(Clone, Debug, PartialEq)]
pub struct LoggedFiring {
    pub second: i64,
    pub machines: Vec<String>,
}

pub fn logged_firings(job: &str, log: &str) -> Vec<LoggedFiring> {
    let mut out: Vec<LoggedFiring> = Vec::new();
    let prefix = format!("{job}_");
    for line in log.lines() {
        let Some(rest) = line.strip_prefix("####### END ") else {
            continue;
        };
        let Some((machine, rest)) = rest.split_once(" from ") else {
            continue;
        };
        let Some(instance) = rest.split(' ').next() else {
            continue;
        };
        let Some(second) = instance
            .strip_prefix(&prefix)
            .and_then(|s| s.parse::<i64>().ok())
        else {
            continue;
        };
        match out.iter_mut().find(|f| f.second == second) {
            Some(f) => f.machines.push(machine.to_string()),
            None => out.push(LoggedFiring {
                second,
                machines: vec![machine.to_string()],
            }),
        }
    }
    out
}

/// The output the original stored for `machine` in its result block (`########## M from
/// I ####…`, `**** Exit Code N ******`, the output, `\n####### END M from I at …`): its
/// length in bytes, for the last such block.
pub fn logged_output_len(log: &str, machine: &str) -> Option<usize> {
    let head = format!("########## {machine} from ");
    let start = log.rfind(&head)?;
    let block = &log[start..];
    let exit = block.find("**** Exit Code ")?;
    let body_start = exit + block[exit..].find('\n')? + 1;
    let end = block[body_start..].find(&format!("\n####### END {machine} from "))?;
    Some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "###### Starting fan_1700000020 at 2026-01-01 ################\n\
########## m-02 from fan_1700000020 ################\n**** Exit Code 0 ******\n1\n2\n\n\
####### END m-02 from fan_1700000020 at 2026-01-01 00:00:21 #########\n\
########## m-01 from fan_1700000020 ################\n**** Exit Code 0 ******\nabc\n\n\
####### END m-01 from fan_1700000020 at 2026-01-01 00:00:21 #########\n\
####### END m-01 from fan_1700000040 at 2026-01-01 00:00:41 #########\n\
####### END m-01 from other_1700000040 at 2026-01-01 00:00:41 #########\n";

    #[test]
    fn results_in_the_originals_log_are_grouped_by_firing() {
        let f = logged_firings("fan", LOG);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].second, 1_700_000_020);
        assert_eq!(f[0].machines, vec!["m-02", "m-01"]);
        assert_eq!(f[1].machines, vec!["m-01"]);
        assert!(logged_firings("none", LOG).is_empty());
    }

    #[test]
    fn the_stored_output_is_the_block_between_exit_code_and_end() {
        assert_eq!(logged_output_len(LOG, "m-02"), Some("1\n2\n".len()));
        assert_eq!(logged_output_len(LOG, "m-01"), Some("abc\n".len()));
        assert_eq!(logged_output_len(LOG, "m-03"), None);
    }
}
