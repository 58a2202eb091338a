//! What an incremental reload reuses: for each job, what its validation depended on (the
//! parsed file it came from, its position, the defaults it inherited) and the diagnostics it
//! gave. While all of these are unchanged the job's entry of the previous load is reused
//! as is (see the outline in `mod.rs`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::Diagnostic;
use super::read_job::JobDefaults;
use super::types::Executor;
use super::yaml::{Node, Pos};

/// What a job inherits from `saltpeter_config`, owned (a cached job is reused only while
/// these are unchanged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DefaultsKey {
    timezone: chrono_tz::Tz,
    executor: Executor,
    wrapper_path: Option<String>,
    server_host: Option<String>,
}

impl DefaultsKey {
    pub(super) fn of(defaults: &JobDefaults<'_>) -> DefaultsKey {
        DefaultsKey {
            timezone: defaults.timezone,
            executor: defaults.executor,
            wrapper_path: defaults.wrapper_path.map(str::to_string),
            server_host: defaults.server_host.map(str::to_string),
        }
    }
}

/// What a job's validation depended on, and the diagnostics it gave; its `JobEntry` is
/// the one in the `jobs` of the same load.
#[derive(Debug, Clone)]
pub(super) struct CachedJob {
    /// The parsed file it came from: reused only while the file keeps this very tree.
    pub(super) tree: Arc<Node>,
    pub(super) pos: Pos,
    pub(super) defaults: DefaultsKey,
    pub(super) diagnostics: Vec<Diagnostic>,
}

pub(super) type JobCache = HashMap<(PathBuf, String), CachedJob>;
