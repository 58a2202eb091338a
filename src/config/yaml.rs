//! A YAML document as a tree that keeps the line and column of every node.
//!
//! serde-saphyr has no generic value tree, and deserialising a whole file into typed structs
//! would let one bad job fail the file. So the file is read with serde-saphyr's event parser
//! (granit-parser, re-exported by serde-saphyr) into this small tree, and the loader validates
//! each job's subtree on its own. Scalars keep their source text and whether they were quoted,
//! so typing (YAML 1.1 booleans such as `yes`/`off`, integers, cron fields like `08`) is decided
//! by the key that reads them. Anchors and aliases are expanded (within a node budget, against
//! "billion laughs" files) and `<<` merge keys are applied, as PyYAML did for the original.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle, ScanError, Span};

/// Expanded nodes allowed per document (aliases included).
const MAX_NODES: usize = 1_000_000;

/// A 1-based line and column in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

/// Crosses a process link on reload (`files.rs`), hence serde.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Node {
    pub(crate) kind: NodeKind,
    pub(crate) pos: Pos,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum NodeKind {
    /// `quoted` is true for quoted and block scalars and for `!!str` tags: never a bool/null.
    Scalar {
        text: String,
        quoted: bool,
    },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

/// A syntax error, with the position the parser stopped at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct YamlError {
    pub(crate) pos: Pos,
    pub(crate) message: String,
}

impl Node {
    /// The scalar text, if this is a scalar.
    pub(crate) fn scalar(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }

    /// YAML null: an empty plain scalar, `~` or `null`.
    pub(crate) fn is_null(&self) -> bool {
        matches!(&self.kind, NodeKind::Scalar { text, quoted: false }
            if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    pub(crate) fn is_plain(&self) -> bool {
        matches!(&self.kind, NodeKind::Scalar { quoted: false, .. })
    }

    /// What kind of value this is, for messages ("expected a string, found a list").
    pub(crate) fn describe(&self) -> &'static str {
        match &self.kind {
            NodeKind::Scalar { .. } if self.is_null() => "nothing (null)",
            NodeKind::Scalar { .. } => "a scalar",
            NodeKind::Seq(_) => "a list",
            NodeKind::Map(_) => "a mapping",
        }
    }

    /// Structural equality, ignoring positions and quoting.
    pub(crate) fn same_value(&self, other: &Node) -> bool {
        match (&self.kind, &other.kind) {
            (NodeKind::Scalar { text: a, .. }, NodeKind::Scalar { text: b, .. }) => a == b,
            (NodeKind::Seq(a), NodeKind::Seq(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_value(y))
            }
            (NodeKind::Map(a), NodeKind::Map(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|((ka, va), (kb, vb))| ka.same_value(kb) && va.same_value(vb))
            }
            _ => false,
        }
    }

    fn count(&self) -> usize {
        match &self.kind {
            NodeKind::Scalar { .. } => 1,
            NodeKind::Seq(items) => 1 + items.iter().map(Node::count).sum::<usize>(),
            NodeKind::Map(pairs) => {
                1 + pairs
                    .iter()
                    .map(|(k, v)| k.count() + v.count())
                    .sum::<usize>()
            }
        }
    }
}

fn pos_of(span: &Span) -> Pos {
    Pos {
        line: span.start.line(),
        column: span.start.col() + 1,
    }
}

enum Open {
    Seq(Vec<Node>, Pos, usize),
    Map(Vec<(Node, Node)>, Option<Node>, Pos, usize),
}

/// Parses the first document of `text`. `Ok(None)` for a file with no document at all.
pub(crate) fn parse(text: &str) -> Result<Option<Node>, YamlError> {
    let mut stack: Vec<Open> = Vec::new();
    let mut anchors: HashMap<usize, Node> = HashMap::new();
    let mut budget = MAX_NODES;
    let mut root: Option<Node> = None;
    let mut documents = 0usize;

    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| scan_error(&e))?;
        let pos = pos_of(&span);
        let finished = match event {
            Event::DocumentStart(..) => {
                documents += 1;
                if documents > 1 {
                    return Err(YamlError {
                        pos,
                        message: "a configuration file holds one YAML document; found a second \
                                  `---`"
                            .to_string(),
                    });
                }
                None
            }
            Event::Scalar(value, style, anchor, tag) => {
                let tagged_str = tag.as_ref().is_some_and(|t| t.core_suffix() == Some("str"));
                let quoted = !matches!(style, ScalarStyle::Plain) || tagged_str;
                let node = Node {
                    kind: NodeKind::Scalar {
                        text: value.into_owned(),
                        quoted,
                    },
                    pos,
                };
                remember(&mut anchors, anchor, &node);
                Some(node)
            }
            Event::SequenceStart(_, anchor, _) => {
                stack.push(Open::Seq(Vec::new(), pos, anchor));
                None
            }
            Event::MappingStart(_, anchor, _) => {
                stack.push(Open::Map(Vec::new(), None, pos, anchor));
                None
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Open::Seq(items, pos, anchor)) => {
                    let node = Node {
                        kind: NodeKind::Seq(items),
                        pos,
                    };
                    remember(&mut anchors, anchor, &node);
                    Some(node)
                }
                Some(Open::Map(pairs, _, pos, anchor)) => {
                    let node = Node {
                        kind: NodeKind::Map(apply_merge_keys(pairs)),
                        pos,
                    };
                    remember(&mut anchors, anchor, &node);
                    Some(node)
                }
                None => None,
            },
            Event::Alias(id) => match anchors.get(&id) {
                Some(node) => {
                    let size = node.count();
                    if size > budget {
                        return Err(YamlError {
                            pos,
                            message: "aliases expand to too many nodes".to_string(),
                        });
                    }
                    budget -= size;
                    Some(node.clone())
                }
                None => {
                    return Err(YamlError {
                        pos,
                        message: "alias to an unknown anchor".to_string(),
                    });
                }
            },
            _ => None,
        };
        let Some(node) = finished else { continue };
        budget = budget.saturating_sub(1);
        if budget == 0 {
            return Err(YamlError {
                pos,
                message: "document has too many nodes".to_string(),
            });
        }
        match stack.last_mut() {
            Some(Open::Seq(items, ..)) => items.push(node),
            Some(Open::Map(pairs, pending, ..)) => match pending.take() {
                Some(key) => pairs.push((key, node)),
                None => *pending = Some(node),
            },
            None => {
                if root.is_none() {
                    root = Some(node);
                }
            }
        }
    }
    Ok(root)
}

