//! `saltpeterctl executor test PATH`: the conformance check of an executor plugin
//! (`executor::conformance`), run here with no daemon.
//!
//! The raw arguments are validated first (`--config` must be a JSON mapping, `--sha256`
//! 64 hex digits); then each check's line is printed as it ends (`ok NAME`, `warn`,
//! `skip`, `FAIL NAME: breach: details`), or with `--json` one object at the end. Exit 0
//! only when no check failed.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::exit::{CtlResult, EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use super::out::print_json;
use crate::executor::conformance::{self, Check, Options, Verdict};
use crate::executor::spec::DEFAULT_TIMEOUT_S;

#[derive(Debug, Subcommand)]
pub(crate) enum ExecutorAction {
    /// Check a plugin against executor protocol v1: every operation, every breach by
    /// name (no daemon needed; see docs/executors.md). Exit 0 only if all passed.
    Test(TestArgs),
}

#[derive(Debug, Args)]
pub(crate) struct TestArgs {
    /// The plugin's executable file.
    path: PathBuf,
    /// The executor's `config` mapping, as JSON (default `{}`).
    #[arg(long, value_name = "JSON")]
    config: Option<String>,
    /// A target expression for check_config and resolve.
    #[arg(long, value_name = "EXPR")]
    target: Option<String>,
    /// The target's type.
    #[arg(long, value_name = "T", default_value = "glob", requires = "target")]
    target_type: String,
    /// A machine to ping (and launch on, kill on); repeat for more (default: the
    /// machines resolve found).
    #[arg(long = "machine", value_name = "M")]
    machines: Vec<String>,
    /// Also run launch: `true` on each machine, with a dummy token.
    #[arg(long)]
    launch: bool,
    /// The deadline of resolve, launch and kill, in seconds (the executor's `timeout`).
    #[arg(long, value_name = "S", default_value_t = DEFAULT_TIMEOUT_S)]
    timeout: u64,
    /// The sha256 the file must have (as a `sha256` pin).
    #[arg(long, value_name = "HEX")]
    sha256: Option<String>,
}

impl TestArgs {
    fn validate(self) -> Result<Options, String> {
        let config = match &self.config {
            None => json!({}),
            Some(text) => match serde_json::from_str::<Value>(text) {
                Ok(value @ Value::Object(_)) => value,
                Ok(_) => return Err("--config must be a JSON mapping ({...})".to_string()),
                Err(e) => return Err(format!("--config is not JSON: {e}")),
            },
        };
        if let Some(sha) = &self.sha256
            && (sha.len() != 64 || !sha.chars().all(|c| c.is_ascii_hexdigit()))
        {
            return Err(format!("--sha256 `{sha}` is not 64 hex digits"));
        }
        if self.timeout == 0 {
            return Err("--timeout must be at least 1 s".to_string());
        }
        Ok(Options {
            path: self.path,
            config,
            target: self.target.map(|t| (t, self.target_type)),
            machines: self.machines,
            launch: self.launch,
            timeout_s: self.timeout,
            sha256: self.sha256.map(|s| s.to_ascii_lowercase()),
        })
    }
}

pub(super) fn run(action: ExecutorAction, json: bool) -> CtlResult {
    let ExecutorAction::Test(args) = action;
    let opts = args.validate().map_err(|e| (EXIT_USAGE, e))?;
    let mut checks = Vec::new();
    let mut counts = [0usize; 4];
    let passed = conformance::test_plugin(&opts, &mut |check: &Check| {
        counts[match check.verdict {
            Verdict::Ok(_) => 0,
            Verdict::Warn(_) => 1,
            Verdict::Skip(_) => 2,
            Verdict::Fail { .. } => 3,
        }] += 1;
        if json {
            checks.push(check_json(check));
        } else {
            outln!("{check}");
        }
    });
    if json {
        print_json(&json!({
            "path": opts.path.display().to_string(),
            "passed": passed,
            "checks": checks,
        }));
    } else {
        let [ok, warned, skipped, failed] = counts;
        outln!(
            "{}: {}: {ok} ok, {warned} warnings, {skipped} skipped, {failed} failed",
            opts.path.display(),
            if passed { "passed" } else { "FAILED" }
        );
    }
    Ok(if passed { EXIT_OK } else { EXIT_FAILED })
}

fn check_json(check: &Check) -> Value {
    let (verdict, problem, details) = match &check.verdict {
        Verdict::Ok(d) => ("ok", None, d),
        Verdict::Warn(d) => ("warn", None, d),
        Verdict::Skip(d) => ("skip", None, d),
        Verdict::Fail { problem, details } => ("fail", Some(*problem), details),
    };
    json!({"name": check.name, "verdict": verdict, "problem": problem, "details": details})
}
