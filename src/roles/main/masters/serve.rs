//! Several masters on one database (docs/ha.md, "Several masters, one database"): the
//! Salt calls other servers ask of this one (the rest of `masters/` is the asking side).
//! db takes the rows asked of this server (`DbNotice::SaltCalls`); each is read, checked
//! to be a Salt resolution, launch or deployment, given this server's own `SaltSettings`
//! (its master, its `salt` binary) and made through its own blocking; the answer, or why
//! there is none, is written back into the row for the asker's db to collect. What a call
//! is waiting for travels in its blocking reply's message (`Message::SaltCallServed`):
//! nothing is kept here.

use crate::config::LoadedConfig;
use crate::logsafe;
use crate::roles::main::messages::{BlockingResult, Message, Out, Then};
use crate::wire::db::{DbRequest, SaltCallRow};
use crate::wire::link::{BlockingReply, BlockingRequest, ExecutorKind, LaunchTarget, SaltSettings};

/// Calls other servers ask of this one, `me` (step 2, serving): made through this
/// server's own master, with its own settings (`policy`). A request that cannot be
/// read, or that is not a Salt call, is answered with why.
pub(crate) fn serve(rows: Vec<SaltCallRow>, me: &str, policy: &Policy) -> Out {
    let mut out = Out::new();
    for row in rows {
        let req = match bincode::deserialize::<BlockingRequest>(&row.request) {
            Ok(req) => req,
            Err(e) => {
                log::error!(
                    "salt call row {} from {}: the request could not be read ({e}); \
                     answered with the error",
                    row.id,
                    logsafe::clip(&row.from, logsafe::NAME_MAX)
                );
                let why = format!("{me} could not read the request: {e}");
                out.extend(answer(row.id, &row.from, Err(why)));
                continue;
            }
        };
        let req = match with_settings(req, policy) {
            Ok(req) => req,
            Err(refusal) => {
                log::error!(
                    "salt call row {} from {}: refused: {refusal}",
                    row.id,
                    logsafe::clip(&row.from, logsafe::NAME_MAX)
                );
                let why = format!("{me} refuses the call: {refusal}");
                out.extend(answer(row.id, &row.from, Err(why)));
                continue;
            }
        };
        log::info!(
            "making {} for {} (salt call row {})",
            kind_name(&req),
            logsafe::clip(&row.from, logsafe::NAME_MAX),
            row.id
        );
        let (id, from) = (row.id, row.from);
        out.local_blocking(req, move |result| Message::SaltCallServed {
            row: id,
            from,
            result,
        });
    }
    out
}

/// This server's blocking answered the call made for `from` (salt call row `row`): the
/// answer goes back into the row.
pub(crate) fn served(row: i64, from: &str, result: BlockingResult) -> Out {
    answer(row, from, result.map_err(|e| e.to_string()))
}

/// What a call made for another server may be: this server's own Salt settings, and
/// only what this server's configuration would launch itself. The rows come from the
/// database, and a launch names the executable each minion runs and the URL its wrapper
/// trusts (the job's command comes from there): a row written behind the servers'
/// backs must not make the minions run another program, or fetch their jobs elsewhere.
pub(crate) struct Policy {
    pub settings: SaltSettings,
    /// Every wrapper path this configuration names (`default_wrapper_path`, each job's
    /// `wrapper_path`, the built-in default).
    pub wrapper_paths: Vec<String>,
    /// `servers`: the wrapper URLs a served launch may give (host, port and pin).
    pub servers: Vec<String>,
    /// This configuration's `wrapper_source` (a deployment uses it, whatever it says).
    pub wrapper_source: Option<String>,
}

impl Policy {
    /// The policy of this configuration, whose Salt settings are `settings`.
    pub(crate) fn of(config: &LoadedConfig, settings: SaltSettings) -> Policy {
        let sp = &config.saltpeter;
        let mut wrapper_paths: Vec<String> = config
            .jobs
            .values()
            .filter_map(|entry| entry.job())
            .map(|job| job.wrapper_path_or_default().to_string())
            .collect();
        wrapper_paths.push(
            sp.default_wrapper_path
                .clone()
                .unwrap_or_else(|| crate::config::DEFAULT_WRAPPER_PATH.to_string()),
        );
        wrapper_paths.sort();
        wrapper_paths.dedup();
        Policy {
            settings,
            wrapper_paths,
            servers: sp.servers.clone(),
            wrapper_source: sp.wrapper_source.clone(),
        }
    }
}

