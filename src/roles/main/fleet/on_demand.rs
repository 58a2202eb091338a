//! `saltpeterctl wrapper deploy [TARGET]`: put this build's wrapper on minions on demand.
//!
//! Resolve the target with `test.ping` (all minions, `*`, by default;
//! `Message::WrapperTargetResolved`), deploy to the live ones
//! (`Message::WrapperDeployedOnDemand`), answer the admin call with one line per minion.
//! Minions that got it are recorded in the fleet, so no run deploys again.

use super::{Daemon, Fleet, Now, launcher, operator_source};
use crate::config::SaltpeterConfig;
use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::roles::main::messages::{BlockingResult, Message, Out};
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::link::{BlockingRequest, SaltTargetType, blocking_calls};

/// The request (admin call `call`): resolve `target` (every minion by default).
pub(crate) fn start(sp: &SaltpeterConfig, call: CallId, target: Option<String>) -> Out {
    let target = target.unwrap_or_else(|| "*".to_string());
    let path = launcher::default_wrapper_path(sp);
    let mut out = Out::new();
    let req = BlockingRequest::Resolve {
        salt: launcher::salt_settings(sp),
        target: target.clone(),
        target_type: SaltTargetType::Glob,
        from_cache: false,
    };
    out.blocking(req, move |result| Message::WrapperTargetResolved {
        call,
        target,
        path,
        result,
    });
    out
}

/// The target is resolved (`Message::WrapperTargetResolved`): deploy the wrapper at
/// `path` to its live minions, or answer now when there are none.
pub(crate) fn resolved(
    sp: &SaltpeterConfig,
    call: CallId,
    target: String,
    path: String,
    result: BlockingResult,
) -> Out {
    let mut out = Out::new();
    let res = match blocking_calls::Resolve::take(result) {
        Ok(res) => res,
        Err(e) => {
            out.answer(call, failed(format!("target resolution failed: {e}")));
            return out;
        }
    };
    let mut lines = Vec::new();
    for (m, why) in res.unreachable {
        lines.push(format!("{m}: unreachable: {why}"));
    }
    if res.no_match {
        lines.push(format!("no minions matched {target}"));
    }
    if res.live.is_empty() {
        out.answer(call, AdminResponse::Done(lines.join("\n")));
        return out;
    }
    let req = BlockingRequest::Deploy {
        salt: launcher::salt_settings(sp),
        minions: res.live,
        wrapper_path: path.clone(),
        wrapper_source: sp.wrapper_source.clone(),
    };
    out.blocking(req, move |result| Message::WrapperDeployedOnDemand {
        call,
        path,
        lines,
        result,
    });
    out
}

impl Fleet {
    /// The deployment on demand ended (`Message::WrapperDeployedOnDemand`): record what
    /// it put where, and answer with a line per minion after the resolution's `lines`.
    pub(crate) fn deployed_on_demand(
        &mut self,
        daemon: Daemon,
        call: CallId,
        path: String,
        mut lines: Vec<String>,
        result: BlockingResult,
        now: Now,
    ) -> Out {
        let mut out = Out::new();
        let sp = daemon.sp;
        match blocking_calls::Deploy::take(result) {
            Ok((outcomes, hash)) => {
                for o in outcomes {
                    match o.result {
                        Ok(()) => {
                            lines.push(format!("{}: ok ({path})", o.machine));
                            let key = (o.machine, path.clone());
                            self.store(key, hash.clone(), now, &mut out);
                            if !operator_source(sp) {
                                self.this_build = Some(hash.clone());
                            }
                        }
                        Err(why) => lines.push(format!("{}: failed: {why}", o.machine)),
                    }
                }
                out.answer(call, AdminResponse::Done(lines.join("\n")));
            }
            Err(e) => out.answer(call, failed(format!("deployment failed: {e}"))),
        }
        out.extend(self.upgrade_stale(daemon));
        out
    }
}

/// The answer to a deployment on demand that failed: `why` as `Failed("...")`, the form
/// `saltpeterctl wrapper deploy` has always answered with.
fn failed(why: String) -> AdminResponse {
    AdminResponse::Failure(AdminFailure::Internal(format!("Failed({why:?})")))
}
