//! What the run steps ask of an executor plugin (docs/executors.md), in the shapes the
//! built-in executors answer: a resolution (`resolve`, with a `ping` of what it found
//! when liveness matters before the launch), a liveness check of some machines (`ping`:
//! pick-up checks and `retry_unreachable`), and the launch's executor with the machines
//! that get this build's wrapper first.

use crate::config::{Job, SaltpeterConfig};
use crate::executor::spec::PluginSpec;
use crate::roles::main::fleet::launcher;
use crate::roles::main::shell::Main;
use crate::wire::link::{BlockingRequest, ExecutorKind, PluginCall, SaltTargetType};

/// The plugin of `job`, found now (a `stat` per directory of `executor_path`).
pub(crate) fn spec(sp: &SaltpeterConfig, job: &Job) -> Result<PluginSpec, String> {
    let name = job
        .executor
        .plugin()
        .ok_or_else(|| format!("job {} has no executor plugin", job.name))?;
    crate::config::executors::find_plugin(name, &sp.executors, &sp.executor_path)
}

/// The resolution of `job`'s targets: through its plugin, or Salt's.
pub(crate) fn resolve_request(sp: &SaltpeterConfig, job: &Job) -> Result<BlockingRequest, String> {
    // Liveness is needed before the launch to choose `number_of_targets` live machines
    // and for `retry_unreachable`; otherwise the launch shows it.
    let needs_ping = job.number_of_targets.is_some() || job.retry_unreachable_s > 0;
    if job.executor.plugin().is_none() {
        return Ok(BlockingRequest::Resolve {
            salt: launcher::salt_settings(sp),
            target: job.target_expr.clone(),
            target_type: job.target_type.into(),
            from_cache: !needs_ping,
        });
    }
    Ok(BlockingRequest::Plugin {
        spec: Box::new(spec(sp, job)?),
        call: PluginCall::Resolve {
            target: job.target_expr.clone(),
            target_type: job
                .plugin_target_type
                .clone()
                .unwrap_or_else(|| "glob".into()),
            ping_timeout_s: needs_ping.then_some(sp.ping_timeout_s),
        },
    })
}

/// Which of `machines` answer: a plugin's `ping`, or Salt's `test.ping` of the list.
pub(crate) fn ping_request(
    sp: &SaltpeterConfig,
    job: &Job,
    machines: Vec<String>,
) -> Result<BlockingRequest, String> {
    if job.executor.plugin().is_none() {
        return Ok(BlockingRequest::Resolve {
            salt: launcher::salt_settings(sp),
            target: machines.join(","),
            target_type: SaltTargetType::List,
            from_cache: false,
        });
    }
    Ok(BlockingRequest::Plugin {
        spec: Box::new(spec(sp, job)?),
        call: PluginCall::Ping {
            machines,
            timeout_s: sp.ping_timeout_s,
        },
    })
}

/// The executor of a launch of `machines` for a job that does not go through Salt.
pub(crate) fn launch_executor(
    core: &mut Main,
    job: &Job,
    machines: &[String],
) -> Result<ExecutorKind, String> {
    let Some(name) = job.executor.plugin() else {
        return Ok(ExecutorKind::Local);
    };
    let spec = spec(&core.config.saltpeter, job)?;
    let path = launcher::wrapper_path(&core.config.saltpeter, job);
    let deploy = if core.config.saltpeter.wrapper_deploy {
        core.fleet.plugin_builds().to_deploy(name, machines, &path)
    } else {
        Vec::new()
    };
    Ok(ExecutorKind::Plugin {
        spec: Box::new(spec),
        deploy,
    })
}