/// `req` with this server's own Salt settings (see [`Policy`]); refused, with why, for
/// anything but a Salt resolution, launch or deployment (a local launch is never made
/// for another server), and for a launch or deployment whose wrapper path this
/// configuration does not name; a launch's wrapper URLs are this configuration's
/// `servers` ([`trusted_urls`]).
pub(crate) fn with_settings(
    req: BlockingRequest,
    policy: &Policy,
) -> Result<BlockingRequest, String> {
    let settings = policy.settings.clone();
    let path_known = |path: &str| {
        if policy.wrapper_paths.iter().any(|p| p == path) {
            Ok(())
        } else {
            Err(format!(
                "the wrapper path {path:?} is not one this server's configuration names"
            ))
        }
    };
    Ok(match req {
        BlockingRequest::Resolve {
            target,
            target_type,
            from_cache,
            ..
        } => {
            if target.chars().any(logsafe::needs_escape) {
                return Err(format!(
                    "the target expression {} holds control, escape or bidi characters",
                    logsafe::clip(&target, logsafe::NAME_MAX)
                ));
            }
            BlockingRequest::Resolve {
                salt: settings,
                target,
                target_type,
                from_cache,
            }
        }
        BlockingRequest::Launch {
            executor: ExecutorKind::Salt,
            wrapper_path,
            runs,
            url,
            targets,
            await_returns,
            ..
        } => {
            path_known(&wrapper_path)?;
            plain_names(targets.iter().map(|t| t.machine.as_str()))?;
            let url = trusted_urls(&url, &policy.servers)?;
            BlockingRequest::Launch {
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
            }
        }
        BlockingRequest::Deploy {
            minions,
            wrapper_path,
            ..
        } => {
            path_known(&wrapper_path)?;
            plain_names(minions.iter().map(String::as_str))?;
            BlockingRequest::Deploy {
                salt: settings,
                minions,
                wrapper_path,
                wrapper_source: policy.wrapper_source.clone(),
            }
        }
        other => {
            return Err(format!(
                "{} is not made for another server",
                kind_name(&other)
            ));
        }
    })
}

/// Every machine a served launch or deployment names is a minion id this server would
/// target itself (`logsafe::is_plain_name`): a row holding another could forge the
/// lines that log it. (One that reads as an option is a name: the command line puts
/// `--` before it.)
fn plain_names<'a>(mut names: impl Iterator<Item = &'a str>) -> Result<(), String> {
    match names.find(|m| !logsafe::is_plain_name(m)) {
        Some(bad) => Err(format!(
            "the machine name {} is not a minion id (1 to 255 bytes, no control, escape or \
             bidi characters)",
            logsafe::clip(bad, logsafe::NAME_MAX)
        )),
        None => Ok(()),
    }
}

