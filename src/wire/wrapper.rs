//! Wrapper <-> hub protocol v1 (docs/protocols.md, Wrapper <-> hub), shared by `saltpeter-wrapper`
//! and the hub.
//!
//! Text frames carry one JSON object with a `type` field; binary frames carry output as
//! `[u8 stream][u64 seq, big endian][bytes]`, or, once `zstd` was negotiated (`hello.
//! compression` offered by the wrapper, `welcome.compression` chosen by the server),
//! `[u8 stream | 0x80][u64 seq][u32 uncompressed length, big endian][zstd frame]` for a
//! frame that compresses well. Both sides use these types, so the two ends cannot drift
//! apart; either end that does not know compression leaves it out and speaks plain.

use serde::{Deserialize, Serialize};

use super::compress::{CompressError, compress_if_pays, decompress_capped};

/// Protocol version spoken by this build (`hello.v`).
pub const PROTOCOL_VERSION: u32 = 1;
/// WebSocket path of the wrapper endpoint.
pub const WRAPPER_PATH: &str = "/wrapper/v1";
/// Size of the binary output frame header: stream byte + big-endian seq.
pub const OUTPUT_HEADER_LEN: usize = 9;
/// Set on the stream byte of a compressed output frame.
pub const COMPRESSED_FLAG: u8 = 0x80;
/// Header of a compressed output frame: the plain header plus the uncompressed length.
pub const COMPRESSED_HEADER_LEN: usize = OUTPUT_HEADER_LEN + 4;

/// Environment variables the wrapper is started with; nothing else travels through Salt.
pub const ENV_URL: &str = "SP_URL";
pub const ENV_RUN: &str = "SP_RUN";
pub const ENV_MACHINE: &str = "SP_MACHINE";
pub const ENV_TOKEN: &str = "SP_TOKEN";
/// A 0600 file holding the launch token (local executor): the wrapper reads it, deletes
/// it and keeps the token in memory only, so it is on no command line and in no
/// environment.
pub const ENV_TOKEN_FILE: &str = "SP_TOKEN_FILE";

/// Capability a wrapper advertises in `hello.capabilities` when it understands `suspend`
/// and `resume`. The server sends neither to a wrapper without it (older wrappers).
pub const CAP_SUSPEND: &str = "suspend";
/// Capability a wrapper advertises when it understands `output_held`: the server then
/// answers output it could not store with that message instead of closing the link
/// (which is all an older wrapper is told: it reconnects and resends).
pub const CAP_OUTPUT_HELD: &str = "output_held";

fn is_false(b: &bool) -> bool {
    !*b
}

fn yes() -> bool {
    true
}

/// Messages from the wrapper to the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WrapperMsg {
    Hello {
        v: u32,
        run: u64,
        machine: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume_key: Option<String>,
        /// Prove the machine with its Salt minion key: the server answers `challenge`,
        /// the wrapper signs it (`proof`). Neither token nor resume key is sent.
        #[serde(default, skip_serializing_if = "is_false")]
        minion_key: bool,
        wrapper_version: String,
        pid: u32,
        resume_from: Option<u64>,
        /// SHA-256 (hex) of the wrapper's own executable, so the server knows which build
        /// each minion has without asking Salt (absent from older wrappers).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wrapper_sha256: Option<String>,
        /// The path the wrapper was started as (absent from older wrappers).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wrapper_path: Option<String>,
        /// What this wrapper understands beyond protocol v1 (`CAP_SUSPEND`); absent from
        /// older wrappers, which the server then never asks for more.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        capabilities: Vec<String>,
        /// The command is stopped by a `suspend` (a reconnecting wrapper says so, so a
        /// restarted server knows the real state).
        #[serde(default, skip_serializing_if = "is_false")]
        suspended: bool,
        /// Output encodings this wrapper can send, best first (`["zstd"]`); absent from
        /// older wrappers, which are then welcomed without compression.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        compression: Vec<String>,
    },
    /// The `challenge` signed with the minion's Salt key (hex, RSA PKCS#1 v1.5 SHA-256 over
    /// `crate::minion_key::proof_message`).
    Proof { signature: String },
    Started {
        pid: u32,
        /// Wrapper clock at the spawn, unix milliseconds; the server records it inside
        /// the window its own clock allows (`roles::main::shell::wrappers::sessions::start_time`).
        at: i64,
        /// How the job's limits were applied, or why one was not (absent without limits
        /// and from older wrappers); kept in the target's record.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limits: Option<String>,
    },
    Heartbeat {
        at: i64,
        /// The command is stopped by a `suspend` (absent when not, and from older
        /// wrappers). Also sent at once after acting on `suspend` or `resume`.
        #[serde(default, skip_serializing_if = "is_false")]
        suspended: bool,
    },
    Exited {
        end_seq: u64,
        code: Option<i32>,
        signal: Option<i32>,
        reason: ExitReason,
        at: i64,
    },
}

