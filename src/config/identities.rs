//! `saltpeter_config.api_tokens`: the named API identities and their roles.
//!
//! ```yaml
//! api_tokens:
//!   - {name: alice, role: admin, token_sha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8}
//!   - {name: grafana, role: viewer, token_sha256: ...}
//! ```
//!
//! Only the SHA-256 of each token is configured (`printf %s "$TOKEN" | sha256sum`), so a
//! configuration file that leaks gives no token away. The old single `api_token` is one
//! more identity, named `api_token`, with the `admin` role.

use super::values;
use super::yaml::{Node, NodeKind};

/// What an identity may do over HTTP and `/ws`; each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApiRole {
    /// Reads everything (jobs, runs, output, status, metrics, maintenance).
    Viewer,
    /// Also runs and kills jobs and changes maintenance.
    Operator,
    /// Everything, reload and wrapper deployment included.
    Admin,
}

impl ApiRole {
    pub fn parse(text: &str) -> Result<ApiRole, String> {
        match text {
            "viewer" => Ok(ApiRole::Viewer),
            "operator" => Ok(ApiRole::Operator),
            "admin" => Ok(ApiRole::Admin),
            other => Err(format!("`{other}` is not one of: viewer, operator, admin")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ApiRole::Viewer => "viewer",
            ApiRole::Operator => "operator",
            ApiRole::Admin => "admin",
        }
    }
}

/// One configured identity; the digest is not secret but is never printed either.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiIdentity {
    pub name: String,
    pub role: ApiRole,
    pub token_sha256: [u8; 32],
}

impl std::fmt::Debug for ApiIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiIdentity")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

const MAX_NAME: usize = 64;

pub(crate) fn read_api_tokens(node: &Node) -> Result<Vec<ApiIdentity>, String> {
    if node.is_null() {
        return Ok(Vec::new());
    }
    let NodeKind::Seq(items) = &node.kind else {
        return Err(format!(
            "expected a list of {{name, role, token_sha256}}, found {}",
            node.describe()
        ));
    };
    let mut out: Vec<ApiIdentity> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = |msg: String| format!("entry {}: {msg}", i + 1);
        let NodeKind::Map(pairs) = &item.kind else {
            return Err(at(format!(
                "expected a mapping with name, role and token_sha256, found {}",
                item.describe()
            )));
        };
        let (mut name, mut role, mut digest) = (None, None, None);
        for (key, value) in pairs {
            match key.scalar() {
                Some("name") => name = Some(values::non_empty_string(value).map_err(at)?),
                Some("role") => {
                    let text = values::string(value).map_err(at)?;
                    role = Some(ApiRole::parse(text.trim()).map_err(at)?);
                }
                Some("token_sha256") => {
                    let text = values::string(value).map_err(at)?;
                    digest = Some(parse_digest(text.trim()).ok_or_else(|| {
                        at(
                            "token_sha256 must be 64 hex digits (printf %s TOKEN | sha256sum)"
                                .into(),
                        )
                    })?);
                }
                _ => {
                    return Err(at(format!(
                        "takes name, role and token_sha256, found {}",
                        values::found(key)
                    )));
                }
            }
        }
        let name = name.ok_or_else(|| at("missing `name`".into()))?;
        if name.len() > MAX_NAME
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._@-".contains(c))
        {
            return Err(at(format!(
                "name {name:?}: up to {MAX_NAME} letters, digits and . _ @ -"
            )));
        }
        if out.iter().any(|o| o.name == name) || name == "api_token" {
            return Err(at(format!("the name {name:?} is used twice")));
        }
        out.push(ApiIdentity {
            role: role.ok_or_else(|| at("missing `role`".into()))?,
            token_sha256: digest.ok_or_else(|| at("missing `token_sha256`".into()))?,
            name,
        });
    }
    Ok(out)
}

fn parse_digest(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}
