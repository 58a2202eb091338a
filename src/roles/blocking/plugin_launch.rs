//! An executor plugin's `launch` and `kill` (docs/executors.md), answered per target.
//!
//! `launch`: each target's wrapper command is an argv with nothing secret in it (the
//! `SP_*` variables through `env`, then the wrapper with `--daemonize --token-stdin`);
//! its one-time token travels in the request on the plugin's stdin, and the plugin hands
//! it to the wrapper's stdin. Targets that need this build's wrapper first (`deploy`,
//! decided by main) make this loop hash the wrapper binary in a helper process before the
//! launch; the plugin copies it over only when the machine's file differs.
//!
//! Each target's outcome is what the plugin said of it: `launched`, `failed` (254),
//! `unreachable` (255); a target it said nothing of fails with the reason of the
//! operation (the breach, the deadline, the plugin's error).

use std::collections::HashMap;
use std::path::PathBuf;

use super::plugin::start;
use super::state::{Blocking, Launch};
use crate::evloop::Ctx;
use crate::executor::protocol::{self, KillArgs, LaunchArgs, Op, PluginLine, WrapperFile};
use crate::executor::spec::PluginSpec;
use crate::ipc::CallId;
use crate::wire::link::{BlockingReply, LaunchTarget, MinionOutcome};
use crate::wire::records::RunId;
use crate::wire::wrapper::{ENV_MACHINE, ENV_RUN, ENV_URL};

/// The wrapper's command for one target: no secret in it.
pub(crate) fn wrapper_command(launch: &Launch, machine: &str) -> Vec<String> {
    vec![
        "env".to_string(),
        format!("{ENV_URL}={}", launch.url),
        format!("{ENV_RUN}={}", launch.run),
        format!("{ENV_MACHINE}={machine}"),
        launch.wrapper.clone(),
        "--daemonize".to_string(),
        "--token-stdin".to_string(),
    ]
}

/// This build's wrapper binary beside the daemon's.
fn own_wrapper() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.join("saltpeter-wrapper"))
}

/// main's `Launch` through a plugin.
pub(super) fn launch(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    spec: PluginSpec,
    deploy: Vec<String>,
    launch: Launch,
    targets: Vec<LaunchTarget>,
) {
    let deploys = spec_deploys(&deploy, &targets);
    if !deploys {
        return send_launch(state, ctx, id, spec, Vec::new(), None, launch, targets);
    }
    let args = [std::ffi::OsStr::new("--hash-wrapper")];
    super::helpers::run_helper(
        state,
        ctx,
        &args,
        None,
        super::helpers::PUBLISH_DEADLINE,
        move |state, ctx, out| {
            let file = out.map_err(|e| e.to_string()).and_then(|stdout| {
                let hash = String::from_utf8_lossy(&stdout).trim().to_string();
                let source = own_wrapper().ok_or("no wrapper beside the daemon binary")?;
                (hash.len() == 64)
                    .then_some(())
                    .ok_or("no hash of the wrapper")?;
                Ok(WrapperFile {
                    path: launch.wrapper.clone(),
                    source: source.to_string_lossy().into_owned(),
                    sha256: hash,
                })
            });
            match file {
                Ok(file) => send_launch(state, ctx, id, spec, deploy, Some(file), launch, targets),
                Err(why) => {
                    log::warn!(
                        "executor {}: cannot deploy the wrapper ({why}); launching without",
                        spec.name
                    );
                    send_launch(state, ctx, id, spec, Vec::new(), None, launch, targets)
                }
            }
        },
    );
}

fn spec_deploys(deploy: &[String], targets: &[LaunchTarget]) -> bool {
    targets.iter().any(|t| deploy.contains(&t.machine))
}

#[allow(clippy::too_many_arguments)]
fn send_launch(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    spec: PluginSpec,
    deploy: Vec<String>,
    file: Option<WrapperFile>,
    launch: Launch,
    targets: Vec<LaunchTarget>,
) {
    let run = launch.run;
    let machines: Vec<String> = targets.iter().map(|t| t.machine.clone()).collect();
    let args = LaunchArgs {
        run,
        urls: launch
            .url
            .split(',')
            .map(|u| u.trim().to_string())
            .collect(),
        wrapper: file.unwrap_or_else(|| WrapperFile {
            path: launch.wrapper.clone(),
            source: String::new(),
            sha256: String::new(),
        }),
        targets: targets
            .into_iter()
            .map(|t| protocol::LaunchTarget {
                command: wrapper_command(&launch, &t.machine),
                deploy: deploy.contains(&t.machine),
                token: t.token.map(|r| r.0).unwrap_or_default(),
                machine: t.machine,
            })
            .collect(),
    };
    let args = serde_json::to_value(args).unwrap_or_default();
    per_target_op(state, ctx, id, &spec, Op::Launch, args, run, machines);
}

