//! Helper processes: slow work `blocking` must not do inside its loop, done by the daemon
//! binary itself started in a hidden mode, its result on stdout.
//!
//! - `--load-config DIR`: read and parse the configuration files that changed (their
//!   known fingerprints on stdin), answer [`ParsedFiles`] — main's reloads, so a large
//!   file never stalls main's loop.
//! - `--publish-wrapper [SALT_CONFIG_DIR]`: hash the wrapper binary and copy it into the
//!   master's file root if it differs there; `--hash-wrapper`: only hash it. Hashed at
//!   each deployment, not once at start: the binary can change on upgrade.
//!
//! The binary is `/proc/self/exe`: the very build `blocking` runs, even when the file was
//! replaced by an upgrade meanwhile (the encoding of the answer must match). [`run_helper`]
//! is the loop side: a child with drained pipes, a deadline after which it is killed, and
//! a bounded answer ([`child::CAPTURE_LIMIT`]).

use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;

use super::state::Blocking;
use crate::config::{self, Fingerprint, ParsedFiles};
use crate::evloop::{Ctx, child};
use crate::ipc::CallId;
use crate::ipc::codec::{self, CodecError};
use crate::ipc::rpc::RemoteError;
use crate::wire::link::BlockingReply;

/// How long a configuration load may take before it is killed (the admin socket's call
/// deadline is 30 s: `saltpeterctl reload` gets an answer before it).
pub(crate) const LOAD_DEADLINE: Duration = Duration::from_secs(20);
/// Hashing and copying a binary of a few MiB.
pub(crate) const PUBLISH_DEADLINE: Duration = Duration::from_secs(60);
/// Encoded trees one load hands over at most; the answer then fits the capture limit.
const HANDOVER_BYTES: usize = 6 * config::MIB as usize;
/// Path of the wrapper inside the master's file roots.
pub(crate) const PUBLISHED_WRAPPER: &str = "saltpeter/saltpeter-wrapper";

/// Why a helper gave no answer, as the loop sees it (told to main as the call's failure).
#[derive(Debug, thiserror::Error)]
pub(crate) enum HelperFailure {
    #[error("cannot create the helper's input: {0}")]
    CreateInput(nix::Error),
    #[error("cannot write the helper's input: {0}")]
    WriteInput(io::Error),
    #[error("cannot start the {name} helper: {source}")]
    Start { name: String, source: io::Error },
    #[error("the {name} helper answered more than {} MiB", child::CAPTURE_LIMIT >> 20)]
    TooLarge { name: String },
    #[error(
        "the {name} helper (pid {pid}) was killed ({status}) after {deadline:?} without \
         finishing"
    )]
    Killed {
        name: String,
        pid: u32,
        status: ExitStatus,
        deadline: Duration,
    },
    /// It exited with a failure; `stderr` is what it said, trimmed, escaped and clipped.
    #[error("the {name} helper failed ({status}): {stderr}")]
    Failed {
        name: String,
        status: ExitStatus,
        stderr: String,
    },
    /// Its stdout is not the answer it owes (`helper`: "configuration", "delivery").
    #[error("the {helper} helper's answer: {source}")]
    Answer {
        helper: &'static str,
        source: CodecError,
    },
    #[error("the wrapper helper answered no hash: {answer:?}")]
    NoHash { answer: String },
}

/// Why a helper process failed (said on its stderr, which the loop reports).
#[derive(Debug, thiserror::Error)]
enum HelperError {
    #[error("cannot read the known files on stdin: {0}")]
    ReadKnown(io::Error),
    #[error("cannot read the known files on stdin: {0}")]
    DecodeKnown(CodecError),
    #[error("{0}")]
    Encode(CodecError),
    #[error("cannot write the answer: {0}")]
    WriteAnswer(io::Error),
    #[error("cannot find my own executable: {0}")]
    OwnExe(io::Error),
    #[error("my executable has no directory")]
    NoExeDir,
    #[error("{path} does not exist")]
    NoWrapper { path: PathBuf },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot create {dir}: {source}")]
    CreateDir { dir: PathBuf, source: io::Error },
    #[error("cannot copy the wrapper to {tmp}: {source}")]
    Copy { tmp: PathBuf, source: io::Error },
    #[error("cannot publish {dest}: {source}")]
    Publish { dest: PathBuf, source: io::Error },
}

