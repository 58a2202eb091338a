//! Output frames between the command's pipes and the hub: sequence numbers, coalescing,
//! the unacknowledged backlog and its cap.
//!
//! 1. Pipe reads are appended to one open frame while they come from the same stream;
//!    the frame closes when it reaches `frame_max`, when the other stream speaks, or when
//!    it has been open for `coalesce` (the loop asks [`OutputBuffer::flush_deadline`]).
//! 2. A closed frame takes the next `seq` (from 1, shared by stdout and stderr) and is
//!    kept until the hub acknowledges it: in memory up to `mem_cap` bytes, then in the
//!    spool file (see `spool`), up to `spool_cap` bytes.
//! 3. Beyond both caps new output is dropped (the pipes are still read, so the command
//!    never blocks) and the number of lost bytes is counted; a stderr note saying how much
//!    was lost takes the next `seq` as soon as there is room again, or at the end.
//! 4. `ack` is cumulative; `rewind` restarts sending after a reconnect from what the hub
//!    says it holds, so a resend never skips or repeats a sequence number.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::wire::wrapper::{OutputFrame, Stream};

use super::spool::Spool;

/// Sizes that bound the buffer.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub frame_max: usize,
    pub mem_cap: usize,
    pub spool_cap: u64,
    pub coalesce: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            frame_max: 64 * 1024,
            mem_cap: 16 * 1024 * 1024,
            spool_cap: 1024 * 1024 * 1024,
            coalesce: Duration::from_millis(50),
        }
    }
}

/// Where the spool file may be created, if at all (created lazily on first overflow).
pub(super) type SpoolFactory = Box<dyn FnMut() -> Option<Spool>>;

pub(super) struct OutputBuffer {
    limits: Limits,
    /// The frame being filled: stream, bytes, when it was opened.
    open: Option<(Stream, Vec<u8>, Instant)>,
    /// Unacknowledged frames with contiguous seqs `acked + 1 ..`; the spool continues them.
    mem: VecDeque<OutputFrame>,
    mem_bytes: usize,
    spool: Option<Spool>,
    spool_factory: Option<SpoolFactory>,
    next_seq: u64,
    acked: u64,
    sent: u64,
    lost_pending: u64,
    lost_total: u64,
}

impl OutputBuffer {
    pub(super) fn new(limits: Limits, spool_factory: Option<SpoolFactory>) -> OutputBuffer {
        OutputBuffer {
            limits,
            open: None,
            mem: VecDeque::new(),
            mem_bytes: 0,
            spool: None,
            spool_factory,
            next_seq: 1,
            acked: 0,
            sent: 0,
            lost_pending: 0,
            lost_total: 0,
        }
    }

    /// Appends bytes read from `stream`.
    pub(super) fn push(&mut self, stream: Stream, mut bytes: &[u8], now: Instant) {
        while !bytes.is_empty() {
            if matches!(&self.open, Some((s, _, _)) if *s != stream) {
                self.close_open();
            }
            let (_, data, _) = self.open.get_or_insert_with(|| (stream, Vec::new(), now));
            let room = self.limits.frame_max.saturating_sub(data.len()).max(1);
            let take = room.min(bytes.len());
            data.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if data.len() >= self.limits.frame_max {
                self.close_open();
            }
        }
    }

    /// When the open frame must be closed so output reaches the hub promptly.
    pub(super) fn flush_deadline(&self) -> Option<Instant> {
        self.open
            .as_ref()
            .map(|(_, _, at)| *at + self.limits.coalesce)
    }

    /// Closes the open frame if its coalescing time is over (or `force`).
    pub(super) fn flush_due(&mut self, now: Instant, force: bool) {
        if force || self.flush_deadline().is_some_and(|d| d <= now) {
            self.close_open();
        }
    }

    /// Closes everything: the open frame and a pending loss note. Called at the end.
    pub(super) fn finish(&mut self) {
        self.close_open();
        if self.lost_pending > 0 {
            self.emit_loss_note_unbounded();
        }
    }

    fn close_open(&mut self) {
        if let Some((stream, data, _)) = self.open.take() {
            self.commit(stream, data);
        }
    }

    fn commit(&mut self, stream: Stream, data: Vec<u8>) {
        if self.lost_pending > 0 {
            if !self.has_room(LOSS_NOTE_MAX) {
                self.lose(data.len());
                return;
            }
            self.emit_loss_note_unbounded();
        }
        if self.has_room(data.len()) {
            self.store(stream, data);
        } else {
            self.lose(data.len());
        }
    }

    fn lose(&mut self, len: usize) {
        self.lost_pending += len as u64;
        self.lost_total += len as u64;
    }

    fn emit_loss_note_unbounded(&mut self) {
        let note = format!(
            "\n[saltpeter-wrapper: {} bytes of output were lost: local buffer full while the hub \
             was unreachable]\n",
            self.lost_pending
        );
        self.lost_pending = 0;
        self.store(Stream::Stderr, note.into_bytes());
    }