/// Scheme, host and port, and certificate pin of a wrapper URL (lower case but the pin).
fn url_key(url: &str) -> (String, String, Option<String>) {
    let url = url.trim();
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (rest, pin) = match rest.split_once('#') {
        Some((rest, pin)) => (rest, Some(pin.to_string())),
        None => (rest, None),
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    (
        scheme.to_ascii_lowercase(),
        authority.to_ascii_lowercase(),
        pin,
    )
}

/// The wrapper URLs a served launch gives (`SP_URL`): this server's `servers`, never
/// the request's own, those the request names first (in its order: the asking server
/// first, when its URL is listed as it builds it) and then the others, so a wrapper
/// trusts only servers this configuration lists and still reaches the leader first.
fn trusted_urls(urls: &str, servers: &[String]) -> Result<String, String> {
    if servers.is_empty() {
        return Err(
            "this server's `servers` is empty: list every server's wrapper URL there \
             (docs/ha.md) to launch for the others"
                .to_string(),
        );
    }
    let mut ordered: Vec<&String> = Vec::with_capacity(servers.len());
    for url in urls.split(',') {
        let key = url_key(url);
        for server in servers {
            if url_key(server) == key && !ordered.contains(&server) {
                ordered.push(server);
            }
        }
    }
    for server in servers {
        if !ordered.contains(&server) {
            ordered.push(server);
        }
    }
    Ok(ordered
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(","))
}

/// The answer to salt call row `row` from `from`, written back into the row.
fn answer(row: i64, from: &str, answer: Result<BlockingReply, String>) -> Out {
    let mut out = Out::new();
    let reply = match bincode::serialize(&answer) {
        Ok(bytes) => bytes,
        Err(e) => {
            log::error!("salt call row {row} from {from}: could not encode the answer: {e}");
            return out;
        }
    };
    out.db(
        DbRequest::AnswerSaltCall { id: row, reply },
        Then::Write("the answer to another server's salt call"),
    );
    out
}

/// The kind of a call, for the log.
pub(super) fn kind_name(req: &BlockingRequest) -> &'static str {
    match req {
        BlockingRequest::Launch { .. } => "a launch",
        BlockingRequest::Resolve { .. } => "a resolution",
        BlockingRequest::Deploy { .. } => "a deployment",
        BlockingRequest::LoadConfig { .. } => "a configuration load",
        BlockingRequest::Deliver(_) => "a notification",
        BlockingRequest::Plugin { .. } => "an executor plugin's operation",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Redacted;
    use crate::wire::link::SaltTargetType;

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
            url: "wss://a:8889/wrapper/v1#sha256=aa".into(),
            targets: vec![LaunchTarget {
                machine: "m1".into(),
                token: Some(Redacted("not for another server".into())),
            }],
            salt: Some(settings("/etc/salt-of-the-asker")),
            await_returns: false,
        }
    }

    fn policy(dir: &str) -> Policy {
        Policy {
            settings: settings(dir),
            wrapper_paths: vec!["/w".into()],
            servers: vec![
                "wss://a:8889#sha256=aa".into(),
                "wss://b:8889/wrapper/v1#sha256=bb".into(),
            ],
            wrapper_source: None,
        }
    }

    #[test]
    fn a_served_call_uses_this_servers_salt_and_carries_no_token() {
        let mine = policy("/etc/salt-here");
        let Ok(BlockingRequest::Launch {
            targets,
            salt,
            runs,
            ..
        }) = with_settings(launch(ExecutorKind::Salt), &mine)
        else {
            panic!("a salt launch is served");
        };
        assert_eq!(salt, Some(mine.settings.clone()));
        assert_eq!(runs, [7]);
        assert!(targets.iter().all(|t| t.token.is_none()));
        let resolve = BlockingRequest::Resolve {
            salt: settings("/etc/salt-of-the-asker"),
            target: "*".into(),
            target_type: SaltTargetType::Glob,
            from_cache: false,
        };
        assert!(matches!(
            with_settings(resolve, &mine),
            Ok(BlockingRequest::Resolve { salt, .. }) if salt == mine.settings
        ));
    }

    /// A row naming a machine or a target that would forge the lines logging it is
    /// refused, with why; a name that reads as an option is a name.
    #[test]
    fn a_served_call_names_only_plain_machines_and_targets() {
        let mine = policy("/etc/salt-here");
        let named = |machine: &str| match launch(ExecutorKind::Salt) {
            BlockingRequest::Launch {
                executor,
                wrapper_path,
                runs,
                url,
                salt,
                await_returns,
                ..
            } => BlockingRequest::Launch {
                executor,
                wrapper_path,
                runs,
                url,
                targets: vec![LaunchTarget {
                    machine: machine.into(),
                    token: None,
                }],
                salt,
                await_returns,
            },
            _ => unreachable!(),
        };
        let why = with_settings(named("m1\n1999 ERROR forged"), &mine).unwrap_err();
        assert!(why.contains("m1\\n1999 ERROR forged"), "{why}");
        assert!(why.contains("not a minion id"), "{why}");
        assert!(with_settings(named("--out-file=x"), &mine).is_ok());
        let deploy = BlockingRequest::Deploy {
            salt: settings("/x"),
            minions: vec!["ok".into(), "a\u{202e}b".into()],
            wrapper_path: "/w".into(),
            wrapper_source: None,
        };
        assert!(with_settings(deploy, &mine).is_err());
        let resolve = BlockingRequest::Resolve {
            salt: settings("/x"),
            target: "web*\n1999 ERROR forged".into(),
            target_type: SaltTargetType::Glob,
            from_cache: false,
        };
        let why = with_settings(resolve, &mine).unwrap_err();
        assert!(!why.contains('\n'), "{why}");
    }

    #[test]
    fn only_salt_calls_are_served_for_another_server() {
        let mine = policy("/etc/salt-here");
        assert!(with_settings(launch(ExecutorKind::Local), &mine).is_err());
        let load = BlockingRequest::LoadConfig {
            dir: "/etc/saltpeter".into(),
            known: Vec::new(),
        };
        assert!(with_settings(load, &mine).is_err());
    }

    /// A row written behind the servers' backs cannot make the minions run another
    /// program, trust another server, or fetch another file.
    #[test]
    fn a_served_launch_runs_only_this_configurations_wrapper_from_its_servers() {
        let mine = policy("/etc/salt-here");
        let with = |path: &str, url: &str| match launch(ExecutorKind::Salt) {
            BlockingRequest::Launch {
                executor,
                runs,
                targets,
                salt,
                await_returns,
                ..
            } => BlockingRequest::Launch {
                executor,
                wrapper_path: path.into(),
                runs,
                url: url.into(),
                targets,
                salt,
                await_returns,
            },
            _ => unreachable!(),
        };
        let url_of = |req: Result<BlockingRequest, String>| match req {
            Ok(BlockingRequest::Launch { url, .. }) => url,
            other => panic!("not served as a launch: {other:?}"),
        };
        // The asker's URLs as it builds them, the second first: the configured entries
        // in that order.
        assert_eq!(
            url_of(with_settings(
                with(
                    "/w",
                    "wss://B:8889#sha256=bb,wss://a:8889/wrapper/v1#sha256=aa"
                ),
                &mine
            )),
            "wss://b:8889/wrapper/v1#sha256=bb,wss://a:8889#sha256=aa"
        );
        // Another server, or a known one with another pin, is never given: the
        // configured servers are.
        for url in [
            "wss://evil:8889#sha256=aa",
            "wss://a:8889#sha256=ee",
            "wss://evil:1,wss://a:8889#sha256=aa",
        ] {
            let given = url_of(with_settings(with("/w", url), &mine));
            assert!(
                !given.contains("evil") && !given.contains("=ee"),
                "{url} -> {given}"
            );
            assert_eq!(given.split(',').count(), 2, "{given}");
        }
        let refused = with_settings(with("/bin/sh", "wss://a:8889#sha256=aa"), &mine);
        assert!(refused.is_err_and(|why| why.contains("/bin/sh")));
        let none = Policy {
            servers: Vec::new(),
            ..policy("/etc/salt-here")
        };
        let refused = with_settings(with("/w", "wss://a:8889#sha256=aa"), &none);
        assert!(refused.is_err_and(|why| why.contains("`servers`")));
        let deploy = BlockingRequest::Deploy {
            salt: settings("/etc/salt-of-the-asker"),
            minions: vec!["m1".into()],
            wrapper_path: "/w".into(),
            wrapper_source: Some("salt://elsewhere/tool".into()),
        };
        assert!(matches!(
            with_settings(deploy, &mine),
            Ok(BlockingRequest::Deploy {
                wrapper_source: None,
                ..
            })
        ));
    }

    /// A row is made through this server's own blocking and its answer goes back into
    /// the row; a row that cannot be read is answered at once with why.
    #[test]
    fn a_row_is_made_here_and_answered_into_the_row() {
        use crate::roles::main::messages::Cmd;
        let mine = policy("/etc/salt-here");
        let row = |id, request| SaltCallRow {
            id,
            from: "b".into(),
            request,
        };
        let good = bincode::serialize(&launch(ExecutorKind::Salt)).unwrap_or_default();
        let out = serve(vec![row(3, vec![0xff]), row(4, good)], "a", &mine);
        let mut cmds = out.into_cmds().into_iter();
        assert!(matches!(
            cmds.next(),
            Some(Cmd::Db {
                req: DbRequest::AnswerSaltCall { id: 3, .. },
                then: Then::Write(_),
                ..
            })
        ));
        let Some(Cmd::Blocking {
            req: BlockingRequest::Launch { salt, .. },
            local: true,
            tell,
        }) = cmds.next()
        else {
            panic!("the launch is made through this server's blocking");
        };
        assert_eq!(salt, Some(mine.settings.clone()));
        assert!(cmds.next().is_none());
        let Message::SaltCallServed { row, from, result } =
            tell(Ok(BlockingReply::Launched(Vec::new())))
        else {
            panic!("the reply comes back as served");
        };
        assert_eq!((row, from.as_str()), (4, "b"));
        let out = served(row, &from, result);
        let [
            Cmd::Db {
                req: DbRequest::AnswerSaltCall { id: 4, reply },
                ..
            },
        ] = out.cmds()
        else {
            panic!("the answer goes into row 4");
        };
        let answer: Result<BlockingReply, String> =
            bincode::deserialize(reply).unwrap_or_else(|e| Err(e.to_string()));
        assert!(matches!(answer, Ok(BlockingReply::Launched(v)) if v.is_empty()));
    }
}