/// A helper mode of the daemon binary.
#[derive(Debug, Clone)]
pub(crate) enum Helper {
    LoadConfig(PathBuf),
    /// `salt_config_dir`, if not the default.
    PublishWrapper(Option<String>),
    HashWrapper,
}

/// Runs a helper in this process (the daemon binary's `main`); returns the exit code.
pub(crate) fn run(helper: Helper) -> i32 {
    let result = match helper {
        Helper::LoadConfig(dir) => load_config(&dir),
        Helper::PublishWrapper(salt_config_dir) => {
            publish(&crate::salt_master::file_root(salt_config_dir.as_deref()))
                .map(|h| println!("{h}"))
        }
        Helper::HashWrapper => own_wrapper()
            .and_then(|path| {
                sha256_file(&path).map_err(|source| HelperError::Read { path, source })
            })
            .map(|h| println!("{h}")),
    };
    match result {
        Ok(()) => 0,
        Err(why) => {
            eprintln!("{why}");
            1
        }
    }
}

fn load_config(dir: &Path) -> Result<(), HelperError> {
    let mut input = Vec::new();
    std::io::stdin()
        .take(child::CAPTURE_LIMIT as u64)
        .read_to_end(&mut input)
        .map_err(HelperError::ReadKnown)?;
    let known: Vec<(PathBuf, Fingerprint)> =
        codec::decode(&input, child::CAPTURE_LIMIT).map_err(HelperError::DecodeKnown)?;
    // Bincode across the pipe: a configuration error goes back as its message.
    let answer: Result<ParsedFiles, String> =
        config::parse_changed(dir, &known.into_iter().collect(), Some(HANDOVER_BYTES))
            .map_err(|e| e.to_string());
    let bytes = codec::encode(&answer, child::CAPTURE_LIMIT).map_err(HelperError::Encode)?;
    std::io::stdout()
        .write_all(&bytes)
        .map_err(HelperError::WriteAnswer)
}

/// Start the daemon binary as `args` with `input` on stdin; `on_done` gets its stdout, or
/// why there is none (could not start, killed at `deadline`, failed, answer too large).
pub(crate) fn run_helper(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    args: &[&std::ffi::OsStr],
    input: Option<&[u8]>,
    deadline: Duration,
    on_done: impl FnOnce(&mut Blocking, &mut Ctx<Blocking>, Result<Vec<u8>, HelperFailure>) + 'static,
) {
    let what = args
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut cmd = Command::new("/proc/self/exe");
    cmd.args(args);
    let stdin = match input.map(stdin_of).transpose() {
        Ok(stdin) => stdin.unwrap_or_else(Stdio::null),
        Err(why) => return on_done(state, ctx, Err(why)),
    };
    // Shared by the exit callback and the spawn-error path; only one ever runs.
    let on_done = std::rc::Rc::new(std::cell::Cell::new(Some(on_done)));
    let on_exit = std::rc::Rc::clone(&on_done);
    let name = what.clone();
    let spawned =
        child::spawn_with_stdin(ctx, cmd, stdin, move |state: &mut Blocking, ctx, out| {
            let result = if out.dropped > 0 {
                Err(HelperFailure::TooLarge { name })
            } else if out.status.success() {
                Ok(out.stdout)
            } else if out.status.code().is_none() {
                Err(HelperFailure::Killed {
                    name,
                    pid: out.pid,
                    status: out.status,
                    deadline,
                })
            } else {
                Err(HelperFailure::Failed {
                    name,
                    status: out.status,
                    stderr: crate::logsafe::clip(
                        String::from_utf8_lossy(&out.stderr).trim(),
                        crate::logsafe::REASON_MAX,
                    ),
                })
            };
            if let Some(on_done) = on_exit.take() {
                on_done(state, ctx, result);
            }
        });
    match spawned {
        Ok(id) => {
            ctx.after(deadline, move |_: &mut Blocking, ctx| {
                if child::signal(ctx, id, Signal::SIGKILL) {
                    log::warn!("the {what} helper exceeded {deadline:?}; killed it");
                }
            });
        }
        Err(source) => {
            if let Some(on_done) = on_done.take() {
                on_done(state, ctx, Err(HelperFailure::Start { name: what, source }));
            }
        }
    }
}

