//! Framing: `u32` little-endian length, then the payload.
//!
//! `FrameReader` accepts bytes in arbitrary pieces (a frame split across reads, many frames
//! in one read) and hands out whole payloads; a length over the limit is an error before
//! any buffer for it is allocated. `WriteQueue` holds encoded frames until the socket takes
//! them, so a full socket buffer never blocks the loop.

/// Largest frame accepted on any internal link (16 MiB): output chunks are at most a few
/// hundred KiB, so anything larger is a bug or an attack.
pub(crate) const MAX_FRAME: usize = 16 * 1024 * 1024;

use std::collections::VecDeque;
use std::io::{self, Read, Write};

const LEN_BYTES: usize = 4;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum FrameError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
}

#[cfg(test)]
/// Prefix `payload` with its length.
pub(crate) fn encode_frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(LEN_BYTES + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Turn a buffer that starts with [`HEADER_ROOM`] reserved bytes into a frame, writing
/// the length of what follows them in place.
pub(crate) fn seal_frame(mut buf: Vec<u8>) -> Vec<u8> {
    debug_assert!(buf.len() >= LEN_BYTES, "the header room is reserved");
    let len = buf.len().saturating_sub(LEN_BYTES) as u32;
    if let Some(header) = buf.get_mut(..LEN_BYTES) {
        header.copy_from_slice(&len.to_le_bytes());
    }
    buf
}

/// Bytes to reserve in front of a payload for [`seal_frame`].
pub(crate) const HEADER_ROOM: usize = LEN_BYTES;

/// Reassembles frames from a byte stream.
///
/// Taken frames are not removed from the front of the buffer one by one (that moves the
/// rest of the buffer per frame: quadratic with many small frames in one read); a read
/// offset advances instead, and the consumed prefix is dropped when it is at least half
/// the buffer, so each byte is moved a bounded number of times (amortised O(1) per frame).
#[derive(Debug)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
    /// Start of the bytes not yet handed out.
    start: usize,
    max: usize,
    /// Bytes moved by compaction (tests check it stays linear in the bytes pushed).
    #[cfg(test)]
    moved: usize,
}

impl FrameReader {
    pub(crate) fn new(max: usize) -> FrameReader {
        FrameReader {
            buf: Vec::new(),
            start: 0,
            max,
            #[cfg(test)]
            moved: 0,
        }
    }

