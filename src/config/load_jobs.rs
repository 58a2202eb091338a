//! Validating the jobs of the parsed files: each definition on its own, a name defined in
//! several files an error at each, and a job whose file tree and inherited defaults did
//! not change reused from the previous load (`cache.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cache::{CachedJob, DefaultsKey, JobCache};
use super::read_job::{self, JobDefaults};
use super::values::{self, Sink, diagnostic};
use super::yaml::{Node, NodeKind, Pos};
use super::{CONFIG_KEY, Diagnostic, FileStatus, InvalidJob, JobEntry, MAINTENANCE_KEY, Severity};

/// A job definition found in a file: where its name is, and its mapping.
struct Definition<'a> {
    file: &'a Path,
    tree: &'a Arc<Node>,
    group: String,
    pos: Pos,
    node: &'a Node,
}

pub(super) fn load_jobs(
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
            // A job read without errors but disabled afterwards (a chain cycle,
            // `chains.rs`) is read again: the other jobs of the cycle may have changed.
            let entry = jobs.get(&key.1).filter(|e| {
                e.job().is_some()
                    || cached
                        .diagnostics
                        .iter()
                        .any(|d| d.severity == Severity::Error)
            })?;
            Some((cached, entry))
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
