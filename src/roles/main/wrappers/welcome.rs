//! A wrapper's `hello` and main's verdict: the run and target must be in flight and not
//! finished, and the wrapper must prove the (run, machine): a launch token (accepted
//! once, spent by its welcome), the resume key of its session, or a minion-key proof
//! checked against the master's accepted key (`launcher.rs`). A token welcome waits for
//! the spent token and the session's resume-key hash to be committed (`StoredWelcome`);
//! refusals are recorded as `wrapper_refused` events.

use crate::roles::main::state::wrappers::Refusals;
use std::time::Instant;

use crate::ipc::CallId;
use crate::ipc::rpc::{CallError, Due};
use crate::logsafe::{Admit, NAME_MAX, PerKey, clip};
use crate::roles::main::rules::target::suspend::SuspendReport;
use crate::roles::main::rules::target::{Credential, Effect, Token};
use crate::roles::main::rules::tokens;
use crate::roles::main::run::effects::apply;
use crate::roles::main::state::{DbWait, Main};
use crate::wire::Redacted;
use crate::wire::db::{DbRequest, TargetUpdate};
use crate::wire::link::{ConnId, HubReply, MinionProof, WrapperHello, WrapperVerdict};
use crate::wire::records::RunId;
use crate::wire::wrapper::{JobSpec, RejectCode};

pub(super) fn reject(code: RejectCode, message: impl Into<String>) -> WrapperVerdict {
    WrapperVerdict::Reject {
        code,
        message: message.into(),
    }
}

pub(super) fn answer_hello(core: &mut Main, id: CallId, hello: WrapperHello) {
    let WrapperHello {
        conn,
        peer,
        run,
        machine,
        token,
        resume_key,
        proof,
        wrapper_version,
        pid,
        build,
        can_suspend,
        can_limit,
        suspended,
        ..
    } = hello;
    let report = SuspendReport {
        capable: can_suspend,
        suspended,
    };
    let by_key = proof.is_some();
    let presented = Presented {
        token,
        resume_key,
        proof,
    };
    let (verdict, store) = match vet_hello(core, conn, run, &machine, presented, report, can_limit)
    {
        Vetted::Now(verdict) => (verdict, None),
        Vetted::AfterStore { verdict, hash } => (verdict, Some(hash)),
    };
    match &verdict {
        WrapperVerdict::Welcome { .. } => log::info!(
            "run {run}: wrapper {} on {machine} (pid {pid}, from {peer}) connected",
            clip(&wrapper_version, NAME_MAX)
        ),
        WrapperVerdict::Reject { code, message } => {
            refused(core, run, &machine, &peer, *code, message)
        }
    }
    if !matches!(verdict, WrapperVerdict::Welcome { .. }) {
        core.reply_hub(id, HubReply::Verdict(verdict));
        return;
    }
    core.views
        .ui()
        .wrapper_welcomed(run, &machine, &wrapper_version);
    if let Some(latency) = core.rounds.arrived(run, &machine, Instant::now()) {
        core.launcher.record_launch_latency(latency);
    }
    // A minion proven by its key says which wrapper build it has: fleet state, for free.
    if by_key && let Some(build) = build {
        let now = crate::roles::main::fleet::Now::read();
        let out = core.fleet.hello(&machine, build, now);
        core.perform(out);
    }
    let hash = store.clone();
    let verdict = match store {
        Some(_) => Some(verdict),
        None => {
            core.reply_hub(id, HubReply::Verdict(verdict));
            None
        }
    };
    let due = match verdict {
        Some(_) => Due::Soon,
        None => core.write_due(run),
    };
    core.db_call_due(
        DbRequest::UpdateTarget {
            run,
            machine: machine.clone(),
            update: TargetUpdate {
                wrapper_version: Some(wrapper_version),
                // A session was opened (a minion-key one has no token to spend).
                token_used: Some(true),
                resume_key_sha256: hash,
                ..Default::default()
            },
        },
        match verdict {
            // The spent token and the session's key are durable before the welcome.
            Some(verdict) => DbWait::with(
                StoredWelcome {
                    call: id,
                    conn,
                    run,
                    machine,
                    verdict,
                },
                session_stored,
            ),
            None => DbWait::write("a wrapper version"),
        },
        due,
    );
}

