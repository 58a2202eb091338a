//! Output compression (zstd, level 1; the choice and its figures: docs/dependencies.md),
//! shared by the wrapper link and both databases' stored chunks.
//!
//! Compression is used only when it pays: a block under [`MIN_COMPRESS_BYTES`] stays
//! plain (small interactive lines keep their latency and cost no CPU), and a compressed
//! block is kept only when it saves at least an eighth. Every compressed block travels
//! with its uncompressed length, so limits and positions always count uncompressed
//! bytes, and decompression is capped at that length and at the caller's limit: a
//! hostile peer cannot make the server allocate more than it allows (no zip bomb).

/// The encoding name negotiated in `hello.compression` / `welcome.compression`.
pub const ZSTD: &str = "zstd";
/// Blocks shorter than this are sent and stored plain.
pub const MIN_COMPRESS_BYTES: usize = 4096;
/// An output encoding a server can take on the link (`welcome.compression`); it is
/// always one the wrapper's hello offered, so an older wrapper never sees an unknown one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkEncoding {
    Zstd,
}

/// zstd level: 1 gave the best ratio per CPU on log-like output and `seq`.
const LEVEL: i32 = 1;

/// How a stored chunk's bytes are encoded (`output_chunks.encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// The bytes as the command wrote them (every row written before compression).
    Plain = 0,
    /// One zstd frame; `output_chunks.raw_len` holds the uncompressed length.
    Zstd = 1,
}

impl Encoding {
    pub fn from_db(value: i64) -> Option<Encoding> {
        match value {
            0 => Some(Encoding::Plain),
            1 => Some(Encoding::Zstd),
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CompressError {
    #[error("compressed output claims {raw} bytes, more than the limit of {limit}")]
    TooLarge { raw: usize, limit: usize },
    #[error("compressed output does not decompress to its stated {raw} bytes: {reason}")]
    Corrupt { raw: usize, reason: String },
}

/// `data` compressed, when that pays (see the module note); `None` keeps it plain.
pub fn compress_if_pays(data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < MIN_COMPRESS_BYTES {
        return None;
    }
    let packed = zstd::bulk::compress(data, LEVEL).ok()?;
    (packed.len() <= data.len() - data.len() / 8).then_some(packed)
}

/// Decompresses a block that says it holds `raw` bytes, refusing more than `limit`.
///
/// The output buffer is allocated at `raw` (already checked against `limit`) and zstd
/// fails rather than write past it, so a small frame claiming or producing a huge output
/// costs nothing.
pub fn decompress_capped(
    packed: &[u8],
    raw: usize,
    limit: usize,
) -> Result<Vec<u8>, CompressError> {
    if raw > limit {
        return Err(CompressError::TooLarge { raw, limit });
    }
    let data = zstd::bulk::decompress(packed, raw).map_err(|e| CompressError::Corrupt {
        raw,
        reason: e.to_string(),
    })?;
    if data.len() != raw {
        return Err(CompressError::Corrupt {
            raw,
            reason: format!("it holds {} bytes", data.len()),
        });
    }
    Ok(data)
}

/// A stored chunk: encoded for the database when that pays.
pub struct StoredChunk<'d> {
    pub encoding: Encoding,
    pub bytes: std::borrow::Cow<'d, [u8]>,
}

/// `data` as it is stored: compressed when that pays, else as it is.
pub fn encode_chunk(data: &[u8], enabled: bool) -> StoredChunk<'_> {
    match enabled.then(|| compress_if_pays(data)).flatten() {
        Some(packed) => StoredChunk {
            encoding: Encoding::Zstd,
            bytes: packed.into(),
        },
        None => StoredChunk {
            encoding: Encoding::Plain,
            bytes: data.into(),
        },
    }
}

/// The bytes of a stored chunk as the command wrote them. `raw` is its uncompressed
/// length (`output_chunks.raw_len`), `limit` what a chunk can hold at most.
pub fn decode_chunk(
    encoding: Encoding,
    bytes: Vec<u8>,
    raw: usize,
    limit: usize,
) -> Result<Vec<u8>, CompressError> {
    match encoding {
        Encoding::Plain => Ok(bytes),
        Encoding::Zstd => decompress_capped(&bytes, raw, limit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_lines(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| {
                format!(
                    "2026-11-27T10:00:{:02}Z INFO worker served /srv/x {i}\n",
                    i % 60
                )
                .into_bytes()
            })
            .collect()
    }

    #[test]
    fn small_blocks_stay_plain() {
        assert_eq!(compress_if_pays(b"hello\n"), None);
        assert_eq!(compress_if_pays(&log_lines(10)[..100]), None);
    }

    #[test]
    fn incompressible_blocks_stay_plain() {
        let mut x: u64 = 0x2545F4914F6CDD1D;
        let noise: Vec<u8> = (0..65536)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert_eq!(compress_if_pays(&noise), None);
    }

    #[test]
    fn compressible_blocks_round_trip() {
        let data = log_lines(2000);
        let packed = compress_if_pays(&data).expect("log lines compress");
        assert!(
            packed.len() * 3 < data.len(),
            "{} of {}",
            packed.len(),
            data.len()
        );
        assert_eq!(decompress_capped(&packed, data.len(), data.len()), Ok(data));
    }

    #[test]
    fn a_decompression_bomb_is_refused() {
        // 64 MiB of zeros packs into a few KiB; the cap is 1 MiB.
        let bomb = zstd::bulk::compress(&vec![0u8; 64 << 20], 1).expect("compress");
        assert!(bomb.len() < 64 * 1024);
        assert_eq!(
            decompress_capped(&bomb, 64 << 20, 1 << 20),
            Err(CompressError::TooLarge {
                raw: 64 << 20,
                limit: 1 << 20
            })
        );
        // Lying about the size does not help: zstd stops at the stated length.
        assert!(matches!(
            decompress_capped(&bomb, 1 << 20, 1 << 20),
            Err(CompressError::Corrupt { .. })
        ));
        // Neither does a length that is too long.
        let packed = compress_if_pays(&log_lines(500)).expect("compresses");
        assert!(matches!(
            decompress_capped(&packed, 1 << 20, 1 << 20),
            Err(CompressError::Corrupt { .. })
        ));
        assert!(matches!(
            decompress_capped(b"not zstd at all", 10, 100),
            Err(CompressError::Corrupt { .. })
        ));
    }

    #[test]
    fn chunks_encode_only_when_enabled_and_worth_it() {
        let data = log_lines(1000);
        let stored = encode_chunk(&data, true);
        assert_eq!(stored.encoding, Encoding::Zstd);
        let back = decode_chunk(
            stored.encoding,
            stored.bytes.into_owned(),
            data.len(),
            data.len(),
        );
        assert_eq!(back, Ok(data.clone()));
        assert_eq!(encode_chunk(&data, false).encoding, Encoding::Plain);
        assert_eq!(encode_chunk(b"tiny", true).encoding, Encoding::Plain);
        assert_eq!(Encoding::from_db(0), Some(Encoding::Plain));
        assert_eq!(Encoding::from_db(1), Some(Encoding::Zstd));
        assert_eq!(Encoding::from_db(7), None);
    }
}
