//! The `ssh` command lines and the remote scripts, as pure functions of the
//! configuration and the operation (tested without a process).
//!
//! Every command: `ssh -o BatchMode=yes -o ConnectTimeout=N [-o UserKnownHostsFile=F]
//! [-o IdentitiesOnly=yes -i F] [-p PORT] [-l USER] [-o OPTION]... -o LogLevel=ERROR -T
//! [-n] -- HOST COMMAND`. ssh keeps the first value it is given for an option, so ours
//! come before the operator's `ssh_options` where they must hold (BatchMode) and after
//! them where they are only a default (LogLevel, which keeps ssh's warnings out of the
//! reasons we report). StrictHostKeyChecking is never set here: it is the operator's.
//! The remote command is one string the remote login shell runs: each word single-quoted.
//!
//! No secret is ever part of a command line: the launch token goes on ssh's stdin.

use super::config::SshConfig;
use super::hosts::HostSpec;

/// The argv of one `ssh` run against `host` (program first). `stdin`: the remote
/// command reads ssh's stdin (else `-n`).
pub(super) fn ssh_argv(
    config: &SshConfig,
    host: &HostSpec,
    connect_timeout: u64,
    stdin: bool,
    remote: &str,
) -> Vec<String> {
    let mut argv = vec![config.ssh_bin.clone()];
    let mut option = |text: String| {
        argv.push("-o".to_string());
        argv.push(text);
    };
    option("BatchMode=yes".to_string());
    option(format!("ConnectTimeout={connect_timeout}"));
    if let Some(file) = &config.known_hosts_file {
        option(format!("UserKnownHostsFile={file}"));
    }
    if let Some(file) = &config.identity_file {
        option("IdentitiesOnly=yes".to_string());
        argv.push("-i".to_string());
        argv.push(file.clone());
    }
    if let Some(port) = host.port.or(config.port) {
        argv.push("-p".to_string());
        argv.push(port.to_string());
    }
    if let Some(user) = host.user.as_ref().or(config.user.as_ref()) {
        argv.push("-l".to_string());
        argv.push(user.clone());
    }
    for extra in &config.ssh_options {
        argv.push("-o".to_string());
        argv.push(extra.clone());
    }
    argv.push("-o".to_string());
    argv.push("LogLevel=ERROR".to_string());
    argv.push("-T".to_string());
    if !stdin {
        argv.push("-n".to_string());
    }
    argv.push("--".to_string());
    argv.push(host.host.clone());
    argv.push(remote.to_string());
    argv
}

/// `word` quoted for a POSIX shell: in single quotes, each `'` as `'\''`.
pub(super) fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `argv` as one command string for the remote shell.
pub(super) fn shell_command(argv: &[String]) -> String {
    argv.iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the launch script says on stdout, one line each (other lines, a login shell's
/// chatter, are skipped).
pub(super) const HAVE: &str = "saltpeter-launch: have";
pub(super) const NEED: &str = "saltpeter-launch: need";
pub(super) const DEPLOYED: &str = "saltpeter-launch: deployed";
pub(super) const READY: &str = "saltpeter-launch: ready";

/// The launch script, run by `sh -c` with `$1` deploy (1 or 0), `$2` the wrapper's path,
/// `$3` its sha256, `$4` its size in bytes, and the command from `$6` on (`$5` is `--`).
///
/// With deploy: [`HAVE`] when the path already holds that file; else [`NEED`], then
/// exactly size bytes are read from stdin into a temporary file beside the path, checked,
/// made 0755 and renamed over it, and [`DEPLOYED`]. Then [`READY`], and the command
/// replaces the shell: it reads the token line the plugin writes only once it has read
/// [`READY`], so the token never meets `head`. One line (a `csh` login shell passes it to `sh` as
/// well), no `!` (history expansion in some shells). Failures exit 3 with a line on
/// stderr.
const LAUNCH_SCRIPT: &str = concat!(
    r#"deploy=$1 p=$2 want=$3 size=$4; shift 5; "#,
    r#"if [ "$deploy" = 1 ]; then "#,
    r#"have=; if [ -f "$p" ]; then have=$(sha256sum < "$p" 2>/dev/null) || have=; have=${have%% *}; fi; "#,
    r#"if [ "$have" = "$want" ]; then echo "saltpeter-launch: have"; else "#,
    r#"echo "saltpeter-launch: need"; d=${p%/*}; [ -n "$d" ] || d=/; "#,
    r#"mkdir -p "$d" || { echo "cannot create the directory $d" >&2; exit 3; }; "#,
    r#"t=$(mktemp "$p.XXXXXX") || { echo "cannot create a temporary file beside $p" >&2; exit 3; }; "#,
    r#"head -c "$size" > "$t" || { rm -f "$t"; echo "cannot write $t" >&2; exit 3; }; "#,
    r#"got=$(sha256sum < "$t") || { rm -f "$t"; echo "cannot hash $t (sha256sum)" >&2; exit 3; }; "#,
    r#"got=${got%% *}; "#,
    r#"[ "$got" = "$want" ] || { rm -f "$t"; echo "the copy of $p has sha256 $got, not $want" >&2; exit 3; }; "#,
    r#"chmod 755 "$t" && mv -f "$t" "$p" || { rm -f "$t"; echo "cannot install $p" >&2; exit 3; }; "#,
    r#"echo "saltpeter-launch: deployed"; fi; fi; "#,
    r#"echo "saltpeter-launch: ready"; exec "$@""#,
);

/// What to install before the launch: the wrapper at `path` with `sha256`, `size` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Install<'a> {
    pub(super) path: &'a str,
    pub(super) sha256: &'a str,
    pub(super) size: u64,
}

/// The remote command of a launch: the launch script around `command`.
pub(super) fn launch_remote(install: Option<&Install>, command: &[String]) -> String {
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        LAUNCH_SCRIPT.to_string(),
        "saltpeter-launch".to_string(),
    ];
    match install {
        Some(install) => argv.extend([
            "1".to_string(),
            install.path.to_string(),
            install.sha256.to_string(),
            install.size.to_string(),
        ]),
        None => argv.extend(["0", "-", "-", "0"].map(str::to_string)),
    }
    argv.push("--".to_string());
    argv.extend(command.iter().cloned());
    shell_command(&argv)
}

/// What the kill script says, then N (the wrappers signalled).
pub(super) const KILLED: &str = "saltpeter-kill: killed ";

/// The kill script, `$1` the run: SIGTERM to every `saltpeter-wrapper` process (its
/// `comm`, cut to 15 characters by the kernel) whose environment holds `SP_RUN=$1`.
const KILL_SCRIPT: &str = concat!(
    r#"run=$1 n=0; "#,
    r#"for d in /proc/[0-9]*; do "#,
    r#"c=$(cat "$d/comm" 2>/dev/null) || continue; [ "$c" = saltpeter-wrapp ] || continue; "#,
    r#"tr '\0' '\n' 2>/dev/null < "$d/environ" | grep -qx "SP_RUN=$run" || continue; "#,
    r#"kill -TERM "${d#/proc/}" 2>/dev/null && n=$((n + 1)); "#,
    r#"done; echo "saltpeter-kill: killed $n""#,
);

/// The remote command of a kill of `run`.
pub(super) fn kill_remote(run: u64) -> String {
    shell_command(&[
        "sh".to_string(),
        "-c".to_string(),
        KILL_SCRIPT.to_string(),
        "saltpeter-kill".to_string(),
        run.to_string(),
    ])
}