/// Log and record a refusal, at most [`REFUSALS_PER_MINUTE`] per peer address a minute
/// (the rest are counted and said in the next line that goes through). Everything the
/// peer sent is clipped and escaped: a refusal costs the peer one hello and must not cost
/// the server more than a bounded line and row.
fn refused(
    core: &mut Main,
    run: RunId,
    machine: &str,
    peer: &str,
    code: RejectCode,
    message: &str,
) {
    let address = peer_address(peer);
    let held = match core.flight.refusals.admit(&address, Instant::now()) {
        Admit::Record { held } => held,
        Admit::Hold => return,
    };
    let machine = clip(machine, NAME_MAX);
    let message = clip(message, MESSAGE_MAX);
    let peer = clip(peer, NAME_MAX);
    let earlier = match held {
        0 => String::new(),
        n => format!(" ({n} more refusal(s) of {address} in the last minute were not recorded)"),
    };
    log::warn!(
        "run {run}: wrapper on {machine} from {peer} rejected ({code:?}): {message}{earlier}"
    );
    if !code.is_transient() {
        let job = core.run(run).map(|r| r.job.name.clone());
        core.event(
            "wrapper_refused",
            job.as_deref(),
            Some(run),
            Some(&machine),
            format!("a wrapper from {peer} was refused ({code:?}): {message}{earlier}"),
        );
    }
}

/// The address of `peer` (`ip:port`) without its port, clipped: the unit refusals are
/// counted by.
fn peer_address(peer: &str) -> String {
    match peer.parse::<std::net::SocketAddr>() {
        Ok(addr) => addr.ip().to_string(),
        Err(_) => clip(peer, NAME_MAX),
    }
}

/// Refusals logged and recorded per peer address a minute.
pub(crate) const REFUSALS_PER_MINUTE: u32 = 10;
/// Peer addresses whose refusals are counted at once.
const REFUSAL_PEERS: usize = 4096;
/// How much of a refusal's message a log line or event carries.
const MESSAGE_MAX: usize = 1024;

impl Default for Refusals {
    fn default() -> Refusals {
        Refusals(PerKey::new(
            std::time::Duration::from_secs(60),
            REFUSALS_PER_MINUTE,
            REFUSAL_PEERS,
        ))
    }
}

impl Refusals {
    fn admit(&mut self, address: &String, now: Instant) -> Admit {
        self.0.admit(address, now)
    }
}

/// A welcome waiting for its session (spent token, resume key hash) to be committed.
#[derive(Debug, Clone)]
pub(crate) struct StoredWelcome {
    call: CallId,
    conn: ConnId,
    run: RunId,
    machine: String,
    verdict: WrapperVerdict,
}

/// db answered the write of a new session: welcome the wrapper, or, if the session could
/// not be recorded, undo it and have the wrapper retry (its token was not spent).
pub(crate) fn session_stored(
    core: &mut Main,
    w: StoredWelcome,
    result: Result<crate::wire::db::DbReply, CallError>,
) {
    match result {
        Ok(_) => core.reply_hub(w.call, HubReply::Verdict(w.verdict)),
        Err(e) => {
            log::error!(
                "run {}: the session of {} could not be recorded ({e}); it retries",
                w.run,
                w.machine
            );
            core.flight.sessions.remove(&w.conn);
            if let Some(t) = core.target_mut(w.run, &w.machine) {
                t.session_not_stored(w.conn);
            }
            let verdict = reject(
                RejectCode::RetryLater,
                "the server could not record the session",
            );
            core.reply_hub(w.call, HubReply::Verdict(verdict));
        }
    }
}