/// `bytes` as a readable file (in memory) for a child's stdin.
fn stdin_of(bytes: &[u8]) -> Result<Stdio, HelperFailure> {
    let fd = nix::sys::memfd::memfd_create(
        c"saltpeter-helper-input",
        nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
    )
    .map_err(HelperFailure::CreateInput)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)
        .and_then(|()| file.rewind())
        .map_err(HelperFailure::WriteInput)?;
    Ok(Stdio::from(file))
}

/// Main's `LoadConfig`: the changed files read and parsed by a helper.
pub(crate) fn load_config_call(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    dir: PathBuf,
    known: Vec<(PathBuf, Fingerprint)>,
) {
    let input = match codec::encode(&known, child::CAPTURE_LIMIT) {
        Ok(bytes) => bytes,
        Err(e) => {
            state.reply(id, Err(RemoteError::Failed(e.to_string())));
            return;
        }
    };
    let args = [std::ffi::OsStr::new("--load-config"), dir.as_os_str()];
    run_helper(
        state,
        ctx,
        &args,
        Some(&input),
        LOAD_DEADLINE,
        move |state, _ctx, out| {
            let answer = out.and_then(|bytes| {
                codec::decode::<Result<ParsedFiles, String>>(&bytes, child::CAPTURE_LIMIT).map_err(
                    |source| HelperFailure::Answer {
                        helper: "configuration",
                        source,
                    },
                )
            });
            // The helper's own failure arrives as its message (bincode across the pipe).
            let result = match answer {
                Ok(parsed) => parsed,
                Err(e) => Err(e.to_string()),
            };
            state.reply(
                id,
                result
                    .map(BlockingReply::ConfigParsed)
                    .map_err(RemoteError::Failed),
            );
        },
    );
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    crate::wrapper::sha256_hex(std::fs::File::open(path)?)
}

/// This build's wrapper binary (beside the daemon's own executable).
fn own_wrapper() -> Result<PathBuf, HelperError> {
    let exe = std::env::current_exe().map_err(HelperError::OwnExe)?;
    let path = exe
        .parent()
        .map(|d| d.join("saltpeter-wrapper"))
        .ok_or(HelperError::NoExeDir)?;
    if path.exists() {
        Ok(path)
    } else {
        Err(HelperError::NoWrapper { path })
    }
}

/// Copy the wrapper into the file root if its hash differs (write + rename: minions never
/// fetch a half-written file). Returns the hash.
fn publish(file_root: &Path) -> Result<String, HelperError> {
    let source = own_wrapper()?;
    let hash = sha256_file(&source).map_err(|e| HelperError::Read {
        path: source.clone(),
        source: e,
    })?;
    let dest = file_root.join(PUBLISHED_WRAPPER);
    if sha256_file(&dest).ok().as_deref() == Some(hash.as_str()) {
        return Ok(hash);
    }
    let dir = dest.parent().unwrap_or(file_root);
    std::fs::create_dir_all(dir).map_err(|e| HelperError::CreateDir {
        dir: dir.to_path_buf(),
        source: e,
    })?;
    let tmp = dir.join(format!(".saltpeter-wrapper.{}", std::process::id()));
    if let Err(e) = std::fs::copy(&source, &tmp) {
        return Err(HelperError::Copy { tmp, source: e });
    }
    if let Err(e) = std::fs::rename(&tmp, &dest) {
        return Err(HelperError::Publish { dest, source: e });
    }
    log::info!("published the wrapper ({hash}) at {}", dest.display());
    Ok(hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// Main reports these as the call's failure: they read as they did as strings.
    #[test]
    fn failures_read_as_before() {
        let name = || "--load-config".to_string();
        assert_eq!(
            HelperFailure::TooLarge { name: name() }.to_string(),
            "the --load-config helper answered more than 8 MiB"
        );
        assert_eq!(
            HelperFailure::Killed {
                name: name(),
                pid: 42,
                status: ExitStatus::from_raw(9),
                deadline: LOAD_DEADLINE,
            }
            .to_string(),
            "the --load-config helper (pid 42) was killed (signal: 9 (SIGKILL)) after 20s \
             without finishing"
        );
        assert_eq!(
            HelperFailure::Failed {
                name: name(),
                status: ExitStatus::from_raw(256),
                stderr: "no such directory".into(),
            }
            .to_string(),
            "the --load-config helper failed (exit status: 1): no such directory"
        );
        assert_eq!(
            HelperFailure::NoHash { answer: "x".into() }.to_string(),
            "the wrapper helper answered no hash: \"x\""
        );
    }
}
