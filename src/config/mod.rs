//! Saltpeter's configuration directory: loading, validating and reporting on the YAML files
//! that define the jobs, `saltpeter_config` and `saltpeter_maintenance`.
//!
//! This module is pure library code: it reads files and returns a [`LoadedConfig`]; when to
//! reload (SIGHUP, `saltpeterctl reload`, a changed [`Fingerprint`]) is the daemon's business.
//!
//! Outline of [`load_dir`] ([`parse_changed`], then [`load_parsed`]):
//! 1. List `*.yaml` and `*.yml` (not recursive), sorted by path; fingerprint each
//!    (length, mtime, ctime, inode) so [`LoadedConfig::changed_on_disk`] is a cheap `stat` scan.
//! 2. Parse each changed file (at most [`MAX_FILE_BYTES`]) into a tree that keeps positions
//!    (`files.rs`, `yaml.rs` on serde-saphyr's event parser). This is the slow step; main's
//!    reloads run it in a child process of `blocking`. A file that fails to parse, or whose
//!    top level is not a mapping, is an error diagnostic, and its last good version from
//!    `previous` stays in effect (its settings, and its jobs as last validated) until it
//!    is fixed.
//! 3. Merge `saltpeter_config` from all files key by key (`saltpeter.rs`), then
//!    `saltpeter_maintenance`.
//! 4. Validate every job on its own (`load_jobs.rs`, `read_job.rs`), with the merged settings as defaults. A bad
//!    job becomes a listed but disabled [`InvalidJob`]; the others are unaffected. A job name
//!    in two files is an error in both places, and neither definition runs.
//!
//! Reloads are incremental: a file whose fingerprint did not change is not read again, and
//! a job of such a file whose inherited defaults did not change keeps its validated
//! [`JobEntry`] and its diagnostics (`JobCache`), so reloading 10,000 jobs after a change to
//! one file re-reads and re-validates that file only. (A reused job is not re-checked for
//! firing after the new `now`; a job that stops firing simply has no next slot.) Between
//! loads a file keeps its settings sections and its top-level keys, not the jobs' mappings
//! (`content.rs`): a load that must validate a job of an unchanged file again (its
//! inherited defaults changed) answers [`Load::Reread`], and the caller reads those files
//! and loads again.
//!
//! Every problem is a [`Diagnostic`] with `file:line:column`; unknown keys and keys kept only
//! for compatibility with the original Saltpeter are warnings, never errors.

mod active;
mod cache;
mod chains;
mod content;
pub(crate) mod database;
mod derived;
mod diagnostic;
mod digest;
mod entries;
pub mod executors;
pub(crate) mod export;
mod files;
mod identities;
mod job;
mod job_keys;
mod job_reader;
mod limits;
mod load_jobs;
mod maintenance;
pub(crate) mod notify;
pub mod plugin_check;
mod read_job;
pub(crate) mod resources;
mod saltpeter;
mod saltpeter_merge;
mod saltpeter_values;
mod types;
mod values;
pub(crate) mod windows;
mod yaml;

#[cfg(test)]
mod reload_tests;
#[cfg(test)]
mod roadmap_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod yaml_tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};

pub use diagnostic::{Diagnostic, Severity};
pub use digest::ErrorDigest;
pub(crate) use digest::bounded as bounded_by_file;
pub(crate) use digest::{SHOWN_MAX, SHOWN_PER_FILE};
pub use entries::{ConfigDirError, FileState, FileStatus, Fingerprint, InvalidJob, JobEntry};
pub use identities::{ApiIdentity, ApiRole};
pub use job::{After, ChainOn, Job};
pub use saltpeter::ApiAuth;
pub use saltpeter::{
    DEFAULT_WRAPPER_PATH, Maintenance, Retention, STARTUP_ONLY_KEYS, SaltpeterConfig, Secret,
};
pub use saltpeter_values::MachineCaps;
pub use types::{Executor, MIB, Missed, OutputLimit, Overlap, TargetType};

pub use files::{
    MAX_FILE_BYTES, MAX_TREE_BYTES, Parse, ParsedFile, ParsedFiles, load_settings, parse_changed,
    scan_dir,
};

use cache::JobCache;
use content::CONFIG_KEY;
use content::FileContent;
use load_jobs::load_jobs;
use read_job::JobDefaults;
use values::Section;
use values::diagnostic;
use yaml::Node;