    fn has_room(&mut self, len: usize) -> bool {
        let spool_empty = self.spool.as_ref().is_none_or(Spool::is_empty);
        if spool_empty && self.mem_bytes + len <= self.limits.mem_cap {
            return true;
        }
        if self.spool.is_none()
            && let Some(factory) = self.spool_factory.as_mut()
        {
            self.spool = factory();
            if self.spool.is_none() {
                // One failed attempt is enough; do not retry on every frame.
                self.spool_factory = None;
            }
        }
        match &self.spool {
            Some(sp) => sp.bytes() + (len as u64) <= self.limits.spool_cap,
            None => false,
        }
    }

    /// Gives `data` the next seq and keeps it (memory, or the spool when memory is full
    /// or the spool already holds older frames: order must be kept).
    fn store(&mut self, stream: Stream, data: Vec<u8>) {
        let frame = OutputFrame {
            stream,
            seq: self.next_seq,
            data,
        };
        self.next_seq += 1;
        let spool_empty = self.spool.as_ref().is_none_or(Spool::is_empty);
        if spool_empty && self.mem_bytes + frame.data.len() <= self.limits.mem_cap {
            self.mem_bytes += frame.data.len();
            self.mem.push_back(frame);
            return;
        }
        let len = frame.data.len();
        let spooled = match self.spool.as_mut() {
            Some(sp) => match sp.append(&frame) {
                Ok(()) => true,
                Err(err) => {
                    log::warn!("{err}; keeping the frame in memory");
                    false
                }
            },
            None => false,
        };
        if !spooled {
            // Only reached when the caller checked room; memory is the last resort so
            // no seq is ever skipped.
            self.mem_bytes += len;
            self.mem.push_back(frame);
        }
    }

    /// The hub holds every frame up to `seq`.
    pub(super) fn ack(&mut self, seq: u64) {
        let seq = seq.min(self.end_seq());
        if seq <= self.acked {
            return;
        }
        while self.mem.front().is_some_and(|f| f.seq <= seq) {
            if let Some(f) = self.mem.pop_front() {
                self.mem_bytes -= f.data.len();
            }
        }
        self.acked = seq;
        self.sent = self.sent.max(seq);
        self.refill_from_spool();
    }

    /// After a (re)connect: the hub holds up to `acked`; send again from there.
    pub(super) fn rewind(&mut self, acked: u64) {
        self.ack(acked);
        self.sent = self.acked;
    }

    fn refill_from_spool(&mut self) {
        let Some(sp) = self.spool.as_mut() else {
            return;
        };
        while !sp.is_empty() {
            let next_len = sp.peek_len();
            if self.mem_bytes + next_len > self.limits.mem_cap && !self.mem.is_empty() {
                break;
            }
            match sp.pop() {
                Ok(frame) => {
                    if frame.seq <= self.acked {
                        continue;
                    }
                    self.mem_bytes += frame.data.len();
                    self.mem.push_back(frame);
                }
                Err(err) => {
                    // A spool that cannot be read back is reported as lost output.
                    log::error!("{err}");
                    let lost = sp.bytes();
                    sp.clear();
                    self.lost_pending += lost;
                    self.lost_total += lost;
                    break;
                }
            }
        }
        if sp.is_empty() {
            sp.clear();
        }
    }

    /// The next frame to send, if it is in memory (frames still in the spool wait for acks).
    pub(super) fn next_unsent(&self) -> Option<&OutputFrame> {
        let idx = (self.sent - self.acked) as usize;
        self.mem.get(idx)
    }

    pub(super) fn mark_sent(&mut self, seq: u64) {
        debug_assert_eq!(seq, self.sent + 1, "frames are sent in seq order");
        self.sent = seq;
    }

    /// Seq of the last frame closed so far (0 before any output).
    pub(super) fn end_seq(&self) -> u64 {
        self.next_seq - 1
    }

    pub(super) fn acked(&self) -> u64 {
        self.acked
    }

    pub(super) fn all_sent(&self) -> bool {
        self.open.is_none() && self.sent == self.end_seq()
    }

    #[cfg(test)]
    pub(super) fn all_acked(&self) -> bool {
        self.open.is_none() && self.acked == self.end_seq()
    }

    pub(super) fn lost_total(&self) -> u64 {
        self.lost_total
    }

    /// Write every unacknowledged byte (memory, then spool, in seq order) to `out`, for
    /// a wrapper that gives up: the output the hub never stored is left on the host.
    pub(super) fn save_unacked(&mut self, out: &mut impl std::io::Write) -> std::io::Result<u64> {
        let mut written = 0u64;
        for frame in &self.mem {
            out.write_all(&frame.data)?;
            written += frame.data.len() as u64;
        }
        if let Some(sp) = self.spool.as_mut() {
            while !sp.is_empty() {
                let frame = sp.pop().map_err(|e| std::io::Error::other(e.to_string()))?;
                out.write_all(&frame.data)?;
                written += frame.data.len() as u64;
            }
        }
        if let Some(open) = &self.open {
            out.write_all(&open.1)?;
            written += open.1.len() as u64;
        }
        out.flush()?;
        Ok(written)
    }

