//! Saltpeter's configuration directory: loading, validating and reporting on the YAML files
//! that define the jobs, `saltpeter_config` and `saltpeter_maintenance`.
//!
//! This module is pure library code: it reads files and returns a [`LoadedConfig`]; when to
//! reload (SIGHUP, `saltpeterctl reload`, a changed [`Fingerprint`]) is the daemon's business.
//!
//! Outline of [`load_dir`]:
//! 1. List `*.yaml` and `*.yml` (not recursive), sorted by path; fingerprint each
//!    (length, mtime, ctime, inode) so [`LoadedConfig::changed_on_disk`] is a cheap `stat` scan.
//! 2. Parse each file into a tree that keeps positions (`yaml.rs`, on serde-saphyr's event
//!    parser). A file that fails to parse, or whose top level is not a mapping, is an error
//!    diagnostic, and its last good tree from `previous` is used instead, so its jobs keep
//!    running until it is fixed.
//! 3. Merge `saltpeter_config` from all files key by key (`saltpeter.rs`), then
//!    `saltpeter_maintenance`.
//! 4. Validate every job on its own (`read_job.rs`), with the merged settings as defaults. A bad
//!    job becomes a listed but disabled [`InvalidJob`]; the others are unaffected. A job name
//!    in two files is an error in both places, and neither definition runs.
//!
//! Reloads are incremental: a file whose fingerprint did not change keeps its parsed tree,
//! and a job of such a file whose inherited defaults did not change keeps its validated
//! [`JobEntry`] and its diagnostics (`JobCache`), so reloading 10,000 jobs after a change to
//! one file re-reads and re-validates that file only. (A reused job is not re-checked for
//! firing after the new `now`; a job that stops firing simply has no next slot.)
//!
//! Every problem is a [`Diagnostic`] with `file:line:column`; unknown keys and keys kept only
//! for compatibility with the original Saltpeter are warnings, never errors.

mod cache;
mod job;
mod read_job;
mod saltpeter;
mod types;
mod values;
mod yaml;

#[cfg(test)]
mod reload_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod yaml_tests;

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use chrono::{DateTime, Utc};

pub use job::Job;
pub use saltpeter::ApiAuth;
pub use saltpeter::{
    DEFAULT_WRAPPER_PATH, Maintenance, Retention, STARTUP_ONLY_KEYS, SaltpeterConfig, Secret,
};
pub use types::{Executor, MIB, Missed, OutputLimit, Overlap, TargetType};

use cache::{CachedJob, DefaultsKey, JobCache};
use read_job::JobDefaults;
use saltpeter::Section;
use values::{Sink, diagnostic};
use yaml::{Node, NodeKind, Pos};

/// The special top-level keys; every other top-level key is a job name.
const CONFIG_KEY: &str = "saltpeter_config";
const MAINTENANCE_KEY: &str = "saltpeter_maintenance";

/// The configuration directory itself could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigDirError {
    #[error("could not read configuration directory {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("configuration path {path} is not a directory")]
    NotADirectory { path: PathBuf },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The job (or file, or setting) is not used as written.
    Error,
    /// Accepted, but probably not what was meant (unknown key, no-effect key, ...).
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One problem found in the configuration. Displays as `file:line:column: message`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Diagnostic {
    pub file: PathBuf,
    /// 1-based; 0 when the problem concerns the whole file (e.g. it cannot be read).
    pub line: usize,
    pub column: usize,
    pub severity: Severity,
    /// The job concerned, if any.
    pub job: Option<String>,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.message
        )
    }
}

/// What identifies a file's content cheaply: if none of these changed, the file did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    pub len: u64,
    pub modified: Option<SystemTime>,
    pub ctime_ns: i128,
    pub inode: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    /// Parsed; its jobs are the ones in it now.
    Loaded,
    /// Could not be read or parsed; `kept_previous` if its last good version is in effect.
    Failed { kept_previous: bool },
}

#[derive(Debug, Clone)]
pub struct FileStatus {
    pub fingerprint: Fingerprint,
    pub state: FileState,
    /// The last good parse of this file (this one, or the previous one when `Failed`).
    tree: Option<Arc<Node>>,
}

/// A job that could not be validated: listed (status, API, UI) but never fired.
#[derive(Debug, Clone)]
pub struct InvalidJob {
    pub name: String,
    pub group: String,
    pub file: PathBuf,
    pub line: usize,
    pub errors: Vec<Diagnostic>,
}

#[derive(Debug, Clone)]
pub enum JobEntry {
    /// Shared: runs in flight and reloads hold the same job without copying it.
    Valid(Arc<Job>),
    Invalid(InvalidJob),
}

