//! A wrapper's `hello` and main's verdict: the run and target must be in flight and not
//! finished, and the wrapper must prove the (run, machine): a launch token (accepted once,
//! spent by its welcome), the resume key of its session, or a minion-key proof checked
//! against the master's accepted key (`fleet/launcher.rs`). A token welcome waits for the
//! spent token and the session's resume-key hash to be committed (`StoredWelcome`);
//! refusals are logged and recorded as `wrapper_refused` events with their precise reason
//! (within the refusal budgets, `sessions/`), while a peer whose hello proved nothing is
//! told one and the same refusal whatever the reason (`verdicts::told`).

use std::time::Instant;

use crate::ipc::CallId;
use crate::ipc::rpc::{CallError, Due};
use crate::logsafe::{NAME_MAX, clip};
use crate::roles::main::rules::tokens;
use crate::roles::main::run::target::suspend::SuspendReport;
use crate::roles::main::run::target::{Credential, Effect, Token};
use crate::roles::main::sessions::Refusal;
use crate::roles::main::sessions::verdicts::{
    Shown, cannot_limit, finished, not_a_target, not_in_flight, reject, shown, staged_heartbeat_s,
    told,
};
use crate::roles::main::shell::run::effects::apply;
use crate::roles::main::shell::{DbWait, Main};
use crate::wire::Redacted;
use crate::wire::db::{DbRequest, TargetUpdate};
use crate::wire::link::{ConnId, HubReply, MinionProof, WrapperHello, WrapperVerdict};
use crate::wire::records::RunId;
use crate::wire::wrapper::{JobSpec, RejectCode};

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
    if matches!(verdict, WrapperVerdict::Reject { .. }) {
        return refuse(core, id, &peer, run, &machine, verdict);
    }
    log::info!(
        "run {run}: wrapper {} on {machine} (pid {pid}, from {peer}) connected",
        clip(&wrapper_version, NAME_MAX)
    );
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
            core.links.reply_hub(id, HubReply::Verdict(verdict));
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

/// Refuse the hello of `machine` in `run` from `peer` (`verdict` is a `Reject` with its
/// precise code and reason): logged and recorded as decided, within the refusal budgets;
/// the peer gets what it may know ([`told`]).
pub(crate) fn refuse(
    core: &mut Main,
    id: CallId,
    peer: &str,
    run: RunId,
    machine: &str,
    verdict: WrapperVerdict,
) {
    if let WrapperVerdict::Reject { code, message } = &verdict {
        let refusal = Refusal {
            run,
            machine,
            peer,
            code: *code,
            message,
        };
        let job = core.run(run).map(|r| r.job().name.clone());
        let out = core.sessions.refused(refusal, job, Instant::now());
        core.perform(out);
    }
    core.links.reply_hub(id, HubReply::Verdict(told(verdict)));
}

