//! Validating the jobs of the parsed files: each definition on its own, a name defined in
//! several files an error at each, and a job whose file's parse and inherited defaults did
//! not change reused from the previous load (`cache.rs`). A job that must be validated
//! again while its file's mappings were dropped (`content.rs`) makes the load ask for the
//! file to be read again; a file that no longer parses keeps its jobs as last validated.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cache::{CachedJob, DefaultsKey, JobCache};
use super::diagnostic::{Diagnostic, Severity};
use super::entries::{FileState, FileStatus, InvalidJob, JobEntry};
use super::read_job::{self, JobDefaults};
use super::values::{self, Sink, diagnostic};
use super::yaml::{Node, Pos};

/// A job definition found in a file: where its name is, and its mapping while it is kept.
struct Definition<'a> {
    file: Arc<Path>,
    /// The parse it comes from (`FileContent::id`).
    content: u64,
    /// Its file was not read this time (it no longer parses, or it is left for the next
    /// scan): this is its last good version, kept as it was validated.
    kept: bool,
    group: Arc<str>,
    pos: Pos,
    node: Option<&'a Node>,
}

/// The validated jobs and their cache, or the unchanged files to read again.
pub(super) type Jobs = Result<(BTreeMap<String, JobEntry>, JobCache), BTreeSet<PathBuf>>;

pub(super) fn load_jobs(
    files: &BTreeMap<PathBuf, FileStatus>,
    deferred: &BTreeSet<PathBuf>,
    defaults: &JobDefaults<'_>,
    previous: Option<(&JobCache, &BTreeMap<String, JobEntry>)>,
    out: &mut Vec<Diagnostic>,
) -> Jobs {
    let definitions = definitions(files, deferred, out);
    let defaults_key = Arc::new(DefaultsKey::of(defaults));
    let mut jobs = BTreeMap::new();
    let mut cache = JobCache::with_capacity(definitions.len());
    let mut reread = BTreeSet::new();
    for (name, defs) in definitions {
        let [def] = defs.as_slice() else {
            jobs.insert(name.clone(), duplicate_job(&name, &defs, out));
            continue;
        };
        let (cached, entry) = match reusable(def, &name, &defaults_key, previous) {
            Some(found) => found,
            None => match def.node {
                Some(node) => validate(def, &name, node, defaults, &defaults_key, out),
                None if def.kept => not_validated(def, &name, &defaults_key),
                None => {
                    reread.insert(def.file.to_path_buf());
                    continue;
                }
            },
        };
        out.extend(cached.diagnostics.iter().cloned());
        jobs.insert(name.clone(), entry);
        cache.insert(name, cached);
    }
    if reread.is_empty() {
        Ok((jobs, cache))
    } else {
        Err(reread)
    }
}

/// Every job definition of every file, by name; keys that cannot be job names reported.
fn definitions<'a>(
    files: &'a BTreeMap<PathBuf, FileStatus>,
    deferred: &BTreeSet<PathBuf>,
    out: &mut Vec<Diagnostic>,
) -> BTreeMap<String, Vec<Definition<'a>>> {
    let mut definitions: BTreeMap<String, Vec<Definition<'a>>> = BTreeMap::new();
    for (path, status) in files {
        let Some(content) = status.content.as_deref() else {
            continue;
        };
        let file: Arc<Path> = Arc::from(path.as_path());
        let kept = matches!(status.state, FileState::Failed { .. }) || deferred.contains(path);
        let group: Arc<str> = path
            .file_stem()
            .map(|s| s.to_string_lossy())
            .unwrap_or_default()
            .into();
        let mut sink = Sink {
            file: path,
            out: &mut *out,
        };
        for (key, value) in content.entries() {
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
            // A job name is written as it is in log lines, events and terminals: nothing
            // that would forge a line or drive a terminal (`logsafe::needs_escape`).
            if name.trim().is_empty()
                || name.contains('/')
                || name.chars().any(crate::logsafe::needs_escape)
            {
                sink.push(Severity::Error, key.pos, Some(name), format!("job name {} is not valid: it must be non-empty, without `/`, control, escape or bidi characters", values::found(key)));
                continue;
            }
            let list = definitions.entry(name.to_string()).or_default();
            if let Some(same_file) = list.iter_mut().find(|d| *d.file == *path.as_path()) {
                sink.push(Severity::Warning, key.pos, Some(name), format!("job `{name}` is defined twice in this file (first at line {}); this later definition is used", same_file.pos.line));
                same_file.pos = key.pos;
                same_file.node = value;
                continue;
            }
            list.push(Definition {
                file: Arc::clone(&file),
                content: content.id,
                kept,
                group: Arc::clone(&group),
                pos: key.pos,
                node: value,
            });
        }
    }
    definitions
}