    pub(super) fn buffered_bytes(&self) -> (usize, u64) {
        (self.mem_bytes, self.spool.as_ref().map_or(0, Spool::bytes))
    }
}

/// Upper bound of the loss note's length, reserved before it is written.
const LOSS_NOTE_MAX: usize = 160;

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(mem_cap: usize, spool_cap: u64) -> Limits {
        Limits {
            frame_max: 4,
            mem_cap,
            spool_cap,
            coalesce: Duration::from_millis(50),
        }
    }

    fn drain(buf: &mut OutputBuffer) -> Vec<OutputFrame> {
        let mut out = Vec::new();
        while let Some(f) = buf.next_unsent().cloned() {
            buf.mark_sent(f.seq);
            out.push(f);
        }
        out
    }

    #[test]
    fn coalesces_per_stream_and_splits_at_frame_max() {
        let now = Instant::now();
        let mut b = OutputBuffer::new(limits(1 << 20, 0), None);
        b.push(Stream::Stdout, b"ab", now);
        b.push(Stream::Stdout, b"cdefg", now);
        b.push(Stream::Stderr, b"E", now);
        b.push(Stream::Stdout, b"h", now);
        assert_eq!(b.flush_deadline(), Some(now + Duration::from_millis(50)));
        b.flush_due(now, false);
        assert!(!b.all_sent(), "open frame must wait for its deadline");
        b.flush_due(now + Duration::from_millis(50), false);
        let frames = drain(&mut b);
        let summary: Vec<(Stream, u64, Vec<u8>)> = frames
            .into_iter()
            .map(|f| (f.stream, f.seq, f.data))
            .collect();
        assert_eq!(
            summary,
            vec![
                (Stream::Stdout, 1, b"abcd".to_vec()),
                (Stream::Stdout, 2, b"efg".to_vec()),
                (Stream::Stderr, 3, b"E".to_vec()),
                (Stream::Stdout, 4, b"h".to_vec()),
            ]
        );
        assert!(b.all_sent() && !b.all_acked());
        b.ack(4);
        assert!(b.all_acked());
        assert_eq!(b.buffered_bytes(), (0, 0));
    }

    #[test]
    fn rewind_resends_exactly_what_the_hub_lacks() {
        let now = Instant::now();
        let mut b = OutputBuffer::new(limits(1 << 20, 0), None);
        b.push(Stream::Stdout, b"0123456789ab", now);
        assert_eq!(drain(&mut b).len(), 3);
        b.ack(1);
        b.rewind(2);
        let again = drain(&mut b);
        assert_eq!(again.iter().map(|f| f.seq).collect::<Vec<_>>(), vec![3]);
        // A stale or too-large ack changes nothing harmful.
        b.ack(1);
        b.ack(99);
        assert!(b.all_acked());
        assert_eq!(b.end_seq(), 3);
    }

    #[test]
    fn drops_beyond_the_cap_and_notes_the_loss() {
        let now = Instant::now();
        let mut b = OutputBuffer::new(limits(8, 0), None);
        b.push(Stream::Stdout, b"aaaabbbbccccdd", now);
        b.finish();
        let frames = drain(&mut b);
        assert_eq!(frames[0].data, b"aaaa");
        assert_eq!(frames[1].data, b"bbbb");
        let note = String::from_utf8_lossy(&frames[2].data).to_string();
        assert_eq!(frames[2].stream, Stream::Stderr);
        assert!(note.contains("6 bytes of output were lost"), "{note}");
        assert_eq!(frames.len(), 3);
        assert_eq!(b.lost_total(), 6);
    }

    #[test]
    fn spool_keeps_everything_in_order_across_acks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let factory: SpoolFactory = Box::new(move || Spool::create_in(&path, "t").ok());
        let now = Instant::now();
        let mut b = OutputBuffer::new(limits(8, 1 << 20), Some(factory));
        let input: Vec<u8> = (0..200u8).collect();
        b.push(Stream::Stdout, &input, now);
        b.finish();
        assert!(b.buffered_bytes().1 > 0, "overflow must go to the spool");
        let mut got = Vec::new();
        let mut last_seq = 0;
        while !b.all_acked() {
            let frames = drain(&mut b);
            assert!(!frames.is_empty(), "stalled with unacked frames");
            for f in &frames {
                assert_eq!(f.seq, last_seq + 1);
                last_seq = f.seq;
                got.extend_from_slice(&f.data);
            }
            b.ack(last_seq);
        }
        assert_eq!(got, input);
        assert_eq!(b.lost_total(), 0);
        assert_eq!(b.buffered_bytes(), (0, 0));
    }
}