    /// Append bytes that arrived from the peer.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.compact();
        self.buf.extend_from_slice(bytes);
    }

    /// Drop the consumed prefix once it is at least half the buffer.
    fn compact(&mut self) {
        if self.start == 0 {
            return;
        }
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start * 2 >= self.buf.len() {
            #[cfg(test)]
            {
                self.moved += self.buf.len() - self.start;
            }
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    #[cfg(test)]
    /// The next complete payload, `Ok(None)` while one is incomplete.
    pub(crate) fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        self.next_frame_with(<[u8]>::to_vec)
    }

    /// The next complete payload, read in place by `read` (no copy of it is made).
    pub(crate) fn next_frame_with<T>(
        &mut self,
        read: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, FrameError> {
        let pending = &self.buf[self.start..];
        if pending.len() < LEN_BYTES {
            return Ok(None);
        }
        let mut len_bytes = [0u8; LEN_BYTES];
        len_bytes.copy_from_slice(&pending[..LEN_BYTES]);
        let len = u32::from_le_bytes(len_bytes) as usize;
        if len > self.max {
            return Err(FrameError::TooLarge { len, max: self.max });
        }
        if pending.len() < LEN_BYTES + len {
            return Ok(None);
        }
        let payload = read(&pending[LEN_BYTES..LEN_BYTES + len]);
        self.start += LEN_BYTES + len;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(Some(payload))
    }

    /// Read from `src` until it would block. Returns `Ok(false)` when the peer closed.
    pub(crate) fn fill_from(&mut self, src: &mut impl Read) -> io::Result<bool> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match src.read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(n) => self.push(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Bytes waiting to be written, flushed as far as the socket allows.
#[derive(Debug, Default)]
pub(crate) struct WriteQueue {
    chunks: VecDeque<Vec<u8>>,
    /// Bytes of the front chunk already written.
    offset: usize,
    queued: usize,
}

impl WriteQueue {
    pub(crate) fn push(&mut self, bytes: Vec<u8>) {
        self.queued += bytes.len();
        self.chunks.push_back(bytes);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Bytes not yet written.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.queued - self.offset
    }

    /// Write until empty or the sink would block; partial writes keep their place.
    pub(crate) fn flush_to(&mut self, sink: &mut impl Write) -> io::Result<()> {
        while let Some(front) = self.chunks.front() {
            match sink.write(&front[self.offset..]) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => {
                    self.offset += n;
                    if self.offset == front.len() {
                        self.queued -= front.len();
                        self.offset = 0;
                        self.chunks.pop_front();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that takes at most `step` bytes per write and then blocks once.
    struct Trickle {
        out: Vec<u8>,
        step: usize,
        block_next: bool,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.block_next {
                self.block_next = false;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.block_next = true;
            let n = buf.len().min(self.step);
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn frame_split_across_reads() {
        let bytes = [encode_frame(b"hello"), encode_frame(b"world!")].concat();
        let mut reader = FrameReader::new(100);
        let mut got = Vec::new();
        for b in &bytes {
            reader.push(std::slice::from_ref(b));
            while let Some(f) = reader.next_frame().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, vec![b"hello".to_vec(), b"world!".to_vec()]);
    }

    #[test]
    fn many_frames_in_one_read() {
        let bytes = [encode_frame(b"a"), encode_frame(b""), encode_frame(b"bc")].concat();
        let mut reader = FrameReader::new(100);
        reader.push(&bytes);
        assert_eq!(reader.next_frame().unwrap(), Some(b"a".to_vec()));
        assert_eq!(reader.next_frame().unwrap(), Some(Vec::new()));
        assert_eq!(reader.next_frame().unwrap(), Some(b"bc".to_vec()));
        assert_eq!(reader.next_frame().unwrap(), None);
    }

    #[test]
    fn many_small_frames_cost_linear_work() {
        // 200,000 one-byte frames in one read, then more arriving while some are taken:
        // the bytes moved to compact the buffer stay within a small multiple of the bytes
        // pushed (draining from the front per frame moved ~2 GB here).
        let frames = 200_000;
        let one = encode_frame(b"x");
        let bytes: Vec<u8> = (0..frames).flat_map(|_| one.iter().copied()).collect();
        let mut reader = FrameReader::new(100);
        reader.push(&bytes);
        let mut got = 0;
        for _ in 0..frames / 2 {
            assert_eq!(reader.next_frame().unwrap(), Some(b"x".to_vec()));
            got += 1;
        }
        for _ in 0..10 {
            reader.push(&one);
            while reader.next_frame().unwrap().is_some() {
                got += 1;
            }
        }
        assert_eq!(got, frames + 10);
        assert!(
            reader.moved <= 2 * bytes.len(),
            "moved {} bytes for {} pushed",
            reader.moved,
            bytes.len()
        );
        // A frame split across a compaction still comes out whole.
        reader.push(&bytes[..7]);
        assert_eq!(reader.next_frame().unwrap(), Some(b"x".to_vec()));
        reader.push(&bytes[7..10]);
        assert_eq!(reader.next_frame().unwrap(), Some(b"x".to_vec()));
        assert_eq!(reader.next_frame().unwrap(), None);
    }

    #[test]
    fn oversize_rejected_from_header_alone() {
        let mut reader = FrameReader::new(10);
        // Only the header of a 4 GiB frame: must fail now, not wait or allocate.
        reader.push(&u32::MAX.to_le_bytes());
        assert_eq!(
            reader.next_frame(),
            Err(FrameError::TooLarge {
                len: u32::MAX as usize,
                max: 10
            })
        );
    }

    #[test]
    fn partial_writes_resume_in_place() {
        let mut q = WriteQueue::default();
        q.push(encode_frame(b"0123456789"));
        q.push(encode_frame(b"abc"));
        let mut sink = Trickle {
            out: Vec::new(),
            step: 3,
            block_next: false,
        };
        let mut rounds = 0;
        while !q.is_empty() {
            q.flush_to(&mut sink).unwrap();
            rounds += 1;
            assert!(rounds < 100, "flush makes progress");
        }
        let mut reader = FrameReader::new(100);
        reader.push(&sink.out);
        assert_eq!(reader.next_frame().unwrap(), Some(b"0123456789".to_vec()));
        assert_eq!(reader.next_frame().unwrap(), Some(b"abc".to_vec()));
        assert_eq!(q.queued_bytes(), 0);
    }
}
