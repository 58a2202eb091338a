//! Byte payloads (output) as one block on the internal links: `#[serde(with =
//! "crate::wire::bytes")]` on a `Vec<u8>` field.
//!
//! serde writes a plain `Vec<u8>` as a sequence of single bytes, one call each, and reads it
//! back the same way; profiling one job's output flowing wrapper → hub → main → db showed
//! that per-byte encoding and decoding as the largest cost of the hub and of main. bincode
//! writes `serialize_bytes` as the same length prefix followed by the same bytes, so the
//! encoding does not change, only its speed: one copy instead of a call per byte. Formats
//! that write bytes as a list of numbers (JSON) still read back through `visit_seq`.

use std::fmt;

use serde::de::{SeqAccess, Visitor};
use serde::{Deserializer, Serializer};

pub(crate) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_bytes(bytes)
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
    deserializer.deserialize_byte_buf(ByteBuf)
}

struct ByteBuf;

impl<'de> Visitor<'de> for ByteBuf {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("bytes")
    }

    fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
        Ok(v.to_vec())
    }

    fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        // The size hint comes from the input: cap what is reserved from it.
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64 * 1024));
        while let Some(b) = seq.next_element()? {
            out.push(b);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Fast {
        #[serde(with = "super")]
        data: Vec<u8>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Plain {
        data: Vec<u8>,
    }

    #[test]
    fn bincode_encoding_is_the_same_as_a_plain_vec() {
        let data: Vec<u8> = (0..=255).collect();
        let fast = bincode::serialize(&Fast { data: data.clone() }).expect("encode");
        let plain = bincode::serialize(&Plain { data: data.clone() }).expect("encode");
        assert_eq!(fast, plain);
        let back: Fast = bincode::deserialize(&plain).expect("decode");
        assert_eq!(back.data, data);
        let old: Plain = bincode::deserialize(&fast).expect("decode");
        assert_eq!(old.data, data);
    }

    #[test]
    fn json_round_trips_as_a_list_of_numbers() {
        let text = serde_json::to_string(&Fast {
            data: vec![1, 2, 255],
        })
        .expect("json");
        assert_eq!(text, r#"{"data":[1,2,255]}"#);
        let back: Fast = serde_json::from_str(&text).expect("json");
        assert_eq!(back.data, vec![1, 2, 255]);
    }

    #[test]
    fn a_truncated_payload_is_an_error_not_a_panic() {
        let mut enc = bincode::serialize(&Fast { data: vec![7; 100] }).expect("encode");
        enc.truncate(50);
        assert!(bincode::deserialize::<Fast>(&enc).is_err());
        // A length prefix far beyond the input.
        let huge = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 2];
        assert!(bincode::deserialize::<Fast>(&huge).is_err());
    }
}
