//! Merging the `saltpeter_config` sections of every file, key by key in file order
//! (`saltpeter.rs` holds the settings and their keys), and where a key was set last.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::diagnostic::Severity;
use super::saltpeter::{SALTPETER_KEYS, SaltpeterConfig};
use super::values::{Section, Sink, unknown_key_message};
use super::yaml::{Node, NodeKind, Pos};

/// Merges the `saltpeter_config` sections. Returns the settings and, per key, the value that
/// applied (kept for the next load's fallback).
pub(crate) fn merge_saltpeter(
    sections: &[Section<'_>],
    previous_good: Option<&BTreeMap<String, Arc<Node>>>,
    out: &mut Vec<super::diagnostic::Diagnostic>,
) -> (SaltpeterConfig, BTreeMap<String, Arc<Node>>) {
    // key -> (file, value), later files winning.
    let mut merged: BTreeMap<String, (&Path, &Node)> = BTreeMap::new();
    for section in sections {
        let mut sink = Sink {
            file: section.file,
            out,
        };
        let NodeKind::Map(pairs) = &section.node.kind else {
            if !section.node.is_null() {
                sink.push(
                    Severity::Error,
                    section.node.pos,
                    None,
                    format!(
                        "`saltpeter_config` must be a mapping of settings, found {}",
                        section.node.describe()
                    ),
                );
            }
            continue;
        };
        for (key, value) in pairs {
            let Some(name) = key.scalar() else { continue };
            if !SALTPETER_KEYS.contains(&name) && !super::export::EXPORT_KEYS.contains(&name) {
                let message = unknown_key_message("saltpeter_config key", name, SALTPETER_KEYS);
                sink.push(Severity::Warning, key.pos, None, message);
                continue;
            }
            if let Some((other_file, other)) = merged.get(name)
                && !other.same_value(value)
                && *other_file != section.file
            {
                sink.push(Severity::Warning, key.pos, None, format!("`saltpeter_config.{name}` is also set, to a different value, in {} (line {}); this later value is used", other_file.display(), other.pos.line));
            }
            merged.insert(name.to_string(), (section.file, value));
        }
    }

    let url_origin = key_origin(sections, "database_url");
    let mut config = SaltpeterConfig::default();
    let mut good = BTreeMap::new();
    for (key, (file, node)) in merged {
        let mut sink = Sink { file, out };
        match config.apply(&key, node) {
            Ok(warning) => {
                if let Some(message) = warning {
                    sink.push(Severity::Warning, node.pos, None, message);
                }
                good.insert(key, Arc::new(node.clone()));
            }
            Err(message) => {
                let fallback = previous_good.and_then(|p| p.get(&key));
                let kept = match fallback {
                    Some(previous) if config.apply(&key, previous).is_ok() => {
                        good.insert(key.clone(), Arc::clone(previous));
                        "its previous value is kept"
                    }
                    _ => "the default is used",
                };
                sink.push(
                    Severity::Error,
                    node.pos,
                    None,
                    format!("`saltpeter_config.{key}`: {message}; {kept}"),
                );
            }
        }
    }
    if let (Some(message), Some((file, pos))) = (config.database_problem(), url_origin) {
        let mut sink = Sink { file, out };
        sink.push(
            Severity::Error,
            pos,
            None,
            format!("`saltpeter_config.database_url`: {message}"),
        );
    }
    (config, good)
}

/// The file and position where `key` of `saltpeter_config` is set last (the value that
/// applies), for a message about a combination of keys.
pub(crate) fn key_origin<'a>(sections: &[Section<'a>], key: &str) -> Option<(&'a Path, Pos)> {
    sections
        .iter()
        .rev()
        .find_map(|section| match &section.node.kind {
            NodeKind::Map(pairs) => pairs
                .iter()
                .rev()
                .find(|(k, _)| k.scalar() == Some(key))
                .map(|(_, value)| (section.file, value.pos)),
            _ => None,
        })
}
