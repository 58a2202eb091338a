//! Reading the configuration directory: listing and fingerprinting its files, reading each
//! (bounded) and parsing it into a tree that keeps positions.
//!
//! This is the slow part of a load, and the part a reload runs in a child process of the
//! `blocking` role (`saltpeter-daemon --load-config DIR`, see `roles/blocking/helpers.rs`),
//! so its result, [`ParsedFiles`], is plain data that crosses a process link. Only files
//! whose fingerprint changed since the load it follows are read; the others are marked
//! [`Parse::Unchanged`] and keep what main already holds of them (`content.rs`).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::content::CONFIG_KEY;
use super::entries::{ConfigDirError, Fingerprint};
use super::saltpeter::SaltpeterConfig;
use super::saltpeter_merge;
use super::types::MIB;
use super::values::Section;
use super::yaml::{self, Node, NodeKind, Pos};

/// The largest configuration file read. Parsing is linear, but a file this big is a
/// mistake more likely than a plan (10,000 ordinary jobs take about 2 MiB).
pub const MAX_FILE_BYTES: u64 = 4 * MIB;

/// The most a parsed file may weigh once encoded (aliases can make a tree much larger than
/// its text): a reload hands trees to main in one message, whose size is bounded.
pub const MAX_TREE_BYTES: usize = 6 * MIB as usize;