/// Why the command ended, as the wrapper saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    Exit,
    Timeout,
    Killed,
    SpawnFailed,
    LockBusy,
    /// The server sent `cancel` to a pre-staged wrapper; nothing ran.
    Canceled,
    /// The kernel killed the command for exceeding the job's `memory_max`.
    MemoryLimit,
}

/// The job as the wrapper needs it, sent in `welcome` (never through Salt).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub name: String,
    pub command: String,
    pub user: Option<String>,
    pub cwd: Option<String>,
    pub env: std::collections::BTreeMap<String, String>,
    /// 0 means no limit.
    pub timeout_s: u64,
    pub kill_grace_s: u64,
    pub heartbeat_s: u64,
    /// Take the per-host `flock` overlap lock (`overlap: forbid`).
    pub overlap_lock: bool,
    /// Wait a random 0..splay_s seconds before starting the command.
    #[serde(default)]
    pub splay_s: u64,
    /// Whether the timeout keeps counting while the command is suspended (the job's
    /// `timeout_counts_suspended`); with false the deadline moves by the time suspended.
    /// Absent from older servers, which cannot suspend: true. (Always serialized: the
    /// spec also crosses the internal links in bincode, which has no optional fields.)
    #[serde(default = "yes")]
    pub timeout_counts_suspended: bool,
    /// The job's resource limits (empty from older servers).
    #[serde(default)]
    pub limits: Box<super::limits::Limits>,
    /// Seconds between heartbeats while waiting for `go` (a pre-staged welcome); 0, or
    /// absent from older servers: `heartbeat_s`. Staged wrappers only wait, and the
    /// server allows their silence accordingly: 10,000 of them staged for a minute
    /// heartbeating every 5 s were 120,000 messages per firing for nothing.
    #[serde(default)]
    pub staged_heartbeat_s: u64,
}

/// Messages from the server to the wrapper.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMsg {
    /// Answer to a `hello` with `minion_key`: sign this (hex, fresh per connection).
    Challenge {
        nonce: String,
    },
    Welcome {
        job: Box<JobSpec>,
        resume_key: String,
        acked_seq: u64,
        wait_for_go: bool,
        /// With `wait_for_go`: milliseconds from this welcome to the run's slot (0 once
        /// it has passed). Relative, so the two clocks need not agree; the wrapper gives
        /// up waiting for a lost server at the slot plus its grace. Absent from older
        /// servers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        slot_in_ms: Option<u64>,
        /// The output encoding the server takes on this link, one the hello offered
        /// (`"zstd"`); absent: plain frames only (and from older servers).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        compression: Option<super::compress::LinkEncoding>,
    },
    Go {},
    Cancel {
        reason: String,
    },
    Reject {
        code: RejectCode,
        message: String,
    },
    Ack {
        seq: u64,
    },
    /// The server could not store output from `from_seq` on (its database is full or
    /// failing): the wrapper keeps every frame from there (memory, then its spool),
    /// sends none for `retry_after_ms`, then one, and the rest once an `ack` shows the
    /// server stores again. Only to a wrapper that advertised `CAP_OUTPUT_HELD`. The
    /// link stays open; heartbeats go on.
    OutputHeld {
        from_seq: u64,
        retry_after_ms: u64,
    },
    Kill {
        reason: KillReason,
        grace_s: u64,
    },
    /// Stop the command's process group (SIGSTOP); only to a wrapper that advertised
    /// `CAP_SUSPEND`. Idempotent.
    Suspend {},
    /// Continue a suspended command (SIGCONT). Idempotent.
    Resume {},
    Done {},
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectCode {
    BadToken,
    UnknownRun,
    Finished,
    Version,
    BadMessage,
    RetryLater,
}

