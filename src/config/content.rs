//! What main keeps of a parsed file between loads.
//!
//! A parsed tree weighs several times its text (about 700 bytes per ordinary job, 7 MB
//! for 10,000 jobs), and once a load has validated the jobs only two things of it are
//! needed again: the `saltpeter_config` and `saltpeter_maintenance` sections, merged anew
//! at every load, and each top-level key with its position, which tells the next load which
//! jobs the file defines and where. So after a load a file keeps those and drops the jobs'
//! mappings ([`FileContent::stripped`]). A later load reuses an unchanged file's jobs from
//! its cache; when a job must be validated again while its file did not change (inherited
//! defaults changed, a duplicate name went away), that load asks for the file to be read
//! again (`Load::Reread`) instead of holding every tree in case.

use std::sync::atomic::{AtomicU64, Ordering};

/// The special top-level keys; every other top-level key is a job name.
pub(super) const CONFIG_KEY: &str = "saltpeter_config";
pub(super) const MAINTENANCE_KEY: &str = "saltpeter_maintenance";
use super::yaml::{Node, NodeKind};

/// Numbers the parses of this process: a cached job is reused only while its file keeps
/// the parse it was validated from.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

#[derive(Debug)]
pub(super) struct FileContent {
    /// Which parse this is (see [`NEXT_ID`]); kept when stripped.
    pub(super) id: u64,
    /// `saltpeter_config` and `saltpeter_maintenance` as written: (key, value).
    pub(super) sections: Vec<(Node, Node)>,
    /// Every other top-level key, in file order: job names, and keys that are not valid
    /// names (reported again at each load).
    pub(super) keys: Vec<Node>,
    /// The value of each key of `keys`, in the same order; empty once stripped.
    pub(super) bodies: Vec<Node>,
}

impl FileContent {
    /// The content of a file just parsed (a top level that is not a mapping has nothing).
    pub(super) fn of_tree(tree: Node) -> FileContent {
        let mut content = FileContent {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            sections: Vec::new(),
            keys: Vec::new(),
            bodies: Vec::new(),
        };
        if let NodeKind::Map(pairs) = tree.kind {
            for (key, value) in pairs {
                if matches!(key.scalar(), Some(CONFIG_KEY | MAINTENANCE_KEY)) {
                    content.sections.push((key, value));
                } else {
                    content.keys.push(key);
                    content.bodies.push(value);
                }
            }
        }
        content
    }

    /// The same parse without the jobs' mappings.
    pub(super) fn stripped(&self) -> FileContent {
        FileContent {
            id: self.id,
            sections: self.sections.clone(),
            keys: self.keys.clone(),
            bodies: Vec::new(),
        }
    }

    pub(super) fn is_stripped(&self) -> bool {
        self.bodies.len() != self.keys.len()
    }

    /// Each top-level key other than the sections, with its mapping while it is kept.
    pub(super) fn entries(&self) -> impl Iterator<Item = (&Node, Option<&Node>)> {
        let bodies = (!self.is_stripped()).then_some(&self.bodies);
        self.keys
            .iter()
            .enumerate()
            .map(move |(i, key)| (key, bodies.and_then(|b| b.get(i))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::yaml;

    #[test]
    fn a_stripped_file_keeps_its_sections_and_keys_but_not_the_jobs() {
        let text = "saltpeter_config:\n  timezone: UTC\na:\n  command: x\n\
                    saltpeter_maintenance:\n  global: false\nb:\n  command: y\n";
        let tree = yaml::parse(text).expect("valid YAML").expect("a document");
        let content = FileContent::of_tree(tree);
        assert_eq!(content.sections.len(), 2);
        let names: Vec<_> = content.entries().map(|(k, _)| k.scalar()).collect();
        assert_eq!(names, [Some("a"), Some("b")]);
        assert!(content.entries().all(|(_, body)| body.is_some()));

        let stripped = content.stripped();
        assert_eq!(stripped.id, content.id);
        assert_eq!(stripped.sections.len(), 2);
        assert!(stripped.is_stripped());
        let names: Vec<_> = stripped.entries().map(|(k, _)| k.scalar()).collect();
        assert_eq!(names, [Some("a"), Some("b")]);
        assert!(stripped.entries().all(|(_, body)| body.is_none()));
    }

    #[test]
    fn each_parse_has_its_own_id_and_a_scalar_top_level_has_nothing() {
        let a = FileContent::of_tree(
            yaml::parse("a: {}\n")
                .expect("valid YAML")
                .expect("a document"),
        );
        let b = FileContent::of_tree(
            yaml::parse("a: {}\n")
                .expect("valid YAML")
                .expect("a document"),
        );
        assert_ne!(a.id, b.id);
        let empty = FileContent::of_tree(
            yaml::parse("just text\n")
                .expect("valid YAML")
                .expect("a document"),
        );
        assert!(empty.keys.is_empty() && empty.sections.is_empty());
        assert!(!empty.is_stripped());
    }
}