/// The result of loading a configuration directory.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub dir: PathBuf,
    pub jobs: BTreeMap<String, JobEntry>,
    pub saltpeter: SaltpeterConfig,
    pub maintenance: Maintenance,
    /// Sorted by file, line and column.
    pub diagnostics: Vec<Diagnostic>,
    pub files: BTreeMap<PathBuf, FileStatus>,
    /// The `saltpeter_config` values that applied, per key (fallback for a later bad value).
    saltpeter_good: BTreeMap<String, Arc<Node>>,
    /// Validated jobs by file and name, reused by the next load when nothing they depend on
    /// changed.
    job_cache: Arc<JobCache>,
    /// What answers carry of the errors, made once per load (`digest.rs`).
    digest: Arc<ErrorDigest>,
}

impl LoadedConfig {
    /// The `check_config` each executor plugin of the jobs is to run
    /// (`plugin_check.rs`).
    pub fn plugin_check_orders(&self) -> Vec<plugin_check::CheckOrder> {
        plugin_check::check_orders(&self.jobs, &self.saltpeter)
    }

    /// What `plugin`'s `check_config` answered (or why it did not), applied.
    pub fn apply_plugin_check(
        &mut self,
        plugin: &str,
        answer: Result<Vec<crate::executor::protocol::ConfigError>, String>,
    ) {
        plugin_check::apply_check(&mut self.jobs, &mut self.diagnostics, plugin, answer);
        self.digest_errors();
    }

    /// Run every plugin's `check_config` in turn and apply the answers (outside any
    /// loop: start-up, `saltpeterctl config check`).
    pub fn run_plugin_checks(&mut self, daemon_exe: &std::path::Path) {
        plugin_check::run_checks(
            &mut self.jobs,
            &self.saltpeter,
            &mut self.diagnostics,
            daemon_exe,
        );
        self.digest_errors();
    }

    /// What answers carry of the errors: bounded, made once per load.
    pub fn error_digest(&self) -> &ErrorDigest {
        &self.digest
    }

    /// The digest made again, after the jobs or the diagnostics changed.
    fn digest_errors(&mut self) {
        self.digest = Arc::new(ErrorDigest::of(&self.diagnostics, self.jobs.values()));
    }

    /// Whether any diagnostic is an error (`saltpeterctl config check` then exits non-zero).
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    /// The valid jobs (enabled or not).
    pub fn valid_jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values().filter_map(JobEntry::job)
    }

    /// The file fingerprints this configuration was loaded from.
    pub fn fingerprints(&self) -> BTreeMap<PathBuf, Fingerprint> {
        self.files
            .iter()
            .map(|(p, s)| (p.clone(), s.fingerprint))
            .collect()
    }

    /// The files whose tree the next load may reuse without reading them again: those
    /// loaded as they are now (a file that failed is read again, so its error is too).
    pub fn reusable_fingerprints(&self) -> BTreeMap<PathBuf, Fingerprint> {
        self.files
            .iter()
            .filter(|(_, s)| s.state == FileState::Loaded)
            .map(|(p, s)| (p.clone(), s.fingerprint))
            .collect()
    }

    /// Whether a file was added, removed or changed since this was loaded (a `stat` per file).
    pub fn changed_on_disk(&self) -> Result<bool, ConfigDirError> {
        Ok(scan_dir(&self.dir)? != self.fingerprints())
    }
}

/// Validates a directory without a daemon: [`load_dir`] with no previous state.
pub fn check_dir(dir: &Path, now: DateTime<Utc>) -> Result<LoadedConfig, ConfigDirError> {
    load_dir(dir, None, now)
}

/// [`check_dir`] of a directory holding one file with `yaml` (for the crate's tests of
/// what uses jobs); a directory that cannot be made or read fails the test.
#[cfg(test)]
pub(crate) fn check_yaml(yaml: &str, now: DateTime<Utc>) -> LoadedConfig {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("{e}"),
    };
    if let Err(e) = std::fs::write(dir.path().join("jobs.yaml"), yaml) {
        panic!("{e}");
    }
    match check_dir(dir.path(), now) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// Loads a configuration directory. `previous` supplies the last good version of files that
/// no longer parse and of `saltpeter_config` values that became invalid. `now` is the instant
/// schedules must still fire after.
pub fn load_dir(
    dir: &Path,
    previous: Option<&LoadedConfig>,
    now: DateTime<Utc>,
) -> Result<LoadedConfig, ConfigDirError> {
    let mut known = previous
        .map(LoadedConfig::reusable_fingerprints)
        .unwrap_or_default();
    loop {
        let parsed = parse_changed(dir, &known, None)?;
        match load_parsed(dir, parsed, previous, now) {
            Load::Loaded(config) => return Ok(*config),
            // Only files of `known` are listed: each round reads more, so this ends.
            Load::Reread(files) => known.retain(|path, _| !files.contains(path)),
        }
    }
}