impl RejectCode {
    /// Only transient rejections are worth retrying.
    pub fn is_transient(self) -> bool {
        matches!(self, RejectCode::RetryLater)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KillReason {
    User,
    Timeout,
    Maintenance,
}

/// Output stream of a binary frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stream {
    Stdout = 1,
    Stderr = 2,
}

/// One output frame: which stream, its sequence number and the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputFrame {
    pub stream: Stream,
    pub seq: u64,
    pub data: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OutputFrameError {
    #[error("output frame of {0} bytes is shorter than its 9-byte header")]
    Short(usize),
    #[error("output frame names unknown stream {0} (expected 1 stdout or 2 stderr)")]
    BadStream(u8),
    #[error("output frame has sequence number 0 (sequences start at 1)")]
    ZeroSeq,
    #[error("compressed output frame, but compression was not negotiated on this link")]
    NotNegotiated,
    #[error("compressed output frame of {0} bytes is shorter than its 13-byte header")]
    ShortCompressed(usize),
    #[error(transparent)]
    Compression(#[from] CompressError),
}

impl OutputFrame {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(OUTPUT_HEADER_LEN + self.data.len());
        out.push(self.stream as u8);
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.data);
        out
    }

    /// The frame as sent on a link: compressed when `compress` (negotiated) and it pays.
    pub fn encode_for_link(&self, compress: bool) -> Vec<u8> {
        let packed = compress
            .then(|| compress_if_pays(&self.data))
            .flatten()
            .and_then(|packed| Some((u32::try_from(self.data.len()).ok()?, packed)));
        let Some((raw, packed)) = packed else {
            return self.encode();
        };
        let mut out = Vec::with_capacity(COMPRESSED_HEADER_LEN + packed.len());
        out.push(self.stream as u8 | COMPRESSED_FLAG);
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&raw.to_be_bytes());
        out.extend_from_slice(&packed);
        out
    }

    /// How many bytes of output a frame from a link holds, read from its header without
    /// decompressing anything: a compressed frame's declared length, a plain frame's data.
    /// A reader charges its budget this much *before* decoding, so memory is counted by
    /// what a frame becomes, not by what it costs on the wire (a few dozen bytes of zstd
    /// declare a MiB). A frame too short to say counts as its own length (its decoding
    /// fails); one whose data does not match its declaration fails to decode
    /// ([`CompressError::Corrupt`]), so the charge is never less than what it brings.
    pub fn declared_len(bytes: &[u8]) -> usize {
        match bytes.first() {
            Some(first) if first & COMPRESSED_FLAG != 0 && bytes.len() >= COMPRESSED_HEADER_LEN => {
                let mut raw = [0u8; 4];
                raw.copy_from_slice(&bytes[OUTPUT_HEADER_LEN..COMPRESSED_HEADER_LEN]);
                usize::try_from(u32::from_be_bytes(raw)).unwrap_or(usize::MAX)
            }
            Some(first) if first & COMPRESSED_FLAG != 0 => bytes.len(),
            _ => bytes.len().saturating_sub(OUTPUT_HEADER_LEN),
        }
    }

    /// Decodes a frame from a link: plain, or compressed when `compressed_ok` (the link
    /// negotiated it), decompressed to at most `limit` bytes; the result holds exactly
    /// [`OutputFrame::declared_len`] bytes.
    pub fn decode_link(
        bytes: &[u8],
        compressed_ok: bool,
        limit: usize,
    ) -> Result<OutputFrame, OutputFrameError> {
        let Some(&first) = bytes.first() else {
            return Err(OutputFrameError::Short(0));
        };
        if first & COMPRESSED_FLAG == 0 {
            return OutputFrame::decode(bytes);
        }
        if !compressed_ok {
            return Err(OutputFrameError::NotNegotiated);
        }
        if bytes.len() < COMPRESSED_HEADER_LEN {
            return Err(OutputFrameError::ShortCompressed(bytes.len()));
        }
        let mut header = OutputFrame::decode_header(first & !COMPRESSED_FLAG, &bytes[1..])?;
        let mut raw = [0u8; 4];
        raw.copy_from_slice(&bytes[OUTPUT_HEADER_LEN..COMPRESSED_HEADER_LEN]);
        let raw = usize::try_from(u32::from_be_bytes(raw)).unwrap_or(usize::MAX);
        header.data = decompress_capped(&bytes[COMPRESSED_HEADER_LEN..], raw, limit)?;
        Ok(header)
    }

    pub fn decode(bytes: &[u8]) -> Result<OutputFrame, OutputFrameError> {
        if bytes.len() < OUTPUT_HEADER_LEN {
            return Err(OutputFrameError::Short(bytes.len()));
        }
        let mut frame = OutputFrame::decode_header(bytes[0], &bytes[1..])?;
        frame.data = bytes[OUTPUT_HEADER_LEN..].to_vec();
        Ok(frame)
    }

    /// Stream byte and seq (`rest` starts with the 8 seq bytes), with no data yet.
    fn decode_header(stream: u8, rest: &[u8]) -> Result<OutputFrame, OutputFrameError> {
        let stream = match stream {
            1 => Stream::Stdout,
            2 => Stream::Stderr,
            other => return Err(OutputFrameError::BadStream(other)),
        };
        let mut seq_bytes = [0u8; 8];
        seq_bytes.copy_from_slice(&rest[..8]);
        let seq = u64::from_be_bytes(seq_bytes);
        if seq == 0 {
            return Err(OutputFrameError::ZeroSeq);
        }
        Ok(OutputFrame {
            stream,
            seq,
            data: Vec::new(),
        })
    }
}