impl JobEntry {
    pub fn name(&self) -> &str {
        match self {
            JobEntry::Valid(job) => &job.name,
            JobEntry::Invalid(bad) => &bad.name,
        }
    }

    pub fn group(&self) -> &str {
        match self {
            JobEntry::Valid(job) => &job.group,
            JobEntry::Invalid(bad) => &bad.group,
        }
    }

    pub fn file(&self) -> &Path {
        match self {
            JobEntry::Valid(job) => &job.file,
            JobEntry::Invalid(bad) => &bad.file,
        }
    }

    /// The job, if it is valid.
    pub fn job(&self) -> Option<&Job> {
        match self {
            JobEntry::Valid(job) => Some(job),
            JobEntry::Invalid(_) => None,
        }
    }

    /// The shared job, if it is valid.
    pub fn job_ref(&self) -> Option<&Arc<Job>> {
        match self {
            JobEntry::Valid(job) => Some(job),
            JobEntry::Invalid(_) => None,
        }
    }
}

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
}

impl LoadedConfig {
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

    /// Whether a file was added, removed or changed since this was loaded (a `stat` per file).
    pub fn changed_on_disk(&self) -> Result<bool, ConfigDirError> {
        Ok(scan_dir(&self.dir)? != self.fingerprints())
    }
}

/// Lists the `*.yaml` and `*.yml` files of `dir` (not recursive) with their fingerprints.
pub fn scan_dir(dir: &Path) -> Result<BTreeMap<PathBuf, Fingerprint>, ConfigDirError> {
    let read_error = |source| ConfigDirError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(dir).map_err(read_error)?;
    if !meta.is_dir() {
        return Err(ConfigDirError::NotADirectory {
            path: dir.to_path_buf(),
        });
    }
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(read_error)? {
        let entry = entry.map_err(read_error)?;
        let path = entry.path();
        let is_yaml = path.extension().is_some_and(|e| e == "yaml" || e == "yml");
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if !is_yaml || hidden {
            continue;
        }
        // Follows symlinks; a dangling link or a directory named x.yaml is skipped.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let fingerprint = Fingerprint {
            len: meta.len(),
            modified: meta.modified().ok(),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            inode: meta.ino(),
        };
        files.insert(path, fingerprint);
    }
    Ok(files)
}

/// Validates a directory without a daemon: [`load_dir`] with no previous state.
pub fn check_dir(dir: &Path, now: DateTime<Utc>) -> Result<LoadedConfig, ConfigDirError> {
    load_dir(dir, None, now)
}

/// Loads a configuration directory. `previous` supplies the last good version of files that
/// no longer parse and of `saltpeter_config` values that became invalid. `now` is the instant
/// schedules must still fire after.
pub fn load_dir(
    dir: &Path,
    previous: Option<&LoadedConfig>,
    now: DateTime<Utc>,
) -> Result<LoadedConfig, ConfigDirError> {
    let listed = scan_dir(dir)?;
    let mut diagnostics = Vec::new();
    let mut files = BTreeMap::new();
    for (path, fingerprint) in listed {
        let previous_status = previous.and_then(|p| p.files.get(&path));
        let previous_tree = previous_status.and_then(|s| s.tree.clone());
        let unchanged = previous_status
            .filter(|s| s.fingerprint == fingerprint && s.state == FileState::Loaded)
            .and_then(|s| s.tree.clone());
        let read = match unchanged {
            Some(tree) => Ok(tree),
            None => read_tree(&path),
        };
        let (state, tree) = match read {
            Ok(tree) => (FileState::Loaded, Some(tree)),
            Err((pos, message)) => {
                let kept_previous = previous_tree.is_some();
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
                (FileState::Failed { kept_previous }, previous_tree)
            }
        };
        files.insert(
            path,
            FileStatus {
                fingerprint,
                state,
                tree,
            },
        );
    }

    let mut config_sections = Vec::new();
    let mut maintenance_sections = Vec::new();
    for (path, status) in &files {
        let Some(NodeKind::Map(pairs)) = status.tree.as_deref().map(|t| &t.kind) else {
            continue;
        };
        for (key, value) in pairs {
            match key.scalar() {
                Some(CONFIG_KEY) => config_sections.push(Section {
                    file: path,
                    node: value,
                }),
                Some(MAINTENANCE_KEY) => maintenance_sections.push(Section {
                    file: path,
                    node: value,
                }),
                _ => {}
            }
        }
    }
    let (saltpeter, saltpeter_good) = saltpeter::merge_saltpeter(
        &config_sections,
        previous.map(|p| &p.saltpeter_good),
        &mut diagnostics,
    );
    let maintenance = saltpeter::merge_maintenance(&maintenance_sections, &mut diagnostics);

    let defaults = JobDefaults {
        timezone: saltpeter.timezone,
        executor: saltpeter.executor,
        wrapper_path: saltpeter.default_wrapper_path.as_deref(),
        server_host: saltpeter.default_saltpeter_server_host.as_deref(),
        now,
    };
    let (jobs, job_cache) = load_jobs(
        &files,
        &defaults,
        previous.map(|p| (p.job_cache.as_ref(), &p.jobs)),
        &mut diagnostics,
    );

    diagnostics.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
    Ok(LoadedConfig {
        dir: dir.to_path_buf(),
        jobs,
        saltpeter,
        maintenance,
        diagnostics,
        files,
        saltpeter_good,
        job_cache: Arc::new(job_cache),
    })
}

