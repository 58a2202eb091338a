//! A stored output chunk's encoding columns (`encoding`, `raw_len`, schema version 8),
//! read and written the same way by both backends.

use super::errors::{Op, StoreError, to_db};
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

/// An encoded chunk without its first `excess` bytes, as it is stored in its place.
pub(crate) struct Trimmed {
    pub bytes: Vec<u8>,
    pub encoding: Encoding,
    pub raw_len: Option<i64>,
    /// How far its `pos` moves (the bytes cut).
    pub shift: i64,
    pub cut: u64,
}

/// Cuts the first `excess` bytes of a chunk that `data` decodes to, and encodes the
/// rest again (compressed when that still pays and `compress` is on).
pub(crate) fn trim_front(
    op: Op,
    data: &[u8],
    excess: u64,
    compress: bool,
) -> Result<Trimmed, StoreError> {
    let cut = usize::try_from(excess)
        .unwrap_or(usize::MAX)
        .min(data.len());
    let rest = &data[cut..];
    let stored = crate::wire::compress::encode_chunk(rest, compress);
    let raw_len = raw_len_column(op, &stored, rest.len())?;
    Ok(Trimmed {
        encoding: stored.encoding,
        bytes: stored.bytes.into_owned(),
        raw_len,
        shift: to_db(op, "trim", cut as u64)?,
        cut: cut as u64,
    })
}