fn remember(anchors: &mut HashMap<usize, Node>, anchor: usize, node: &Node) {
    if anchor != 0 {
        anchors.insert(anchor, node.clone());
    }
}

/// `<<: *defaults` (or a list of them): pairs from the merged mappings are added unless the
/// mapping sets the key itself; earlier mappings in a list win over later ones.
fn apply_merge_keys(pairs: Vec<(Node, Node)>) -> Vec<(Node, Node)> {
    let is_merge = |k: &Node| k.is_plain() && k.scalar() == Some("<<");
    if !pairs.iter().any(|(k, _)| is_merge(k)) {
        return pairs;
    }
    let mut own = Vec::new();
    let mut merged_sources = Vec::new();
    for (key, value) in pairs {
        if is_merge(&key) {
            match value.kind {
                NodeKind::Map(inner) => merged_sources.push(inner),
                NodeKind::Seq(items) => {
                    for item in items {
                        if let NodeKind::Map(inner) = item.kind {
                            merged_sources.push(inner);
                        }
                    }
                }
                NodeKind::Scalar { .. } => own.push((key, value)),
            }
        } else {
            own.push((key, value));
        }
    }
    // A set of the keys present, not a scan of `own` per merged key: that was quadratic
    // (a 400 KB file with a 10,000-key merge took seconds, main's loop stalled meanwhile).
    let mut present: HashSet<String> = own
        .iter()
        .filter_map(|(k, _)| k.scalar().map(str::to_string))
        .collect();
    for source in merged_sources {
        for (key, value) in source {
            let fresh = match key.scalar() {
                Some(name) => present.insert(name.to_string()),
                None => true,
            };
            if fresh {
                own.push((key, value));
            }
        }
    }
    own
}

fn scan_error(err: &ScanError) -> YamlError {
    let marker = err.marker();
    let mut message = err.info();
    if message.is_empty() {
        message = format!("{:?}", err.kind());
    }
    let lower = message.to_ascii_lowercase();
    if lower.contains("alias") || lower.contains("anchor") {
        message.push_str(
            " (a value starting with `*` is a YAML alias: quote it, e.g. dow: '*' or \
             min: '*/15')",
        );
    }
    YamlError {
        pos: Pos {
            line: marker.line(),
            column: marker.col() + 1,
        },
        message,
    }
}