/// What the reading step found, file by file, sorted by path.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ParsedFiles {
    pub files: Vec<ParsedFile>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ParsedFile {
    pub path: PathBuf,
    /// Taken before the file was read: a change while it is read shows at the next scan.
    pub fingerprint: Fingerprint,
    pub outcome: Parse,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Parse {
    /// The fingerprint is the one of the load this follows: its tree is reused, unread.
    Unchanged,
    /// Changed, but left for the next scan: the trees parsed this time already fill one
    /// hand-over (many files changed at once; they arrive over a few seconds).
    Deferred,
    Parsed(Node),
    /// Unreadable, too large or not valid YAML: where, and why.
    Failed {
        pos: Pos,
        message: String,
    },
}

impl Parse {
    fn from_result(result: Result<Node, (Pos, String)>) -> Parse {
        match result {
            Ok(node) => Parse::Parsed(node),
            Err((pos, message)) => Parse::Failed { pos, message },
        }
    }
}

/// Reads and parses the files of `dir` whose fingerprint is not the one in `known`.
/// `handover`: the most encoded tree bytes to return (a reload through a child process);
/// files beyond it are [`Parse::Deferred`].
pub fn parse_changed(
    dir: &Path,
    known: &BTreeMap<PathBuf, Fingerprint>,
    handover: Option<usize>,
) -> Result<ParsedFiles, ConfigDirError> {
    let mut files = Vec::new();
    let mut carried = 0usize;
    for (path, fingerprint) in scan_dir(dir)? {
        if known.get(&path) == Some(&fingerprint) {
            files.push(ParsedFile {
                path,
                fingerprint,
                outcome: Parse::Unchanged,
            });
            continue;
        }
        let outcome = match read_tree(&path) {
            Ok(node) => match crate::ipc::codec::encode(&node, MAX_TREE_BYTES) {
                Ok(bytes) => match handover {
                    Some(limit) if carried > 0 && carried + bytes.len() > limit => Parse::Deferred,
                    _ => {
                        carried += bytes.len();
                        Parse::Parsed(node)
                    }
                },
                Err(_) => Parse::Failed {
                    pos: Pos { line: 0, column: 0 },
                    message: format!(
                        "once parsed (aliases expanded) the file is larger than {} MiB, the most \
                         one file may hold (split it into several files)",
                        MAX_TREE_BYTES / MIB as usize
                    ),
                },
            },
            Err(e) => Parse::from_result(Err(e)),
        };
        files.push(ParsedFile {
            path,
            fingerprint,
            outcome,
        });
    }
    Ok(ParsedFiles { files })
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

/// Only the merged `saltpeter_config`, for processes that need settings and no jobs (the
/// supervisor, the hub). Files whose text does not mention `saltpeter_config` are not
/// parsed, and no job is validated, so this stays cheap with thousands of jobs; job
/// problems are left to main, which loads everything and reports them.
///
/// A file that mentions `saltpeter_config` and does not parse, or a file that cannot be
/// read (so whether it holds settings cannot be told), is an error: started without
/// it, the daemon would listen where the defaults say (the wrapper port on 0.0.0.0, the
/// API off) and still report ready. (A reload keeps the previous configuration instead:
/// main's `load`, not this.)
pub fn load_settings(dir: &Path) -> Result<SaltpeterConfig, ConfigDirError> {
    let mut trees = Vec::new();
    let unparsable = |path: &Path, (pos, message): (Pos, String)| ConfigDirError::File {
        path: path.to_path_buf(),
        at: match pos.line {
            0 => String::new(),
            line => format!(", line {line}"),
        },
        message,
    };
    for path in scan_dir(dir)?.into_keys() {
        let text = read_bounded(&path).map_err(|e| unparsable(&path, e))?;
        if !text.contains(CONFIG_KEY) {
            continue;
        }
        let tree = parse_tree(&text).map_err(|e| unparsable(&path, e))?;
        trees.push((path, tree));
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
    let settings = saltpeter_merge::merge_saltpeter(&sections, None, &mut ignored).0;
    check_database_settings(&sections, &settings, &ignored)?;
    if let Some(key) = &settings.tls_key {
        check_key_file(key)?;
    }
    Ok(settings)
}

/// The database settings must be right before the daemon starts: a wrong one would
/// not fall back to anything safe (plain text to a remote database, an unchecked
/// certificate, or SQLite beside servers that share PostgreSQL). Other keys' errors
/// are main's to report, and their defaults apply.
fn check_database_settings(
    sections: &[Section<'_>],
    settings: &SaltpeterConfig,
    diagnostics: &[super::diagnostic::Diagnostic],
) -> Result<(), ConfigDirError> {
    let file_error = |file: &Path, pos: Pos, message: String| ConfigDirError::File {
        path: file.to_path_buf(),
        at: format!(", line {}", pos.line),
        message,
    };
    for key in ["database_ca_file", "database_plaintext_ok"] {
        let prefix = format!("`saltpeter_config.{key}`");
        if let Some(d) = diagnostics.iter().find(|d| {
            d.severity == super::diagnostic::Severity::Error && d.message.starts_with(&prefix)
        }) {
            let pos = Pos {
                line: d.line,
                column: d.column,
            };
            return Err(file_error(&d.file, pos, d.message.clone()));
        }
    }
    if let Some(message) = settings.database_problem()
        && let Some((file, pos)) = saltpeter_merge::key_origin(sections, "database_url")
    {
        return Err(file_error(
            file,
            pos,
            format!("saltpeter_config.database_url: {message}"),
        ));
    }
    Ok(())
}

/// The TLS private key must not be readable by others: refused at start. Readable by a
/// group other than the daemon's own is allowed (a shared `ssl-cert` group) but said.
fn check_key_file(key: &Path) -> Result<(), ConfigDirError> {
    use std::os::unix::fs::PermissionsExt;
    // A missing or unreadable key is the TLS set-up's error, reported there.
    let Ok(meta) = std::fs::metadata(key) else {
        return Ok(());
    };
    let mode = meta.permissions().mode();
    if mode & 0o004 != 0 {
        return Err(ConfigDirError::File {
            path: key.to_path_buf(),
            at: String::new(),
            message: format!(
                "saltpeter_config.tls_key is readable by others (mode {:o});                  chmod 0600 or 0640 with the daemon's group",
                mode & 0o777
            ),
        });
    }
    if mode & 0o040 != 0 && meta.gid() != nix::unistd::getegid().as_raw() {
        log::warn!(
            "the TLS key {} is readable by group {} (mode {:o}), not the daemon's own",
            key.display(),
            meta.gid(),
            mode & 0o777
        );
    }
    Ok(())
}

/// Reads and parses one file; its top level must be a mapping (an empty file is an empty one).
fn read_tree(path: &Path) -> Result<Node, (Pos, String)> {
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

fn parse_tree(text: &str) -> Result<Node, (Pos, String)> {
    match yaml::parse(text) {
        Ok(Some(node)) if matches!(node.kind, NodeKind::Map(_)) || node.is_null() => Ok(node),
        Ok(Some(node)) => Err((
            node.pos,
            format!(
                "expected a mapping of job names to jobs at the top level, found {}",
                node.describe()
            ),
        )),
        Ok(None) => Ok(Node {
            kind: NodeKind::Map(Vec::new()),
            pos: Pos { line: 1, column: 1 },
        }),
        Err(err) => Err((err.pos, format!("YAML syntax error: {}", err.message))),
    }
}
