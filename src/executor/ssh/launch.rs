//! `launch` over ssh: one connection per target, in parallel, each running the launch
//! script (command.rs) around the target's command.
//!
//! Per target:
//! 1. Check the machine, the command and the token (one line: it is written as one).
//! 2. With `deploy`, the script answers whether `wrapper.path` holds this build; if not,
//!    the wrapper's bytes go down the same connection and the script installs them
//!    (`deployed`).
//! 3. Once the script says it is ready, the token and a newline go on ssh's stdin and
//!    stdin closes: the command (the wrapper) reads the token from its stdin.
//! 4. ssh's exit says how it went: 0 `launched`; 255 before the script said anything, or
//!    while deploying, `unreachable`; anything else `failed` with ssh's stderr.
//!
//! Targets not started within the budget (`op_timeout`) are reported failed.

use std::fs::File;
use std::time::Instant;

use super::command::{self, DEPLOYED, HAVE, Install, NEED, READY};
use super::config::SshConfig;
use super::hosts::parse_spec;
use super::session::{Ended, Session, for_each, reason};
use crate::executor::protocol::{LaunchArgs, LaunchTarget, WrapperFile};
use crate::executor::sdk::Reporter;

/// How one target ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Launched,
    Failed(String),
    Unreachable(String),
}

/// How far a launch got when its connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing from the script yet: the connection may never have been made.
    Connecting,
    /// The script runs (deploying).
    Deploying,
    /// The command was started with the token on its stdin.
    Started,
}

/// The wrapper to deploy, checked once for every target.
struct Source<'a> {
    file: &'a WrapperFile,
    size: u64,
}

/// Launch every target of `args`, reporting each.
pub(super) fn launch(config: &SshConfig, args: &LaunchArgs, report: &Reporter, until: Instant) {
    let source = if args.targets.iter().any(|t| t.deploy) {
        Some(check_source(&args.wrapper))
    } else {
        None
    };
    let skipped = for_each(&args.targets, config.parallel, until, |target| {
        let outcome = match (&source, target.deploy) {
            (Some(Err(why)), true) => Outcome::Failed(why.clone()),
            (Some(Ok(source)), true) => launch_target(config, Some(source), target, until, report),
            _ => launch_target(config, None, target, until, report),
        };
        match outcome {
            Outcome::Launched => report.launched(&target.machine),
            Outcome::Failed(why) => report.failed(&target.machine, &why),
            Outcome::Unreachable(why) => report.unreachable(&target.machine, &why),
        }
    });
    for target in skipped {
        report.failed(
            &target.machine,
            &format!(
                "not started within the launch's {} s (config.op_timeout); raise \
                 config.parallel or the timeouts",
                config.op_timeout
            ),
        );
    }
}

/// The wrapper's source file, its hash as the daemon says, and where it goes.
fn check_source(wrapper: &WrapperFile) -> Result<Source<'_>, String> {
    let path = &wrapper.path;
    if !path.starts_with('/') || path.ends_with('/') || path.chars().any(char::is_control) {
        return Err(format!(
            "the wrapper's path {} is not an absolute file path",
            crate::logsafe::clip(path, 200)
        ));
    }
    let (actual, size) = sha256_and_size(&wrapper.source)
        .map_err(|e| format!("cannot read the wrapper {}: {e}", wrapper.source))?;
    if !actual.eq_ignore_ascii_case(&wrapper.sha256) {
        return Err(format!(
            "the wrapper {} has sha256 {actual}, not {} as the daemon says",
            wrapper.source,
            crate::logsafe::clip(&wrapper.sha256, 80)
        ));
    }
    Ok(Source {
        file: wrapper,
        size,
    })
}

