//! Compressed output frames and the negotiation's compatibility with older peers.

use serde::Deserialize;

use super::*;
use crate::wire::compress::{LinkEncoding, ZSTD};

fn log_output(n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            format!(
                "2026-11-27T10:{:02}:00Z WARN /var/lib/x retry {i}\n",
                i % 60
            )
            .into_bytes()
        })
        .collect()
}

fn frame(data: Vec<u8>) -> OutputFrame {
    OutputFrame {
        stream: Stream::Stderr,
        seq: 42,
        data,
    }
}

#[test]
fn a_large_frame_is_compressed_and_decodes_to_the_same_bytes() {
    let f = frame(log_output(3000));
    let wire = f.encode_for_link(true);
    assert_eq!(wire[0], 2 | COMPRESSED_FLAG);
    assert!(
        wire.len() * 4 < f.data.len(),
        "{} of {}",
        wire.len(),
        f.data.len()
    );
    assert_eq!(OutputFrame::decode_link(&wire, true, 1 << 20), Ok(f));
}

#[test]
fn small_or_unnegotiated_frames_stay_plain() {
    let small = frame(b"one interactive line\n".to_vec());
    assert_eq!(small.encode_for_link(true), small.encode());
    let big = frame(log_output(3000));
    assert_eq!(big.encode_for_link(false), big.encode());
    // A plain frame decodes whether or not compression was negotiated.
    assert_eq!(
        OutputFrame::decode_link(&big.encode(), true, 1 << 20),
        Ok(big.clone())
    );
    assert_eq!(
        OutputFrame::decode_link(&big.encode(), false, 1 << 20),
        Ok(big)
    );
}

#[test]
fn a_compressed_frame_needs_negotiation_and_a_whole_header() {
    let wire = frame(log_output(3000)).encode_for_link(true);
    assert_eq!(
        OutputFrame::decode_link(&wire, false, 1 << 20),
        Err(OutputFrameError::NotNegotiated)
    );
    assert_eq!(
        OutputFrame::decode_link(&wire[..12], true, 1 << 20),
        Err(OutputFrameError::ShortCompressed(12))
    );
    assert_eq!(
        OutputFrame::decode_link(&[], true, 1),
        Err(OutputFrameError::Short(0))
    );
    let mut bad_stream = wire.clone();
    bad_stream[0] = 5 | COMPRESSED_FLAG;
    assert_eq!(
        OutputFrame::decode_link(&bad_stream, true, 1 << 20),
        Err(OutputFrameError::BadStream(5))
    );
}

#[test]
fn a_decompression_bomb_frame_is_refused() {
    // 256 MiB of one byte packs into a few KiB; the frame limit is 1 MiB.
    let raw: u32 = 256 << 20;
    let packed = zstd::bulk::compress(&vec![b'a'; raw as usize], 1).expect("compress");
    let mut wire = vec![1 | COMPRESSED_FLAG];
    wire.extend_from_slice(&7u64.to_be_bytes());
    wire.extend_from_slice(&raw.to_be_bytes());
    wire.extend_from_slice(&packed);
    let err = OutputFrame::decode_link(&wire, true, 1 << 20).expect_err("refused");
    assert_eq!(
        err.to_string(),
        "compressed output claims 268435456 bytes, more than the limit of 1048576"
    );
    // Understating the length is refused too, without writing past it.
    wire[9..13].copy_from_slice(&1024u32.to_be_bytes());
    assert!(matches!(
        OutputFrame::decode_link(&wire, true, 1 << 20),
        Err(OutputFrameError::Compression(CompressError::Corrupt { .. }))
    ));
}

#[test]
fn a_frame_declares_what_it_decodes_to_before_it_is_decoded() {
    // A MiB of zeros is a few dozen bytes on the wire and declares its MiB.
    let bomb = frame(vec![0; 1 << 20]).encode_for_link(true);
    assert!(bomb.len() < 100, "{} bytes", bomb.len());
    assert_eq!(OutputFrame::declared_len(&bomb), 1 << 20);
    let decoded = OutputFrame::decode_link(&bomb, true, 1 << 20).expect("decodes");
    assert_eq!(decoded.data.len(), OutputFrame::declared_len(&bomb));
    // A plain frame declares its data; short frames their own length.
    let plain = frame(b"line\n".to_vec()).encode();
    assert_eq!(OutputFrame::declared_len(&plain), 5);
    assert_eq!(OutputFrame::declared_len(&[1, 0, 0]), 0);
    assert_eq!(OutputFrame::declared_len(&[]), 0);
    assert_eq!(OutputFrame::declared_len(&bomb[..12]), 12);
    // The largest declaration is counted as it is (and refused when decoded).
    let mut huge = bomb.clone();
    huge[9..13].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(OutputFrame::declared_len(&huge), u32::MAX as usize);
    assert!(OutputFrame::decode_link(&huge, true, 1 << 20).is_err());
}