/// What a hello presented to prove its (run, machine).
struct Presented {
    token: Option<Redacted>,
    resume_key: Option<Redacted>,
    proof: Option<MinionProof>,
}

/// A verdict to send now, or a welcome that waits for its new session to be recorded.
enum Vetted {
    Now(WrapperVerdict),
    AfterStore {
        verdict: WrapperVerdict,
        /// SHA-256 of the session's new resume key.
        hash: String,
    },
}

impl From<WrapperVerdict> for Vetted {
    fn from(verdict: WrapperVerdict) -> Vetted {
        Vetted::Now(verdict)
    }
}

/// The refusal of a run that is not in flight and of a machine that is not its target
/// alike: an unauthenticated peer learns neither which runs nor which machines exist.
pub(super) fn not_in_flight(run: RunId) -> WrapperVerdict {
    reject(
        RejectCode::UnknownRun,
        format!("run {run} has no such target in flight"),
    )
}

fn vet_hello(
    core: &mut Main,
    conn: ConnId,
    run: RunId,
    machine: &str,
    p: Presented,
    report: SuspendReport,
    can_limit: bool,
) -> Vetted {
    if core.flight.recovering {
        return reject(
            RejectCode::RetryLater,
            "the server is loading the runs in flight",
        )
        .into();
    }
    let Some(active) = core.run(run) else {
        return not_in_flight(run).into();
    };
    let job = active.job.clone();
    let wait_for_go = active.awaiting_go();
    let slot_in_ms = active
        .slot
        .filter(|_| wait_for_go)
        .map(|slot| u64::try_from(slot - chrono::Utc::now().timestamp_millis()).unwrap_or(0));
    let heartbeat_s = core.config.saltpeter.heartbeat_s;
    if !active.targets.contains_key(machine) {
        return not_in_flight(run).into();
    }
    // A resume key proves an earlier welcome; the launch token works until its session
    // has been confirmed by a first message (so a welcome lost in a crash can be retried).
    let (attempt, stored_hash, token_spent) = match core.target(run, machine) {
        Some(t) => (
            t.attempt(),
            t.resume_hash().map(str::to_owned),
            t.token() == Token::Spent,
        ),
        None => return reject(RejectCode::UnknownRun, "run ended").into(),
    };
    // A credential proves a target only for the executor that hands it out: a Salt
    // minion's key says nothing about a local target that happens to share its name,
    // and a launch token is only ever written for a local wrapper.
    let salt_run = job.executor == crate::config::Executor::Salt;
    let credential = match (&p.token, &p.resume_key, &p.proof) {
        (_, _, Some(_)) if !salt_run => {
            return reject(
                RejectCode::BadToken,
                "a minion-key proof is accepted for Salt runs only",
            )
            .into();
        }
        (Some(_), None, None) if salt_run => {
            return reject(
                RejectCode::BadToken,
                "a launch token is accepted for local runs only",
            )
            .into();
        }
        (_, _, Some(proof)) => match core.check_minion_proof(run, machine, proof) {
            Ok(()) => Credential::MinionKey { valid: true },
            Err(why) => return reject(RejectCode::BadToken, why).into(),
        },
        (_, Some(key), None) => Credential::ResumeKey {
            valid: tokens::verify_resume_key(stored_hash.as_deref(), &key.0),
        },
        (Some(token), None, None) => {
            let valid = core
                .secret
                .verify_launch_token(run, machine, attempt, &token.0);
            if valid && token_spent {
                // Someone holds a copy of a token whose welcome already went out.
                log::error!(
                    "run {run}: the launch token of {machine} was presented again after its \
                     welcome; refused"
                );
                core.event(
                    "launch_token_reused",
                    Some(&job.name),
                    Some(run),
                    Some(machine),
                    "a launch token was presented again after its welcome went out; \
                     refused (a launch token works once)"
                        .into(),
                );
            }
            Credential::LaunchToken { valid }
        }
        (None, None, None) => Credential::None,
    };
    // A wrapper that would ignore the job's limits does not run it (told only to a
    // wrapper that proved its target).
    let proven = matches!(
        credential,
        Credential::LaunchToken { valid: true }
            | Credential::ResumeKey { valid: true }
            | Credential::MinionKey { valid: true }
    );
    if proven && !can_limit && !job.limits.is_empty() {
        return reject(
            RejectCode::Version,
            format!(
                "job {} has resource limits and this wrapper cannot apply them; deploy the \
                 current saltpeter-wrapper",
                job.name
            ),
        )
        .into();
    }
    let Some(target) = core.target_mut(run, machine) else {
        return reject(RejectCode::UnknownRun, "run ended").into();
    };
    let welcomed = match target.hello(Instant::now(), conn, credential) {
        Ok(mut welcomed) => {
            // The command's suspension brought to the stored wish (before the welcome:
            // a reconnecting wrapper acts on it at once).
            welcomed.effects.extend(target.wrapper_hello(conn, report));
            welcomed
        }
        Err(refusal) if refusal.code == RejectCode::Finished => {
            return reject(
                RejectCode::Finished,
                format!("the outcome of {machine} in run {run} is already recorded"),
            )
            .into();
        }
        Err(refusal) => return reject(refusal.code, refusal.message).into(),
    };
    core.flight
        .sessions
        .insert(conn, (run, machine.to_string()));
    let acked_seq = welcomed.acked_seq;
    // A token welcome opens a session with a key of its own, recorded (hashed, with the
    // spent token) before the welcome goes out; a resume gets its key back; a minion-key
    // session needs none (every connection signs a new challenge).
    let mut effects = welcomed.effects;
    let new_session = effects.contains(&Effect::StoreTokenSpent);
    effects.retain(|e| *e != Effect::StoreTokenSpent);
    let (key, hash) = match (&p.resume_key, new_session) {
        (_, true) => {
            let (key, hash) = tokens::new_resume_key();
            if let Some(t) = core.target_mut(run, machine) {
                effects.extend(t.session_opened(hash.clone()));
            }
            (key, Some(hash))
        }
        (Some(key), false) => (key.0.clone(), None),
        (None, false) => (String::new(), None),
    };
    apply(core, run, machine, effects);
    let verdict = WrapperVerdict::Welcome {
        job: JobSpec {
            name: job.name.clone(),
            command: job.command.clone(),
            user: job.user.clone(),
            cwd: job.cwd.clone(),
            env: job.env.clone(),
            timeout_s: job.timeout_s,
            kill_grace_s: job.kill_grace_s,
            heartbeat_s,
            overlap_lock: job.overlap == crate::config::Overlap::Forbid,
            splay_s: job.splay_s,
            timeout_counts_suspended: job.timeout_counts_suspended,
            limits: Box::new(job.limits.clone()),
            staged_heartbeat_s: if wait_for_go {
                staged_heartbeat_s(heartbeat_s)
            } else {
                0
            },
        },
        resume_key: Redacted(key),
        acked_seq,
        wait_for_go,
        slot_in_ms,
    };
    match hash {
        Some(hash) => Vetted::AfterStore { verdict, hash },
        None => Vetted::Now(verdict),
    }
}

/// How many heartbeat periods a pre-staged wrapper waits between its heartbeats.
const STAGED_HEARTBEATS: u64 = 6;

/// The heartbeat period a pre-staged wrapper is told to keep while it waits for `go`
/// (`JobSpec::staged_heartbeat_s`): it only waits, so a slower beat is enough.
pub(crate) fn staged_heartbeat_s(heartbeat_s: u64) -> u64 {
    heartbeat_s.max(1) * STAGED_HEARTBEATS
}
