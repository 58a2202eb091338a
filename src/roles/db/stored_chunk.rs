//! A stored output chunk's encoding columns (`encoding`, `raw_len`, schema version 7),
//! read and written the same way by both backends.

use super::store::{Op, StoreError, to_db};
use crate::wire::compress::{Encoding, StoredChunk, decode_chunk};

/// `output_chunks.raw_len` of a stored chunk: NULL for plain rows.
pub(crate) fn raw_len_column(
    op: Op,
    stored: &StoredChunk<'_>,
    raw: usize,
) -> Result<Option<i64>, StoreError> {
    match stored.encoding {
        Encoding::Plain => Ok(None),
        Encoding::Zstd => Ok(Some(to_db(op, "output chunk length", raw as u64)?)),
    }
}

/// A stored chunk's bytes as the command wrote them (`encoding`, `raw_len` columns).
pub(crate) fn decoded(
    op: Op,
    bytes: Vec<u8>,
    encoding: i64,
    raw_len: Option<i64>,
) -> Result<Vec<u8>, StoreError> {
    let invalid = |reason: String| StoreError::Invalid { op, reason };
    let encoding = Encoding::from_db(encoding)
        .ok_or_else(|| invalid(format!("output chunk has unknown encoding {encoding}")))?;
    let raw = match (encoding, raw_len) {
        (Encoding::Plain, _) => bytes.len(),
        (_, Some(raw)) => usize::try_from(raw).unwrap_or(usize::MAX),
        (_, None) => return Err(invalid("compressed output chunk without raw_len".into())),
    };
    decode_chunk(encoding, bytes, raw, MAX_STORED_CHUNK)
        .map_err(|e| invalid(format!("stored output chunk: {e}")))
}

/// No stored chunk is larger than an internal-link frame (16 MiB); the cap only guards
/// against a damaged row.
const MAX_STORED_CHUNK: usize = 64 << 20;
