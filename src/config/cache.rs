//! What an incremental reload reuses: for each job, what its validation depended on (the
//! parse of the file it came from, its position, the defaults it inherited), the
//! diagnostics it gave and the job itself. While all of these are unchanged the job is
//! reused as it was validated (see the outline in `mod.rs`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::diagnostic::Diagnostic;
use super::job::Job;
use super::read_job::JobDefaults;
use super::types::Executor;
use super::yaml::Pos;

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
            executor: defaults.executor.clone(),
            wrapper_path: defaults.wrapper_path.map(str::to_string),
            server_host: defaults.server_host.map(str::to_string),
        }
    }
}

/// What a job's validation depended on, and what it gave.
#[derive(Debug, Clone)]
pub(super) struct CachedJob {
    /// The file it came from (shared by the file's jobs).
    pub(super) file: Arc<Path>,
    /// The parse of the file it came from (`FileContent::id`): reused only while the file
    /// keeps that parse.
    pub(super) content: u64,
    pub(super) pos: Pos,
    /// Shared by every job of a load.
    pub(super) defaults: Arc<DefaultsKey>,
    pub(super) diagnostics: Vec<Diagnostic>,
    /// The job as validated, before the checks across jobs (`chains.rs`) that may still
    /// disable it; `None`: it had errors, and its entry is the `InvalidJob` of the load.
    pub(super) valid: Option<Arc<Job>>,
}

/// By job name: only a name defined once is cached.
pub(super) type JobCache = HashMap<String, CachedJob>;