/// The previous load's validation of this definition, if it still holds (or if its file
/// no longer parses, whatever changed since).
fn reusable(
    def: &Definition<'_>,
    name: &str,
    defaults: &Arc<DefaultsKey>,
    previous: Option<(&JobCache, &BTreeMap<String, JobEntry>)>,
) -> Option<(CachedJob, JobEntry)> {
    let (cache, jobs) = previous?;
    let cached = cache.get(name).filter(|c| {
        c.file == def.file
            && c.content == def.content
            && c.pos == def.pos
            && (def.kept || c.defaults == *defaults)
    })?;
    let entry = match &cached.valid {
        Some(job) => JobEntry::Valid(Arc::clone(job)),
        None => jobs.get(name).filter(|e| e.job().is_none())?.clone(),
    };
    Some((cached.clone(), entry))
}

/// Validates one definition.
fn validate(
    def: &Definition<'_>,
    name: &str,
    node: &Node,
    defaults: &JobDefaults<'_>,
    defaults_key: &Arc<DefaultsKey>,
    out: &mut Vec<Diagnostic>,
) -> (CachedJob, JobEntry) {
    let first = out.len();
    let mut sink = Sink {
        file: &def.file,
        out: &mut *out,
    };
    let (valid, entry) = match read_job::read_job(
        name, &def.group, &def.file, def.pos, node, defaults, &mut sink,
    ) {
        Ok(job) => {
            let job = Arc::new(job);
            (Some(Arc::clone(&job)), JobEntry::Valid(job))
        }
        Err(errors) => (None, invalid(def, name, errors)),
    };
    let diagnostics = out.split_off(first);
    let cached = CachedJob {
        file: Arc::clone(&def.file),
        content: def.content,
        pos: def.pos,
        defaults: Arc::clone(defaults_key),
        diagnostics,
        valid,
    };
    (cached, entry)
}

/// A job of a file not read this time, with no validation to reuse (it was defined in
/// another file as well until now).
fn not_validated(
    def: &Definition<'_>,
    name: &str,
    defaults_key: &Arc<DefaultsKey>,
) -> (CachedJob, JobEntry) {
    let message = format!(
        "job `{name}` could not be validated: its file was not read again (it does not \
         parse, or it waits for the next scan); it stays disabled until then"
    );
    let d = diagnostic(&def.file, Severity::Error, def.pos, Some(name), message);
    let cached = CachedJob {
        file: Arc::clone(&def.file),
        content: def.content,
        pos: def.pos,
        defaults: Arc::clone(defaults_key),
        diagnostics: vec![d.clone()],
        valid: None,
    };
    (cached, invalid(def, name, vec![d]))
}

fn invalid(def: &Definition<'_>, name: &str, errors: Vec<Diagnostic>) -> JobEntry {
    JobEntry::Invalid(Box::new(InvalidJob {
        name: name.to_string(),
        group: def.group.to_string(),
        file: def.file.to_path_buf(),
        line: def.pos.line,
        errors,
    }))
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
        .map(|d| diagnostic(&d.file, Severity::Error, d.pos, Some(name), message.clone()))
        .collect();
    out.extend(errors.iter().cloned());
    let first = defs.first();
    JobEntry::Invalid(Box::new(InvalidJob {
        name: name.to_string(),
        group: first.map(|d| d.group.to_string()).unwrap_or_default(),
        file: first.map(|d| d.file.to_path_buf()).unwrap_or_default(),
        line: first.map_or(0, |d| d.pos.line),
        errors,
    }))
}