/// A plugin operation on targets of `run` (`launch`, `kill`): each machine's outcome as
/// the plugin said it, or the operation's failure for those it said nothing of.
#[allow(clippy::too_many_arguments)]
fn per_target_op(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    spec: &PluginSpec,
    op: Op,
    args: serde_json::Value,
    run: RunId,
    machines: Vec<String>,
) {
    let deadline = spec.deadline(op, 0);
    let request = protocol::request_within(op, &spec.name, &spec.config_value(), args, deadline);
    let name = spec.name.clone();
    start(
        state,
        ctx,
        spec,
        op,
        request,
        deadline,
        Box::new(move |state: &mut Blocking, _, read| {
            let (lines, failure) = match read {
                Ok(reading) => {
                    let failure = reading.outcome().err();
                    (reading.progress, failure)
                }
                Err(why) => (Vec::new(), Some(why)),
            };
            let outcomes = per_target(&name, run, &machines, &lines, failure.as_deref());
            state.reply(id, Ok(BlockingReply::Launched(outcomes)));
        }),
    );
}

/// Each target's outcome from the plugin's lines (the last line of a machine counts).
fn per_target(
    name: &str,
    run: RunId,
    machines: &[String],
    lines: &[PluginLine],
    failure: Option<&str>,
) -> Vec<(RunId, MinionOutcome)> {
    let mut said: HashMap<&str, &PluginLine> = HashMap::new();
    for line in lines {
        match line {
            PluginLine::Launched { machine }
            | PluginLine::Failed { machine, .. }
            | PluginLine::Unreachable { machine, .. }
            | PluginLine::Killed { machine } => {
                said.insert(machine.as_str(), line);
            }
            PluginLine::Deployed { machine } => {
                log::info!("executor {name}: this build's wrapper installed on {machine}");
            }
            _ => {}
        }
    }
    machines
        .iter()
        .map(|m| {
            let clip = |why: &str| crate::logsafe::clip(why.trim(), 1000);
            let (result, unreachable) = match said.get(m.as_str()) {
                Some(PluginLine::Launched { .. } | PluginLine::Killed { .. }) => (Ok(()), None),
                Some(PluginLine::Failed { reason, .. }) => {
                    (Err(format!("executor {name}: {}", clip(reason))), None)
                }
                Some(PluginLine::Unreachable { reason, .. }) => {
                    (Ok(()), Some(format!("executor {name}: {}", clip(reason))))
                }
                _ => (
                    Err(match failure {
                        Some(why) => format!("executor {name}: {why}"),
                        None => format!("executor {name} said nothing about it"),
                    }),
                    None,
                ),
            };
            (
                run,
                MinionOutcome {
                    machine: m.clone(),
                    result,
                    silent: None,
                    unreachable,
                    server: None,
                },
            )
        })
        .collect()
}

/// main's `Kill` through a plugin: each machine killed, or why not.
pub(super) fn kill(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    spec: &PluginSpec,
    run: RunId,
    machines: Vec<String>,
) {
    let args = serde_json::to_value(KillArgs {
        run,
        machines: machines.clone(),
    })
    .unwrap_or_default();
    per_target_op(state, ctx, id, spec, Op::Kill, args, run, machines);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_target_gets_what_the_plugin_said_of_it() {
        let machines: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let lines = vec![
            PluginLine::Deployed {
                machine: "a".into(),
            },
            PluginLine::Launched {
                machine: "a".into(),
            },
            PluginLine::Failed {
                machine: "b".into(),
                reason: "no wrapper".into(),
            },
            PluginLine::Unreachable {
                machine: "c".into(),
                reason: "refused".into(),
            },
            PluginLine::Launched {
                machine: "zz".into(),
            },
        ];
        let out = per_target(
            "ssh",
            7,
            &machines,
            &lines,
            Some("protocol breach deadline"),
        );
        assert_eq!(out.len(), 4);
        assert!(out[0].1.result.is_ok() && out[0].1.unreachable.is_none());
        assert_eq!(out[1].1.result, Err("executor ssh: no wrapper".to_string()));
        assert_eq!(
            out[2].1.unreachable.as_deref(),
            Some("executor ssh: refused")
        );
        assert_eq!(
            out[3].1.result,
            Err("executor ssh: protocol breach deadline".to_string())
        );
    }

    #[test]
    fn the_wrapper_command_holds_no_token() {
        let launch = Launch {
            wrapper: "/usr/bin/saltpeter-wrapper".into(),
            run: 12,
            url: "wss://h:8889/wrapper".into(),
        };
        let argv = wrapper_command(&launch, "web1");
        assert_eq!(argv[0], "env");
        assert!(argv.contains(&"SP_RUN=12".to_string()));
        assert!(argv.contains(&"SP_MACHINE=web1".to_string()));
        assert_eq!(argv.last().map(String::as_str), Some("--token-stdin"));
        assert!(!argv.iter().any(|a| a.contains("TOKEN")));
    }
}