/// What [`load_parsed`] made of the files it was given.
#[derive(Debug)]
pub enum Load {
    Loaded(Box<LoadedConfig>),
    /// Jobs of these files, unchanged and so not read, must be validated again (their
    /// inherited defaults changed): read them again and load once more.
    Reread(BTreeSet<PathBuf>),
}

/// The rest of a load once the files are read ([`parse_changed`], here or in a child
/// process): merge the settings and validate the jobs, reusing what did not change. No
/// file is read here, so main can run it inside its loop.
pub fn load_parsed(
    dir: &Path,
    parsed: ParsedFiles,
    previous: Option<&LoadedConfig>,
    now: DateTime<Utc>,
) -> Load {
    let mut diagnostics = Vec::new();
    let mut files = BTreeMap::new();
    // Changed files left for the next scan: their jobs stay as last validated.
    let mut deferred = BTreeSet::new();
    for ParsedFile {
        path,
        fingerprint,
        outcome,
    } in parsed.files
    {
        let previous_status = previous.and_then(|p| p.files.get(&path));
        let previous_content = previous_status.and_then(|s| s.content.clone());
        let read = match outcome {
            Parse::Parsed(node) => Ok(Arc::new(FileContent::of_tree(node))),
            Parse::Failed { pos, message } => Err((pos, message)),
            Parse::Unchanged | Parse::Deferred => {
                if matches!(outcome, Parse::Deferred) {
                    deferred.insert(path.clone());
                }
                // As in the previous load (a deferred or unknown file is taken up at the
                // next scan: its fingerprint there still differs).
                if let Some(status) = previous_status {
                    files.insert(path, status.clone());
                }
                continue;
            }
        };
        let (state, content) = match read {
            Ok(content) => (FileState::Loaded, Some(content)),
            Err((pos, message)) => {
                let kept_previous = previous_content.is_some();
                let consequence = if kept_previous {
                    "the previous version of this file stays in effect"
                } else {
                    "no jobs from this file are loaded"
                };
                diagnostics.push(diagnostic(
                    &path,
                    Severity::Error,
                    pos,
                    None,
                    format!("{message}; {consequence}"),
                ));
                (FileState::Failed { kept_previous }, previous_content)
            }
        };
        files.insert(
            path,
            FileStatus {
                fingerprint,
                state,
                content,
            },
        );
    }

    let mut config_sections = Vec::new();
    let mut maintenance_sections = Vec::new();
    for (path, status) in &files {
        let Some(content) = status.content.as_deref() else {
            continue;
        };
        for (key, value) in &content.sections {
            let section = Section {
                file: path,
                node: value,
            };
            match key.scalar() {
                Some(CONFIG_KEY) => config_sections.push(section),
                _ => maintenance_sections.push(section),
            }
        }
    }
    let (saltpeter, saltpeter_good) = saltpeter_merge::merge_saltpeter(
        &config_sections,
        previous.map(|p| &p.saltpeter_good),
        &mut diagnostics,
    );
    let maintenance = saltpeter::merge_maintenance(&maintenance_sections, &mut diagnostics);

    let defaults = JobDefaults {
        timezone: saltpeter.timezone,
        executor: saltpeter.executor.clone(),
        wrapper_path: saltpeter.default_wrapper_path.as_deref(),
        server_host: saltpeter.default_saltpeter_server_host.as_deref(),
        now,
    };
    let (mut jobs, job_cache) = match load_jobs(
        &files,
        &deferred,
        &defaults,
        previous.map(|p| (p.job_cache.as_ref(), &p.jobs)),
        &mut diagnostics,
    ) {
        Ok(loaded) => loaded,
        Err(reread) => return Load::Reread(reread),
    };
    chains::check_chains(&mut jobs, &mut diagnostics);
    // The jobs are validated: keep only what the next load needs of each file.
    for status in files.values_mut() {
        if let Some(content) = status.content.as_mut().filter(|c| !c.is_stripped()) {
            *content = Arc::new(content.stripped());
        }
    }

    diagnostics.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
    let mut loaded = LoadedConfig {
        dir: dir.to_path_buf(),
        jobs,
        saltpeter,
        maintenance,
        diagnostics,
        files,
        saltpeter_good,
        job_cache: Arc::new(job_cache),
        digest: Arc::default(),
    };
    plugin_check::check_found(&mut loaded.jobs, &loaded.saltpeter, &mut loaded.diagnostics);
    loaded.digest_errors();
    Load::Loaded(Box::new(loaded))
}
