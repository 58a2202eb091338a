//! The pure decisions about wrappers: what a hello gets, when a wrapper's silence makes it
//! lost, when a command started, what a refused output frame logs. No clock, no db: the
//! glue in `shell/wrappers/` (`welcome.rs`, `sessions.rs`) feeds them and acts on the
//! answer.

use std::time::Duration;

use crate::logsafe::{NAME_MAX, clip};
use crate::wire::link::WrapperVerdict;
use crate::wire::records::{Millis, RunId, TargetReason, TargetState};
use crate::wire::wrapper::RejectCode;

pub(crate) fn reject(code: RejectCode, message: impl Into<String>) -> WrapperVerdict {
    WrapperVerdict::Reject {
        code,
        message: message.into(),
    }
}

/// What a peer whose hello proved nothing is told, whatever the reason: the run does not
/// exist or has ended, the machine is not its target, the credential is wrong, spent or of
/// another executor. One code and one wording, byte for byte, so an unauthenticated peer
/// learns neither which runs and targets are in flight nor which executor they use; the
/// server's log and `wrapper_refused` events keep the precise reason. The code is
/// `unknown_run`, which every wrapper, old or new, treats as `bad_token` (a wrapper that
/// has not started its command gives up, one whose command runs keeps it and retries).
pub(crate) const REFUSED: &str =
    "no target in flight matches this run, machine and credential (the server's log says why)";

/// The verdict the peer gets for `verdict`: a refusal of a hello that proved nothing
/// (`unknown_run`, `bad_token`) becomes [`REFUSED`]; the rest is told as decided (a
/// transient `retry_later` says nothing of the run; `finished` and `version` are decided
/// only for a wrapper that proved its target).
pub(crate) fn told(verdict: WrapperVerdict) -> WrapperVerdict {
    match verdict {
        WrapperVerdict::Reject {
            code: RejectCode::UnknownRun | RejectCode::BadToken,
            ..
        } => reject(RejectCode::UnknownRun, REFUSED),
        other => other,
    }
}

/// The refusal of a run that is not in flight (the precise reason; the peer is told
/// [`REFUSED`]).
pub(crate) fn not_in_flight(run: RunId) -> WrapperVerdict {
    reject(
        RejectCode::UnknownRun,
        format!("run {run} is not in flight"),
    )
}

/// The refusal of a machine that is not a target of run `run` in flight (the peer is told
/// [`REFUSED`]).
pub(crate) fn not_a_target(run: RunId) -> WrapperVerdict {
    reject(
        RejectCode::UnknownRun,
        format!("run {run} is in flight, the machine is not its target"),
    )
}

/// The refusal of a target whose outcome is recorded (told only to a wrapper that proved
/// the target).
pub(crate) fn finished(run: RunId, machine: &str) -> WrapperVerdict {
    reject(
        RejectCode::Finished,
        format!("the outcome of {machine} in run {run} is already recorded"),
    )
}

/// The address of `peer` (`ip:port`) without its port, an IPv6 address as its /64
/// (`2001:db8:1:2::/64`: one host holds a whole /64), clipped: the unit refusals are
/// counted by.
pub(crate) fn peer_address(peer: &str) -> String {
    match peer.parse::<std::net::SocketAddr>() {
        Ok(addr) => match crate::client_addr::client_key(addr.ip()) {
            ip @ std::net::IpAddr::V4(_) => ip.to_string(),
            ip @ std::net::IpAddr::V6(_) => format!("{ip}/64"),
        },
        Err(_) => clip(peer, NAME_MAX),
    }
}

/// Whether a hello for a run not in flight is looked up in db first: maybe a wrapper that
/// was declared lost, coming back after its run ended (only a wrapper that can prove an
/// earlier session, and not while the runs in flight are being loaded).
pub(crate) fn look_up_first(
    recovering: bool,
    in_flight: bool,
    resume_key: bool,
    proof: bool,
) -> bool {
    !recovering && !in_flight && (resume_key || proof)
}