/// `hello` and `welcome` as a peer built before compression decodes them.
#[allow(dead_code)] // Its fields are what an old peer requires: decoding them is the test.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OldPeerView {
    Hello {
        v: u32,
        run: u64,
        machine: String,
        wrapper_version: String,
        pid: u32,
        resume_from: Option<u64>,
    },
    Welcome {
        resume_key: String,
        acked_seq: u64,
        wait_for_go: bool,
    },
}

#[test]
fn an_older_server_takes_a_hello_offering_compression() {
    let hello = WrapperMsg::Hello {
        v: PROTOCOL_VERSION,
        run: 3,
        machine: "m1".into(),
        token: None,
        resume_key: None,
        minion_key: false,
        wrapper_version: "x".into(),
        pid: 9,
        resume_from: None,
        wrapper_sha256: None,
        wrapper_path: None,
        capabilities: Vec::new(),
        suspended: false,
        compression: vec![ZSTD.into()],
    };
    let json = serde_json::to_string(&hello).expect("encode");
    assert!(json.contains(r#""compression":["zstd"]"#), "{json}");
    match serde_json::from_str::<OldPeerView>(&json).expect("an old server decodes it") {
        OldPeerView::Hello { run, machine, .. } => assert_eq!((run, machine.as_str()), (3, "m1")),
        other => panic!("decoded as {other:?}"),
    }
}

#[test]
fn an_older_wrapper_takes_a_welcome_and_a_newer_one_an_old_welcome() {
    let job = r#""job":{"name":"j","command":"true","user":null,"cwd":null,"env":{},
        "timeout_s":0,"kill_grace_s":1,"heartbeat_s":1,"overlap_lock":false}"#;
    // A server offering nothing (old, or compression off) omits the field.
    let welcome = |compression: Option<LinkEncoding>| ServerMsg::Welcome {
        job: serde_json::from_str::<serde_json::Value>(&format!("{{{job}}}"))
            .ok()
            .and_then(|v| serde_json::from_value(v["job"].clone()).ok())
            .expect("job"),
        resume_key: "k".into(),
        acked_seq: 0,
        wait_for_go: false,
        slot_in_ms: None,
        compression,
    };
    let plain = serde_json::to_string(&welcome(None)).expect("encode");
    assert!(!plain.contains("compression"), "{plain}");
    let zstd = serde_json::to_string(&welcome(Some(LinkEncoding::Zstd))).expect("encode");
    assert!(matches!(
        serde_json::from_str::<OldPeerView>(&zstd),
        Ok(OldPeerView::Welcome { acked_seq: 0, .. })
    ));
    // An old server's welcome: no compression field, plain frames.
    let old =
        format!(r#"{{"type":"welcome",{job},"resume_key":"k","acked_seq":0,"wait_for_go":false}}"#);
    match serde_json::from_str::<ServerMsg>(&old).expect("decodes") {
        ServerMsg::Welcome { compression, .. } => assert_eq!(compression, None),
        other => panic!("decoded as {other:?}"),
    }
    // An old wrapper's hello: no compression offered.
    let hello = r#"{"type":"hello","v":1,"run":1,"machine":"m","wrapper_version":"0.1",
        "pid":1,"resume_from":null}"#;
    match serde_json::from_str::<WrapperMsg>(hello).expect("decodes") {
        WrapperMsg::Hello { compression, .. } => assert!(compression.is_empty()),
        other => panic!("decoded as {other:?}"),
    }
}

#[test]
fn output_held_has_its_documented_shape() {
    let msg = ServerMsg::OutputHeld {
        from_seq: 4,
        retry_after_ms: 500,
    };
    let text = serde_json::to_string(&msg).unwrap();
    assert_eq!(
        text,
        r#"{"type":"output_held","from_seq":4,"retry_after_ms":500}"#
    );
    assert_eq!(serde_json::from_str::<ServerMsg>(&text).unwrap(), msg);
    assert_eq!(CAP_OUTPUT_HELD, "output_held");
}
