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
        let Some(req) = with_settings(req, core.salt_settings()) else {
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
pub(crate) fn with_settings(
    req: BlockingRequest,
    settings: crate::wire::link::SaltSettings,
) -> Option<BlockingRequest> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Redacted;
    use crate::wire::link::{SaltSettings, SaltTargetType};

    fn settings(dir: &str) -> SaltSettings {
        SaltSettings {
            salt_bin: "salt".into(),
            config_dir: Some(dir.into()),
            timeout_s: 10,
            concurrency: 4,
            bridge: true,
        }
    }

    fn launch(executor: ExecutorKind) -> BlockingRequest {
        BlockingRequest::Launch {
            executor,
            wrapper_path: "/w".into(),
            runs: vec![7],
            url: "wss://a/wrapper/v1".into(),
            targets: vec![LaunchTarget {
                machine: "m1".into(),
                token: Some(Redacted("not for another server".into())),
            }],
            salt: Some(settings("/etc/salt-of-the-asker")),
            await_returns: false,
        }
    }

    #[test]
    fn a_served_call_uses_this_servers_salt_and_carries_no_token() {
        let mine = settings("/etc/salt-here");
        let Some(BlockingRequest::Launch {
            targets,
            salt,
            runs,
            ..
        }) = with_settings(launch(ExecutorKind::Salt), mine.clone())
        else {
            panic!("a salt launch is served");
        };
        assert_eq!(salt, Some(mine.clone()));
        assert_eq!(runs, [7]);
        assert!(targets.iter().all(|t| t.token.is_none()));
        let resolve = BlockingRequest::Resolve {
            salt: settings("/etc/salt-of-the-asker"),
            target: "*".into(),
            target_type: SaltTargetType::Glob,
            from_cache: false,
        };
        assert!(matches!(
            with_settings(resolve, mine.clone()),
            Some(BlockingRequest::Resolve { salt, .. }) if salt == mine
        ));
    }

    #[test]
    fn only_salt_calls_are_served_for_another_server() {
        let mine = settings("/etc/salt-here");
        assert!(with_settings(launch(ExecutorKind::Local), mine.clone()).is_none());
        let load = BlockingRequest::LoadConfig {
            dir: "/etc/saltpeter".into(),
            known: Vec::new(),
        };
        assert!(with_settings(load, mine).is_none());
    }
}