/// Only the merged `saltpeter_config`, for processes that need settings and no jobs (the
/// supervisor, the hub). Files whose text does not mention `saltpeter_config` are not
/// parsed, and no job is validated, so this stays cheap with thousands of jobs; problems
/// are left to main, which loads everything and reports them.
pub fn load_settings(dir: &Path) -> Result<SaltpeterConfig, ConfigDirError> {
    let mut trees = Vec::new();
    for path in scan_dir(dir)?.into_keys() {
        let Ok(text) = read_bounded(&path) else {
            continue;
        };
        if !text.contains(CONFIG_KEY) {
            continue;
        }
        if let Ok(tree) = parse_tree(&text) {
            trees.push((path, tree));
        }
    }
    let mut sections = Vec::new();
    for (path, tree) in &trees {
        if let NodeKind::Map(pairs) = &tree.kind {
            sections.extend(
                pairs
                    .iter()
                    .filter(|(key, _)| key.scalar() == Some(CONFIG_KEY))
                    .map(|(_, node)| Section { file: path, node }),
            );
        }
    }
    let mut ignored = Vec::new();
    Ok(saltpeter::merge_saltpeter(&sections, None, &mut ignored).0)
}

/// The largest configuration file read. Parsing is linear, but a file this big is a
/// mistake more likely than a plan (10,000 ordinary jobs take about 2 MiB), and the parsed
/// tree crosses a process link on reload, whose frames are bounded.
pub const MAX_FILE_BYTES: u64 = 4 * MIB;

/// Reads and parses one file; its top level must be a mapping (an empty file is an empty one).
fn read_tree(path: &Path) -> Result<Arc<Node>, (Pos, String)> {
    let text = read_bounded(path)?;
    parse_tree(&text)
}

/// Reads a file of at most [`MAX_FILE_BYTES`] (checked on what is read, not only on the
/// size `stat` gave: the file may grow meanwhile).
fn read_bounded(path: &Path) -> Result<String, (Pos, String)> {
    use std::io::Read;
    let whole_file = Pos { line: 0, column: 0 };
    let file = std::fs::File::open(path)
        .map_err(|e| (whole_file, format!("could not read the file: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| (whole_file, format!("could not read the file: {e}")))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err((
            whole_file,
            format!(
                "the file is larger than the limit of {} MiB for one configuration file \
                 (split it into several files)",
                MAX_FILE_BYTES / MIB
            ),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        (
            whole_file,
            format!("could not read the file: not UTF-8 text ({e})"),
        )
    })
}

fn parse_tree(text: &str) -> Result<Arc<Node>, (Pos, String)> {
    match yaml::parse(text) {
        Ok(Some(node)) if matches!(node.kind, NodeKind::Map(_)) || node.is_null() => {
            Ok(Arc::new(node))
        }
        Ok(Some(node)) => Err((
            node.pos,
            format!(
                "expected a mapping of job names to jobs at the top level, found {}",
                node.describe()
            ),
        )),
        Ok(None) => Ok(Arc::new(Node {
            kind: NodeKind::Map(Vec::new()),
            pos: Pos { line: 1, column: 1 },
        })),
        Err(err) => Err((err.pos, format!("YAML syntax error: {}", err.message))),
    }
}

/// A job definition found in a file: where its name is, and its mapping.
struct Definition<'a> {
    file: &'a Path,
    tree: &'a Arc<Node>,
    group: String,
    pos: Pos,
    node: &'a Node,
}