#[cfg(test)]
#[path = "wrapper_tests.rs"]
mod compression_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_frame_round_trips() {
        let f = OutputFrame {
            stream: Stream::Stderr,
            seq: 7,
            data: b"hi".to_vec(),
        };
        assert_eq!(OutputFrame::decode(&f.encode()), Ok(f));
    }

    #[test]
    fn output_frame_rejects_garbage() {
        assert_eq!(
            OutputFrame::decode(&[1, 2]),
            Err(OutputFrameError::Short(2))
        );
        assert_eq!(
            OutputFrame::decode(&[9, 0, 0, 0, 0, 0, 0, 0, 1]),
            Err(OutputFrameError::BadStream(9))
        );
        assert_eq!(
            OutputFrame::decode(&[1, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(OutputFrameError::ZeroSeq)
        );
    }

    #[test]
    fn control_messages_use_type_tag() {
        let m: WrapperMsg = serde_json::from_str(r#"{"type":"heartbeat","at":5}"#).unwrap();
        assert_eq!(
            m,
            WrapperMsg::Heartbeat {
                at: 5,
                suspended: false
            }
        );
        // Older peers never see the new fields unless they are set.
        let hb = WrapperMsg::Heartbeat {
            at: 5,
            suspended: false,
        };
        assert_eq!(
            serde_json::to_string(&hb).unwrap(),
            r#"{"type":"heartbeat","at":5}"#
        );
        let s = serde_json::to_string(&ServerMsg::Suspend {}).unwrap();
        assert_eq!(s, r#"{"type":"suspend"}"#);
        let s = serde_json::to_string(&ServerMsg::Go {}).unwrap();
        assert_eq!(s, r#"{"type":"go"}"#);
        // A welcome from a server older than `slot_in_ms` still decodes.
        let old = r#"{"type":"welcome","job":{"name":"j","command":"true","user":null,
            "cwd":null,"env":{},"timeout_s":0,"kill_grace_s":1,"heartbeat_s":1,
            "overlap_lock":false},"resume_key":"k","acked_seq":0,"wait_for_go":true}"#;
        match serde_json::from_str::<ServerMsg>(old).unwrap() {
            ServerMsg::Welcome {
                slot_in_ms, job, ..
            } => {
                assert_eq!(slot_in_ms, None);
                assert!(job.timeout_counts_suspended, "the default keeps counting");
            }
            other => panic!("decoded as {other:?}"),
        }
        assert!(serde_json::from_str::<WrapperMsg>(r#"{"type":"nope"}"#).is_err());
    }
}
