//! Message types shared across process and network boundaries.
//!
//! - `records`: run and target states and records (CLI, API, database)
//! - `db`: the main <-> db link and its payloads
//! - `link`: roles, hello and the messages of the internal links
//! - `admin`: the one request vocabulary (`saltpeterctl`, the HTTP API, `/ws`) and its
//!   answers
//! - `wrapper`: the wrapper <-> hub WebSocket protocol v1
//! - `ui`: the dashboard's live-update types on the hub-main link
//! - `bytes`: output payloads encoded as one block, not byte by byte
//! - `compress`: zstd output compression, on the wrapper link and in the stored chunks
//! - `limits`: a job's resource limits on its target

/// Declares, for each request of a link, a marker type bound to the reply it expects
/// (`ipc::rpc::Call`): `Name -> Type { ReplyPattern => value }`, one line per request.
macro_rules! calls {
    ($reply:ty, $peer:expr; $($(#[$doc:meta])* $name:ident -> $ty:ty { $pat:pat => $val:expr })*) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy)]
            pub(crate) struct $name;

            impl $crate::ipc::rpc::Call<$reply> for $name {
                type Reply = $ty;
                const PEER: $crate::ipc::Role = $peer;
                const NAME: &'static str = stringify!($name);

                fn unpack(reply: $reply) -> Result<$ty, $reply> {
                    match reply {
                        $pat => Ok($val),
                        other => Err(other),
                    }
                }
            }
        )*
    };
}

pub(crate) mod admin;
pub(crate) mod bytes;
pub mod compress;
pub(crate) mod db;
pub(crate) mod limits;
pub(crate) mod link;
pub(crate) mod link_blocking;
pub(crate) mod notify;
pub(crate) mod records;
pub(crate) mod ui;
pub mod wrapper;

/// The reply type of a side that is never called (db and blocking never call main): a
/// reply to such a side cannot even be built.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum NoReply {}

/// A secret string (token, resume key): serialized as is, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Redacted(pub String);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"***\"")
    }
}

#[cfg(test)]
mod tests {
    use super::Redacted;

    #[test]
    fn redacted_hides_only_from_debug() {
        let r = Redacted("s3cret".into());
        assert_eq!(format!("{r:?}"), "\"***\"");
        assert_eq!(serde_json::to_string(&r).unwrap(), "\"s3cret\"");
    }
}
