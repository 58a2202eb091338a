//! Where an executor plugin is and how it is started.
//!
//! A plugin runs with a clean environment (below), in a process group of its own (a
//! deadline kills the group: no `ssh` it started survives it), with stdin a file holding
//! the request. With a `sha256` pin it is started through the daemon binary's hidden
//! `--exec-pinned` mode, which hashes the open file and executes that same open file
//! (`fexecve`): what was hashed is what runs, even if the path is replaced meanwhile.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest;

use super::ENV_PROTOCOL;
use super::protocol::Op;

/// One configured executor plugin (`saltpeter_config.executors.NAME`, or found in
/// `executor_path`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginSpec {
    pub name: String,
    pub path: PathBuf,
    /// Lower-case hex; the plugin runs only if its file has this hash.
    pub sha256: Option<String>,
    /// Its `config` mapping as JSON text (`{}` when none).
    pub config: String,
    /// The deadline of `launch`, `resolve` and `kill`, in seconds.
    pub timeout_s: u64,
}

/// Default deadline of `launch`, `resolve` and `kill`.
pub const DEFAULT_TIMEOUT_S: u64 = 60;
/// Deadline of `describe` and `check_config`.
pub const CHECK_DEADLINE: Duration = Duration::from_secs(10);

impl PluginSpec {
    /// The `config` mapping handed to every operation.
    pub fn config_value(&self) -> Value {
        serde_json::from_str(&self.config).unwrap_or(Value::Object(Default::default()))
    }

    /// How long `op` may take; `ping` gets the machines' timeout and a margin.
    pub fn deadline(&self, op: Op, ping_timeout_s: u64) -> Duration {
        match op {
            Op::Describe | Op::CheckConfig => CHECK_DEADLINE,
            Op::Ping => Duration::from_secs(ping_timeout_s.saturating_add(10)),
            Op::Resolve | Op::Launch | Op::Kill => Duration::from_secs(self.timeout_s.max(1)),
        }
    }

    /// The command that runs the plugin: a clean environment, its own process group;
    /// pinned, through `daemon_exe --exec-pinned SHA256 PATH`.
    pub fn command(&self, daemon_exe: &Path) -> Command {
        let mut cmd = match &self.sha256 {
            Some(sha) => {
                let mut cmd = Command::new(daemon_exe);
                cmd.arg("--exec-pinned").arg(sha).arg(&self.path);
                cmd
            }
            None => Command::new(&self.path),
        };
        cmd.env_clear().envs(plugin_env()).process_group(0);
        cmd
    }
}

/// `PATH` for a child when the daemon has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The environment every child the daemon starts begins from (a plugin, a local
/// wrapper): `PATH` and `LANG` (the daemon's, else defaults) and the daemon user's `HOME`,
/// `USER` and `LOGNAME`. Nothing else of the daemon's environment (it may hold anything
/// its unit had).
pub fn base_env() -> Vec<(String, String)> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut env = vec![
        (
            "PATH".to_string(),
            var("PATH").unwrap_or_else(|| DEFAULT_PATH.to_string()),
        ),
        (
            "LANG".to_string(),
            var("LANG").unwrap_or_else(|| "C.UTF-8".to_string()),
        ),
    ];
    if let Ok(Some(me)) = nix::unistd::User::from_uid(nix::unistd::getuid()) {
        env.push(("HOME".to_string(), me.dir.to_string_lossy().into_owned()));
        env.push(("USER".to_string(), me.name.clone()));
        env.push(("LOGNAME".to_string(), me.name));
    }
    env
}

/// A plugin's whole environment: the protocol versions, [`base_env`], and
/// `SSH_AUTH_SOCK`, `XDG_RUNTIME_DIR` and `TMPDIR` when set.
pub fn plugin_env() -> Vec<(String, String)> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut env = vec![(ENV_PROTOCOL.to_string(), super::PROTOCOL.to_string())];
    env.extend(base_env());
    for name in ["SSH_AUTH_SOCK", "XDG_RUNTIME_DIR", "TMPDIR"] {
        if let Some(value) = var(name) {
            env.push((name.to_string(), value));
        }
    }
    env
}

