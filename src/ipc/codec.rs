//! Typed payloads to and from bytes. The only module that names bincode.
//!
//! Options: varint integers, little-endian, trailing bytes rejected, and a size limit so
//! a forged length inside a payload (a string "of 2^60 bytes") fails without allocating.

use bincode::Options;
use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
pub(crate) enum CodecError {
    #[error("could not encode message: {0}")]
    Encode(bincode::Error),
    #[error("could not decode message: {0}")]
    Decode(bincode::Error),
}

fn options(limit: usize) -> impl Options {
    bincode::DefaultOptions::new()
        .with_limit(limit as u64)
        .reject_trailing_bytes()
}

pub(crate) fn encode<T: Serialize>(msg: &T, limit: usize) -> Result<Vec<u8>, CodecError> {
    options(limit).serialize(msg).map_err(CodecError::Encode)
}

/// `msg` encoded after `reserve` zero bytes (room for a frame header), in one buffer
/// sized up front: output payloads are not copied once more to be framed.
pub(crate) fn encode_after<T: Serialize>(
    msg: &T,
    limit: usize,
    reserve: usize,
) -> Result<Vec<u8>, CodecError> {
    let size = options(limit)
        .serialized_size(msg)
        .map_err(CodecError::Encode)?;
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    let mut out = Vec::with_capacity(reserve.saturating_add(size));
    out.resize(reserve, 0);
    options(limit)
        .serialize_into(&mut out, msg)
        .map_err(CodecError::Encode)?;
    Ok(out)
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8], limit: usize) -> Result<T, CodecError> {
    options(limit)
        .deserialize(bytes)
        .map_err(CodecError::Decode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_forged_length() {
        let bytes = encode(&("job".to_string(), 7u64), 1024).unwrap();
        let back: (String, u64) = decode(&bytes, 1024).unwrap();
        assert_eq!(back, ("job".to_string(), 7));
        // A string claiming 2^60 bytes: rejected by the limit, not by running out of memory.
        let mut forged = vec![0xff];
        forged.extend_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(decode::<String>(&forged, 1024).is_err());
        assert!(
            decode::<u8>(&[1, 2], 1024).is_err(),
            "trailing bytes rejected"
        );
        let after = encode_after(&("job".to_string(), 7u64), 1024, 4).unwrap();
        assert_eq!(after[..4], [0; 4]);
        assert_eq!(after[4..], bytes[..]);
        assert!(
            encode_after(&vec![0u8; 2048], 1024, 4).is_err(),
            "limit kept"
        );
    }
}