/// What db's record of a target says to a wrapper coming back for a run not in flight:
/// `None`, reopen it (it was declared lost and the wrapper proved its session); else the
/// verdict. Only a peer that proved the target learns that its outcome is recorded.
pub(crate) fn coming_back(
    run: RunId,
    machine: &str,
    reason: Option<TargetReason>,
    state: TargetState,
    proven: bool,
) -> Option<WrapperVerdict> {
    match (proven, reason == Some(TargetReason::Lost), state) {
        (true, true, _) => None,
        (true, false, TargetState::Finished) => Some(finished(run, machine)),
        (true, false, _) => Some(reject(
            RejectCode::UnknownRun,
            format!("run {run} is not in flight and its target was not lost"),
        )),
        (false, ..) => Some(reject(
            RejectCode::BadToken,
            format!(
                "run {run} is not in flight, and the hello does not prove its target's \
                 earlier session"
            ),
        )),
    }
}

/// Which credential of a hello is checked. A credential proves a target only for the
/// executor that hands it out: a Salt minion's key says nothing about a local target that
/// happens to share its name, and a launch token is only ever written for a local wrapper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shown {
    /// Refused (`BadToken`), and why.
    Refused(&'static str),
    MinionKey,
    ResumeKey,
    LaunchToken,
    Nothing,
}

pub(crate) fn shown(salt_run: bool, token: bool, resume_key: bool, proof: bool) -> Shown {
    match (token, resume_key, proof) {
        (_, _, true) if !salt_run => {
            Shown::Refused("a minion-key proof is accepted for Salt runs only")
        }
        (true, false, false) if salt_run => {
            Shown::Refused("a launch token is accepted for local runs only")
        }
        (_, _, true) => Shown::MinionKey,
        (_, true, false) => Shown::ResumeKey,
        (true, false, false) => Shown::LaunchToken,
        (false, false, false) => Shown::Nothing,
    }
}

/// A wrapper that would ignore the job's limits does not run it (told only to a wrapper
/// that proved its target).
pub(crate) fn cannot_limit(
    job: &str,
    proven: bool,
    can_limit: bool,
    has_limits: bool,
) -> Option<WrapperVerdict> {
    (proven && !can_limit && has_limits).then(|| {
        reject(
            RejectCode::Version,
            format!(
                "job {job} has resource limits and this wrapper cannot apply them; deploy the \
                 current saltpeter-wrapper"
            ),
        )
    })
}

/// How many heartbeat periods a pre-staged wrapper waits between its heartbeats.
const STAGED_HEARTBEATS: u64 = 6;

/// The heartbeat period a pre-staged wrapper is told to keep while it waits for `go`
/// (`JobSpec::staged_heartbeat_s`): it only waits, so a slower beat is enough.
pub(crate) fn staged_heartbeat_s(heartbeat_s: u64) -> u64 {
    heartbeat_s.max(1) * STAGED_HEARTBEATS
}

/// How long a wrapper may be silent before its target is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Silences {
    /// 3 heartbeats.
    pub heard: Duration,
    /// 3 staged heartbeats: a pre-staged run's target whose command has not started.
    pub staged: Duration,
    /// The grace every wrapper gets after a stall or a pause of the daemon.
    pub grace: Duration,
}

pub(crate) fn silences(heartbeat_s: u64, recovery_grace_s: u64) -> Silences {
    let heartbeat_s = heartbeat_s.max(1);
    let heard = Duration::from_secs(heartbeat_s * 3);
    Silences {
        heard,
        staged: Duration::from_secs(staged_heartbeat_s(heartbeat_s) * 3),
        grace: heard.max(Duration::from_secs(recovery_grace_s)),
    }
}

/// When a command started: the wrapper's word (`at`, its clock at the spawn), kept
/// inside what the server knows — not before `since` (what let it start) and not after
/// `now` (when the news arrived). A wrapper whose clock is off lands on an edge of that
/// window, never outside it; without a window, the arrival.
pub(crate) fn start_time(at: Millis, since: Option<Millis>, now: Millis) -> Millis {
    match since {
        Some(since) if since <= now => at.clamp(since, now),
        _ => now,
    }
}

/// What a refused output frame logs, given how many frames of the target were refused
/// before it (`None`: it was being stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefusedLine {
    /// The first refusal: an error line.
    First,
    /// `frames` refused by now, a power of two: a debug line (logarithmic: a talker
    /// refused for a minute writes a dozen lines, not one per frame).
    Still(u64),
    Quiet,
}

pub(crate) fn refused_line(refused_before: Option<u64>) -> RefusedLine {
    match refused_before.map(|f| f.saturating_add(1)) {
        None => RefusedLine::First,
        Some(frames) if frames.is_power_of_two() => RefusedLine::Still(frames),
        Some(_) => RefusedLine::Quiet,
    }
}
