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

word_enum!(
    /// Who starts the command on the targets.
    Executor {
        Salt = "salt",
        Local = "local",
    } default Salt
);

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