/// Why a plugin's file cannot be used (a configuration error at its key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileProblem {
    #[error("missing: {path} does not exist")]
    Missing { path: PathBuf },
    #[error("not_executable: {path} is not an executable file")]
    NotExecutable { path: PathBuf },
    #[error("unreadable: cannot read {path}: {error}")]
    Unreadable { path: PathBuf, error: String },
    #[error("sha256_mismatch: {path} has sha256 {actual}, the pin says {expected}")]
    PinMismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },
}

/// Whether `path` is an executable regular file (a `stat`: cheap enough for a loop).
pub fn check_file(path: &Path) -> Result<(), FileProblem> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(FileProblem::Missing {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(FileProblem::Unreadable {
            path: path.to_path_buf(),
            error: e.to_string(),
        }),
        Ok(m) if !m.is_file() || m.permissions().mode() & 0o111 == 0 => {
            Err(FileProblem::NotExecutable {
                path: path.to_path_buf(),
            })
        }
        Ok(_) => Ok(()),
    }
}

/// The sha256 of what `file` holds, as lower-case hex.
fn sha256_of(file: &mut std::fs::File) -> std::io::Result<String> {
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The hash of the file at `path` (slow for a big file: outside any loop).
pub fn sha256_file(path: &Path) -> Result<String, FileProblem> {
    let mut file = std::fs::File::open(path).map_err(|e| FileProblem::Unreadable {
        path: path.to_path_buf(),
        error: e.to_string(),
    })?;
    sha256_of(&mut file).map_err(|e| FileProblem::Unreadable {
        path: path.to_path_buf(),
        error: e.to_string(),
    })
}

/// Exit status of `--exec-pinned` when the file may not run (its stderr names why).
pub const PINNED_REFUSED: i32 = 126;

/// Why `--exec-pinned` refused to run a plugin (`sha256_mismatch: ...`), from what the
/// operation left; `None` when it ran.
pub fn pinned_refusal(code: Option<i32>, stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let line = text.lines().find_map(|l| l.strip_prefix("saltpeter: "))?;
    (code == Some(PINNED_REFUSED)).then(|| crate::logsafe::clip(line, 400))
}

/// The daemon binary's `--exec-pinned SHA256 PATH`: open PATH, hash it, and execute the
/// very file opened if the hash is SHA256 (this process becomes the plugin); otherwise
/// say why on stderr and return [`PINNED_REFUSED`].
pub fn exec_pinned(expected: &str, path: &Path) -> i32 {
    match exec_pinned_inner(expected, path) {
        Ok(never) => match never {},
        Err(problem) => {
            eprintln!("saltpeter: {problem}");
            PINNED_REFUSED
        }
    }
}

fn exec_pinned_inner(expected: &str, path: &Path) -> Result<std::convert::Infallible, FileProblem> {
    use std::os::fd::AsFd;
    check_file(path)?;
    // Not close-on-exec: a script's interpreter opens it again as /dev/fd/N.
    let mut file = std::fs::File::open(path).map_err(|e| FileProblem::Unreadable {
        path: path.to_path_buf(),
        error: e.to_string(),
    })?;
    nix::fcntl::fcntl(
        &file,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .map_err(|e| FileProblem::Unreadable {
        path: path.to_path_buf(),
        error: e.to_string(),
    })?;
    let actual = sha256_of(&mut file).map_err(|e| FileProblem::Unreadable {
        path: path.to_path_buf(),
        error: e.to_string(),
    })?;
    if !actual.eq_ignore_ascii_case(expected) {
        return Err(FileProblem::PinMismatch {
            path: path.to_path_buf(),
            expected: expected.to_string(),
            actual,
        });
    }
    let cstr = |s: &str| std::ffi::CString::new(s).unwrap_or_default();
    let argv = [cstr(&path.to_string_lossy())];
    let env: Vec<std::ffi::CString> = std::env::vars()
        .map(|(k, v)| cstr(&format!("{k}={v}")))
        .collect();
    let errno = match nix::unistd::fexecve(file.as_fd(), &argv, &env) {
        Ok(never) => match never {},
        Err(errno) => errno,
    };
    Err(if errno == nix::errno::Errno::EACCES {
        FileProblem::NotExecutable {
            path: path.to_path_buf(),
        }
    } else {
        FileProblem::Unreadable {
            path: path.to_path_buf(),
            error: errno.to_string(),
        }
    })
}