fn load_jobs(
    files: &BTreeMap<PathBuf, FileStatus>,
    defaults: &JobDefaults<'_>,
    previous: Option<(&JobCache, &BTreeMap<String, JobEntry>)>,
    out: &mut Vec<Diagnostic>,
) -> (BTreeMap<String, JobEntry>, JobCache) {
    let mut definitions: BTreeMap<String, Vec<Definition<'_>>> = BTreeMap::new();
    for (path, status) in files {
        let Some(tree) = status.tree.as_ref() else {
            continue;
        };
        let NodeKind::Map(pairs) = &tree.kind else {
            continue;
        };
        let group = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut sink = Sink {
            file: path,
            out: &mut *out,
        };
        for (key, value) in pairs {
            let Some(name) = key.scalar() else {
                sink.push(
                    Severity::Error,
                    key.pos,
                    None,
                    format!(
                        "a job name must be a plain string, found {}",
                        key.describe()
                    ),
                );
                continue;
            };
            if name == CONFIG_KEY || name == MAINTENANCE_KEY {
                continue;
            }
            if name.trim().is_empty() || name.contains('/') || name.chars().any(char::is_control) {
                sink.push(Severity::Error, key.pos, Some(name), format!("job name {} is not valid: it must be non-empty, without `/` or control characters", values::found(key)));
                continue;
            }
            let list = definitions.entry(name.to_string()).or_default();
            if let Some(same_file) = list.iter_mut().find(|d| d.file == path.as_path()) {
                sink.push(Severity::Warning, key.pos, Some(name), format!("job `{name}` is defined twice in this file (first at line {}); this later definition is used", same_file.pos.line));
                same_file.pos = key.pos;
                same_file.node = value;
                continue;
            }
            list.push(Definition {
                file: path,
                tree,
                group: group.clone(),
                pos: key.pos,
                node: value,
            });
        }
    }

    let defaults_key = DefaultsKey::of(defaults);
    let mut jobs = BTreeMap::new();
    let mut cache = JobCache::with_capacity(definitions.len());
    for (name, defs) in definitions {
        let [def] = defs.as_slice() else {
            jobs.insert(name.clone(), duplicate_job(&name, &defs, out));
            continue;
        };
        let key = (def.file.to_path_buf(), name);
        let reusable = previous.and_then(|(cache, jobs)| {
            let cached = cache.get(&key).filter(|c| {
                Arc::ptr_eq(&c.tree, def.tree) && c.pos == def.pos && c.defaults == defaults_key
            })?;
            Some((cached, jobs.get(&key.1)?))
        });
        let (cached, entry) = match reusable {
            Some((cached, entry)) => (cached.clone(), entry.clone()),
            None => {
                let first = out.len();
                let mut sink = Sink {
                    file: def.file,
                    out: &mut *out,
                };
                let name = &key.1;
                let entry = match read_job::read_job(
                    name, &def.group, def.pos, def.node, defaults, &mut sink,
                ) {
                    Ok(job) => JobEntry::Valid(Arc::new(job)),
                    Err(errors) => JobEntry::Invalid(InvalidJob {
                        name: name.clone(),
                        group: def.group.clone(),
                        file: def.file.to_path_buf(),
                        line: def.pos.line,
                        errors,
                    }),
                };
                let diagnostics = out.split_off(first);
                let cached = CachedJob {
                    tree: Arc::clone(def.tree),
                    pos: def.pos,
                    defaults: defaults_key.clone(),
                    diagnostics,
                };
                (cached, entry)
            }
        };
        out.extend(cached.diagnostics.iter().cloned());
        jobs.insert(key.1.clone(), entry);
        cache.insert(key, cached);
    }
    (jobs, cache)
}

/// The same job name in several files: an error at each, and an invalid entry.
fn duplicate_job(name: &str, defs: &[Definition<'_>], out: &mut Vec<Diagnostic>) -> JobEntry {
    let places: Vec<String> = defs
        .iter()
        .map(|d| format!("{} (line {})", d.file.display(), d.pos.line))
        .collect();
    let message = format!(
        "job `{name}` is defined in several files: {}; none of them is loaded until only one remains",
        places.join(" and ")
    );
    let errors: Vec<Diagnostic> = defs
        .iter()
        .map(|d| diagnostic(d.file, Severity::Error, d.pos, Some(name), message.clone()))
        .collect();
    out.extend(errors.iter().cloned());
    let first = defs.first();
    JobEntry::Invalid(InvalidJob {
        name: name.to_string(),
        group: first.map(|d| d.group.clone()).unwrap_or_default(),
        file: first.map(|d| d.file.to_path_buf()).unwrap_or_default(),
        line: first.map_or(0, |d| d.pos.line),
        errors,
    })
}
