//! Several masters on one database (docs/ha.md, "Several masters, one database"): the
//! Salt calls other servers ask of this one (`delegate.rs` is the asking side). db takes
//! the rows asked of this server (`DbNotice::SaltCalls`); each is read, checked to be a
//! Salt resolution, launch or deployment, given this server's own `SaltSettings` (its
//! master, its `salt` binary) and made through its own blocking; the answer, or why there
//! is none, is written back into the row for the asker's db to collect.

use crate::roles::main::state::{DbWait, Main};
use crate::wire::db::{DbRequest, SaltCallRow};
use crate::wire::link::{BlockingReply, BlockingRequest, ExecutorKind, LaunchTarget};

/// Calls other servers ask of this one (step 2, serving): made through this server's
/// own master, with its own settings. A request that cannot be read, or that is not a
/// Salt call, is answered with why.
pub(crate) fn serve(core: &mut Main, rows: Vec<SaltCallRow>) {
    for row in rows {
        let req = match bincode::deserialize::<BlockingRequest>(&row.request) {
            Ok(req) => req,
            Err(e) => {
                log::error!(
                    "salt call row {} from {}: the request could not be read ({e}); \
                     answered with the error",
                    row.id,
                    row.from
                );
                let why = format!("{} could not read the request: {e}", core.ha.server);
                answer_served(core, row.id, &row.from, Err(why));
                continue;
            }
        };
        let Some(req) = own_settings(core, req) else {
            log::error!(
                "salt call row {} from {}: not a salt call this server makes for another; \
                 refused",
                row.id,
                row.from
            );
            let why = format!("{} refuses this kind of call", core.ha.server);
            answer_served(core, row.id, &row.from, Err(why));
            continue;
        };
        log::info!(
            "making {} for {} (salt call row {})",
            kind_name(&req),
            row.from,
            row.id
        );
        let id = core.local_blocking_call(req);
        core.delegation.serving.insert(id, (row.id, row.from));
    }
}

/// `req` with this server's own Salt settings; `None` for anything but a Salt
/// resolution, launch or deployment (a local launch is never made for another server).
fn own_settings(core: &Main, req: BlockingRequest) -> Option<BlockingRequest> {
    let settings = core.salt_settings();
    Some(match req {
        BlockingRequest::Resolve {
            target,
            target_type,
            from_cache,
            ..
        } => BlockingRequest::Resolve {
            salt: settings,
            target,
            target_type,
            from_cache,
        },
        BlockingRequest::Launch {
            executor: ExecutorKind::Salt,
            wrapper_path,
            runs,
            url,
            targets,
            await_returns,
            ..
        } => BlockingRequest::Launch {
            executor: ExecutorKind::Salt,
            wrapper_path,
            runs,
            url,
            // Salt launches carry no token; one that came anyway is not used.
            targets: targets
                .into_iter()
                .map(|t| LaunchTarget {
                    machine: t.machine,
                    token: None,
                })
                .collect(),
            salt: Some(settings),
            await_returns,
        },
        BlockingRequest::Deploy {
            minions,
            wrapper_path,
            wrapper_source,
            ..
        } => BlockingRequest::Deploy {
            salt: settings,
            minions,
            wrapper_path,
            wrapper_source,
        },
        _ => return None,
    })
}

pub(super) fn answer_served(
    core: &mut Main,
    row: i64,
    from: &str,
    answer: Result<BlockingReply, String>,
) {
    let reply = match bincode::serialize(&answer) {
        Ok(bytes) => bytes,
        Err(e) => {
            log::error!("salt call row {row} from {from}: could not encode the answer: {e}");
            return;
        }
    };
    core.db_call(
        DbRequest::AnswerSaltCall { id: row, reply },
        DbWait::write("the answer to another server's salt call"),
    );
}

/// The kind of a call, for the log.
pub(super) fn kind_name(req: &BlockingRequest) -> &'static str {
    match req {
        BlockingRequest::Launch { .. } => "a launch",
        BlockingRequest::Resolve { .. } => "a resolution",
        BlockingRequest::Deploy { .. } => "a deployment",
        BlockingRequest::LoadConfig { .. } => "a configuration load",
        BlockingRequest::Deliver(_) => "a notification",
    }
}
