//! Log export settings, in the original's terms: `logdir` (per-job log files) and event
//! export to Elasticsearch (`elasticsearch`/`es_url`, `elasticsearch_index`/`es_index`,
//! `use_es`, `es_user`, `es_password`) and OpenSearch (`opensearch`/`opensearch_url`,
//! `opensearch_index`, `use_opensearch`, `opensearch_user`, `opensearch_password`).
//!
//! An export is on when its URL is set and its `use_*` is not `false`. The password is a
//! [`Secret`]: it reaches only the delivery helper's stdin, never the database or a log.

use std::path::PathBuf;

use super::notify::check_url;
use super::types::Secret;
use super::values;
use super::yaml::Node;

/// One export destination, ready to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportTarget {
    /// `elasticsearch` or `opensearch`.
    pub name: &'static str,
    /// Base URL; documents go to `{url}/_bulk`.
    pub url: String,
    /// Index prefix: documents go to `{index}-YYYY.MM.DD` (UTC date).
    pub index: String,
    pub auth: Option<(String, Secret)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Raw {
    enabled: Option<bool>,
    url: Option<String>,
    index: Option<String>,
    user: Option<String>,
    password: Option<Secret>,
}

/// `logdir` and the exports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    pub logdir: Option<PathBuf>,
    /// A job's log file is rotated (`.1` .. `.{log_keep}`) when it grows past this.
    pub log_max_bytes: u64,
    pub log_keep: u32,
    es: Raw,
    opensearch: Raw,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            logdir: None,
            log_max_bytes: 100 * super::types::MIB,
            log_keep: 5,
            es: Raw::default(),
            opensearch: Raw::default(),
        }
    }
}

pub(crate) const EXPORT_KEYS: &[&str] = &[
    "logdir",
    "log_max_bytes",
    "log_keep",
    "elasticsearch",
    "elasticsearch_index",
    "use_es",
    "es_url",
    "es_index",
    "es_user",
    "es_password",
    "opensearch",
    "opensearch_index",
    "use_opensearch",
    "opensearch_url",
    "opensearch_user",
    "opensearch_password",
];

fn url(node: &Node) -> Result<Option<String>, String> {
    match values::optional_string(node)?.map(|s| s.trim().trim_end_matches('/').to_string()) {
        Some(u) if u.is_empty() => Ok(None),
        Some(u) => check_url(&u).map(Some),
        None => Ok(None),
    }
}

impl LogSettings {
    /// Applies one key of [`EXPORT_KEYS`].
    pub(crate) fn apply(&mut self, key: &str, node: &Node) -> Result<(), String> {
        let text = |n: &Node| values::optional_string(n).map(|s| s.filter(|s| !s.is_empty()));
        match key {
            "logdir" => self.logdir = text(node)?.map(PathBuf::from),
            "log_max_bytes" => self.log_max_bytes = values::unsigned(node)?.max(4096),
            "log_keep" => {
                self.log_keep = u32::try_from(values::unsigned(node)?.min(100)).unwrap_or(5)
            }
            "elasticsearch" | "es_url" => self.es.url = url(node)?,
            "elasticsearch_index" | "es_index" => self.es.index = text(node)?,
            "use_es" => self.es.enabled = Some(values::boolean(node)?),
            "es_user" => self.es.user = text(node)?,
            "es_password" => self.es.password = text(node)?.map(Secret::new),
            "opensearch" | "opensearch_url" => self.opensearch.url = url(node)?,
            "opensearch_index" => self.opensearch.index = text(node)?,
            "use_opensearch" => self.opensearch.enabled = Some(values::boolean(node)?),
            "opensearch_user" => self.opensearch.user = text(node)?,
            "opensearch_password" => self.opensearch.password = text(node)?.map(Secret::new),
            _ => {}
        }
        if let Some(index) = self
            .es
            .index
            .as_deref()
            .or(self.opensearch.index.as_deref())
            && (index.is_empty()
                || index.contains(['/', '\\', '*', '?', '"', '<', '>', '|', ' ', ',', '#'])
                || index != index.to_lowercase())
        {
            return Err(format!(
                "index prefix `{index}` is not a valid index name (lower case, no spaces or / \\ * ? \" < > | , #)"
            ));
        }
        Ok(())
    }

    /// The exports that are on.
    pub fn exports(&self) -> Vec<ExportTarget> {
        let make = |name: &'static str, raw: &Raw| {
            let url = raw.url.clone()?;
            if raw.enabled == Some(false) {
                return None;
            }
            Some(ExportTarget {
                name,
                url,
                index: raw.index.clone().unwrap_or_else(|| "saltpeter".to_string()),
                auth: raw
                    .user
                    .clone()
                    .map(|u| (u, raw.password.clone().unwrap_or_else(|| Secret::new("")))),
            })
        };
        [
            make("elasticsearch", &self.es),
            make("opensearch", &self.opensearch),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}