fn launch_target(
    config: &SshConfig,
    source: Option<&Source>,
    target: &LaunchTarget,
    until: Instant,
    report: &Reporter,
) -> Outcome {
    let host = match parse_spec(&target.machine) {
        Ok(host) => host,
        Err(why) => return Outcome::Failed(format!("not a host spec: {why}")),
    };
    if target.command.is_empty() {
        return Outcome::Failed("an empty command".to_string());
    }
    if target.token.is_empty() || target.token.contains(['\n', '\r', '\0']) {
        return Outcome::Failed("the launch token is not one line of text".to_string());
    }
    let sha256 = source.map(|s| s.file.sha256.to_ascii_lowercase());
    let install = source.zip(sha256.as_deref()).map(|(s, sha256)| Install {
        path: &s.file.path,
        sha256,
        size: s.size,
    });
    let remote = command::launch_remote(install.as_ref(), &target.command);
    let argv = command::ssh_argv(config, &host, config.connect_timeout, true, &remote);
    let mut session = match Session::start(&argv, true, until) {
        Ok(session) => session,
        Err(e) => return Outcome::Failed(format!("cannot start {}: {e}", config.ssh_bin)),
    };
    let mut phase = Phase::Connecting;
    if let Some(source) = source {
        match next_word(&mut session, &[HAVE, NEED]) {
            Some(HAVE) => phase = Phase::Deploying,
            Some(_) => {
                phase = Phase::Deploying;
                let sent = File::open(&source.file.source)
                    .and_then(|mut file| session.send_file(&mut file, source.size));
                if let Err(e) = sent {
                    let why = format!("sending the wrapper failed: {e}");
                    return ended(session.finish(), phase, &target.token, Some(why));
                }
                if next_word(&mut session, &[DEPLOYED]).is_none() {
                    return ended(session.finish(), phase, &target.token, None);
                }
                report.deployed(&target.machine);
            }
            None => return ended(session.finish(), phase, &target.token, None),
        }
    }
    if next_word(&mut session, &[READY]).is_none() {
        return ended(session.finish(), phase, &target.token, None);
    }
    // A command that exits without reading its stdin closes it: not an error here, its
    // exit status says what happened.
    let _ = session.write(format!("{}\n", target.token).as_bytes());
    ended(session.finish(), Phase::Started, &target.token, None)
}

/// The next line of the script that is one of `words` (a login shell's chatter is
/// skipped); `None` when the script ended first.
fn next_word<'w>(session: &mut Session, words: &[&'w str]) -> Option<&'w str> {
    loop {
        let line = session.read_line()?;
        if let Some(word) = words.iter().find(|w| line.trim_end() == **w) {
            return Some(word);
        }
    }
}

/// What ssh's exit means for the launch, once it got as far as `phase`.
fn ended(end: Ended, phase: Phase, token: &str, cause: Option<String>) -> Outcome {
    let stderr = reason(&end.stderr, token);
    let with = |what: String| match (&cause, stderr.is_empty()) {
        (Some(cause), true) => format!("{what}: {cause}"),
        (Some(cause), false) => format!("{what}: {cause}; {stderr}"),
        (None, true) => what,
        (None, false) => format!("{what}: {stderr}"),
    };
    match (phase, end.code, end.timed_out) {
        (Phase::Started, Some(0), _) => Outcome::Launched,
        (Phase::Connecting, _, true) => {
            Outcome::Unreachable(with("no answer within the launch's budget".to_string()))
        }
        (_, _, true) => Outcome::Failed(with(
            "the launch did not finish within its budget (config.op_timeout)".to_string(),
        )),
        (Phase::Connecting | Phase::Deploying, Some(255), _) => {
            Outcome::Unreachable(with("ssh exited 255".to_string()))
        }
        (Phase::Deploying, Some(3), _) => {
            Outcome::Failed(with("deploying the wrapper failed".to_string()))
        }
        (Phase::Started, Some(code), _) => {
            Outcome::Failed(with(format!("the command exited {code}")))
        }
        (_, Some(code), _) => Outcome::Failed(with(format!(
            "the launch script exited {code} before starting the command"
        ))),
        (_, None, false) => Outcome::Failed(with("ssh was killed by a signal".to_string())),
    }
}

/// The sha256 (lower-case hex) and size of the file at `path`.
pub(super) fn sha256_and_size(path: &str) -> Result<(String, u64), String> {
    let size = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    let hash = crate::executor::spec::sha256_file(std::path::Path::new(path))
        .map_err(|e| e.to_string())?;
    Ok((hash, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(code: Option<i32>, timed_out: bool, stderr: &str) -> Ended {
        Ended {
            code,
            timed_out,
            stderr: stderr.to_string(),
        }
    }

    #[test]
    fn the_exit_and_the_phase_name_the_outcome() {
        let token = "secret-token";
        let cases = [
            (Phase::Started, end(Some(0), false, ""), Outcome::Launched),
            (
                Phase::Connecting,
                end(
                    Some(255),
                    false,
                    "ssh: connect to host x port 22: Connection refused\n",
                ),
                Outcome::Unreachable(
                    "ssh exited 255: ssh: connect to host x port 22: Connection refused"
                        .to_string(),
                ),
            ),
            (
                Phase::Started,
                end(Some(1), false, "bad token secret-token\n"),
                Outcome::Failed("the command exited 1: bad token [the token]".to_string()),
            ),
            (
                Phase::Deploying,
                end(Some(3), false, "cannot create the directory /x\n"),
                Outcome::Failed(
                    "deploying the wrapper failed: cannot create the directory /x".to_string(),
                ),
            ),
            (
                Phase::Connecting,
                end(None, true, ""),
                Outcome::Unreachable("no answer within the launch's budget".to_string()),
            ),
        ];
        for (phase, ended_as, expected) in cases {
            assert_eq!(ended(ended_as, phase, token, None), expected);
        }
    }
}