/// The hub closed the link of `machine`'s wrapper in `run` for what it sent (a frame
/// that lies about its size, a message out of place): logged and recorded as a
/// `wrapper_refused` event within the refusal budgets, so a wrapper that keeps
/// reconnecting to do it again costs a bounded log and table.
pub(crate) fn link_rejected(
    core: &mut Main,
    run: RunId,
    machine: &str,
    code: RejectCode,
    why: &str,
) {
    let refusal = Refusal {
        run,
        machine,
        peer: "its link",
        code,
        message: why,
    };
    let job = core.run(run).map(|r| r.job().name.clone());
    let out = core.sessions.refused(refusal, job, Instant::now());
    core.perform(out);
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
        Ok(_) => core.links.reply_hub(w.call, HubReply::Verdict(w.verdict)),
        Err(e) => {
            log::error!(
                "run {}: the session of {} could not be recorded ({e}); it retries",
                w.run,
                w.machine
            );
            core.sessions.unbind(w.conn);
            if let Some(t) = core.target_mut(w.run, &w.machine) {
                t.session_not_stored(w.conn);
            }
            let verdict = reject(
                RejectCode::RetryLater,
                "the server could not record the session",
            );
            core.links.reply_hub(w.call, HubReply::Verdict(verdict));
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

fn vet_hello(
    core: &mut Main,
    conn: ConnId,
    run: RunId,
    machine: &str,
    p: Presented,
    report: SuspendReport,
    can_limit: bool,
) -> Vetted {
    if core.flight.is_recovering() {
        return reject(
            RejectCode::RetryLater,
            "the server is loading the runs in flight",
        )
        .into();
    }
    let Some(active) = core.run(run) else {
        return not_in_flight(run).into();
    };
    let job = active.job().clone();
    let wait_for_go = active.awaiting_go();
    let slot_in_ms = active
        .slot()
        .filter(|_| wait_for_go)
        .map(|slot| u64::try_from(slot - chrono::Utc::now().timestamp_millis()).unwrap_or(0));
    let heartbeat_s = core.config.saltpeter.heartbeat_s;
    if !active.targets().contains_key(machine) {
        return not_a_target(run).into();
    }
    // A resume key proves an earlier welcome; the launch token works until its session
    // has been confirmed by a first message (so a welcome lost in a crash can be retried).
    let (attempt, stored_hash, token_spent) = match core.target(run, machine) {
        Some(t) => (
            t.attempt(),
            t.resume_hash().map(str::to_owned),
            t.token() == Token::Spent,
        ),
        None => {
            return reject(
                RejectCode::UnknownRun,
                "run ended while its hello was vetted",
            )
            .into();
        }
    };
    // A credential proves a target only for the executor that hands it out: a Salt
    // minion's key says nothing about a local target that happens to share its name,
    // and a launch token is only ever written for a local wrapper.
    let salt_run = job.executor == crate::config::Executor::Salt;
    let what = shown(
        salt_run,
        p.token.is_some(),
        p.resume_key.is_some(),
        p.proof.is_some(),
    );
    let credential = match (what, &p.token, &p.resume_key, &p.proof) {
        (Shown::Refused(why), ..) => return reject(RejectCode::BadToken, why).into(),
        (Shown::MinionKey, _, _, Some(proof)) => {
            match check_minion_proof(core, run, machine, proof) {
                Ok(()) => Credential::MinionKey { valid: true },
                Err(why) => return reject(RejectCode::BadToken, why).into(),
            }
        }
        (Shown::ResumeKey, _, Some(key), _) => Credential::ResumeKey {
            valid: tokens::verify_resume_key(stored_hash.as_deref(), &key.0),
        },
        (Shown::LaunchToken, Some(token), _, _) => {
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
        _ => Credential::None,
    };
    // A wrapper that would ignore the job's limits does not run it (told only to a
    // wrapper that proved its target).
    let proven = matches!(
        credential,
        Credential::LaunchToken { valid: true }
            | Credential::ResumeKey { valid: true }
            | Credential::MinionKey { valid: true }
    );
    if let Some(verdict) = cannot_limit(&job.name, proven, can_limit, !job.limits.is_empty()) {
        return verdict.into();
    }
    let Some(target) = core.target_mut(run, machine) else {
        return reject(
            RejectCode::UnknownRun,
            "run ended while its hello was vetted",
        )
        .into();
    };
    let welcomed = match target.hello(Instant::now(), conn, credential) {
        Ok(mut welcomed) => {
            // The command's suspension brought to the stored wish (before the welcome:
            // a reconnecting wrapper acts on it at once).
            welcomed.effects.extend(target.wrapper_hello(conn, report));
            welcomed
        }
        Err(refusal) if refusal.code == RejectCode::Finished => {
            return finished(run, machine).into();
        }
        Err(refusal) => return reject(refusal.code, refusal.message).into(),
    };
    core.sessions.bind(conn, run, machine);
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

/// Check a wrapper's minion-key proof (`Launcher::check_minion_proof`), with the keys
/// other servers' masters published for `machine` (`delegation`).
pub(crate) fn check_minion_proof(
    core: &mut Main,
    run: RunId,
    machine: &str,
    proof: &MinionProof,
) -> Result<(), String> {
    let published = core.delegation.published_keys(machine);
    core.launcher
        .check_minion_proof(&core.config.saltpeter, published, run, machine, proof)
}
