//! Small closed sets of job settings, each read from its YAML spelling.

use std::fmt;

use super::values;
use super::yaml::{Node, NodeKind};

/// One mebibyte, the default head and tail of kept output.
pub const MIB: u64 = 1024 * 1024;

macro_rules! word_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $word:literal),+ $(,)? } default $default:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $(#[doc = concat!("`", $word, "`")] $variant,)+
        }

        impl $name {
            /// The YAML spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $word,)+ }
            }

            /// Reads the YAML spelling (case-insensitive).
            pub(crate) fn parse(text: &str) -> Result<$name, String> {
                $(if text.eq_ignore_ascii_case($word) { return Ok($name::$variant); })+
                Err(format!(
                    "`{}` is not one of: {}",
                    text,
                    [$($word),+].join(", ")
                ))
            }
        }

        impl Default for $name {
            fn default() -> Self {
                $name::$default
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

word_enum!(
    /// Salt's `tgt_type` for the target expression.
    TargetType {
        Glob = "glob",
        Pcre = "pcre",
        List = "list",
        Grain = "grain",
        GrainPcre = "grain_pcre",
        Pillar = "pillar",
        Nodegroup = "nodegroup",
        Compound = "compound",
        Ipcidr = "ipcidr",
    } default Glob
);

/// Who starts the wrapper on the targets: Salt, this host, or an executor plugin
/// (`saltpeter-executor-NAME`, docs/executors.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Executor {
    /// `salt`
    #[default]
    Salt,
    /// `local`
    Local,
    /// Any other name: the plugin of that name.
    Plugin(std::sync::Arc<str>),
}

impl Executor {
    /// The YAML spelling.
    pub fn as_str(&self) -> &str {
        match self {
            Executor::Salt => "salt",
            Executor::Local => "local",
            Executor::Plugin(name) => name,
        }
    }

    /// Reads the YAML spelling: `salt`, `local` (case-insensitive), or a plugin's name.
    pub(crate) fn parse(text: &str) -> Result<Executor, String> {
        if text.eq_ignore_ascii_case("salt") {
            return Ok(Executor::Salt);
        }
        if text.eq_ignore_ascii_case("local") {
            return Ok(Executor::Local);
        }
        if crate::executor::valid_name(text) {
            return Ok(Executor::Plugin(text.into()));
        }
        Err(format!(
            "`{}` is not salt, local or an executor plugin's name (1 to 64 of a-z, 0-9, _ \
             and -, starting with a letter)",
            crate::logsafe::clip(text, 80)
        ))
    }

    /// The plugin's name, for a plugin executor.
    pub fn plugin(&self) -> Option<&str> {
        match self {
            Executor::Plugin(name) => Some(name),
            _ => None,
        }
    }

    /// Whether the wrapper proves its machine with a one-time launch token (every
    /// executor but Salt, whose wrappers sign with the minion's key).
    pub fn uses_tokens(&self) -> bool {
        !matches!(self, Executor::Salt)
    }
}

impl std::fmt::Display for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

word_enum!(
    /// What happens when a job fires while its previous run is still going.
    Overlap {
        Forbid = "forbid",
        Allow = "allow",
    } default Forbid
);

word_enum!(
    /// What happens to firings missed while the daemon was down.
    Missed {
        Skip = "skip",
        Latest = "latest",
    } default Skip
);

/// How much of a target's output is kept: the first `head_bytes` and the last `tail_bytes`
/// (a job's `output_limit`, and what main hands db with every output frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutputLimit {
    pub head_bytes: u64,
    pub tail_bytes: u64,
}

impl Default for OutputLimit {
    fn default() -> Self {
        OutputLimit {
            head_bytes: MIB,
            tail_bytes: MIB,
        }
    }
}

impl OutputLimit {
    /// A number of bytes (for both head and tail), or a mapping with `head` and/or `tail`.
    pub(crate) fn read(node: &Node) -> Result<OutputLimit, String> {
        match &node.kind {
            NodeKind::Map(pairs) => {
                let mut limit = OutputLimit::default();
                for (key, value) in pairs {
                    match key.scalar() {
                        Some("head") => limit.head_bytes = values::unsigned(value)?,
                        Some("tail") => limit.tail_bytes = values::unsigned(value)?,
                        _ => {
                            return Err(format!(
                                "`output_limit` takes `head` and `tail` (bytes), found {}",
                                values::found(key)
                            ));
                        }
                    }
                }
                Ok(limit)
            }
            _ => {
                let bytes = values::unsigned(node)
                    .map_err(|m| format!("{m} (bytes, or a mapping with head and tail)"))?;
                Ok(OutputLimit {
                    head_bytes: bytes,
                    tail_bytes: bytes,
                })
            }
        }
    }
}

/// A secret string: `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for comparing a presented token.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// How much run history is kept per job; `0` means no limit on that axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub runs: u64,
    pub days: u64,
    pub bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            runs: 1000,
            days: 90,
            bytes: 256 * MIB,
        }
    }
}
