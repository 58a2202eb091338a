//! The live output text of one target for `/ws` subscribers (docs/api.md, `/ws`).
//!
//! The original counted positions in characters of the output decoded from UTF-8 with
//! invalid bytes replaced. Here the bytes are decoded as they come: a multi-byte
//! character split between two frames waits for its rest, and an invalid sequence becomes
//! one U+FFFD exactly as `String::from_utf8_lossy` would make it, so positions match a
//! decode of the whole output. Memory is bounded: past `cap` bytes the oldest half of the
//! text is dropped; a subscriber that had not received it continues at the new start
//! (a gap, which the original UI appends anyway).

use crate::wire::records::RunId;

/// Where a subscriber is in a target's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Position {
    pub run: RunId,
    /// Characters sent (the protocol's `position`).
    pub chars: u64,
    /// The same point as a byte offset in the decoded text.
    pub bytes: u64,
    /// The final (`is_complete`) chunk was sent.
    pub complete_sent: bool,
}

/// A chunk for one subscriber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk<'a> {
    pub text: &'a str,
    pub position: u64,
    pub total_length: u64,
    pub is_complete: bool,
}

#[derive(Debug)]
pub(crate) struct LiveText {
    pub run: RunId,
    /// The newest part of the text.
    text: String,
    /// Decoded bytes and characters dropped before `text`.
    base_bytes: u64,
    base_chars: u64,
    /// Characters of the whole text, dropped ones included.
    total_chars: u64,
    /// An incomplete UTF-8 sequence at the end, waiting for its rest.
    carry: Vec<u8>,
    cap: usize,
    complete: bool,
}

impl LiveText {
    pub(crate) fn new(run: RunId, cap: usize) -> LiveText {
        LiveText {
            run,
            text: String::new(),
            base_bytes: 0,
            base_chars: 0,
            total_chars: 0,
            carry: Vec::new(),
            cap: cap.max(16),
            complete: false,
        }
    }

    /// Append output bytes.
    pub(crate) fn push_bytes(&mut self, bytes: &[u8]) {
        if self.complete {
            return;
        }
        self.carry.extend_from_slice(bytes);
        let mut rest: &[u8] = &std::mem::take(&mut self.carry);
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    self.push_str(valid);
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    self.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            self.push_str("\u{FFFD}");
                            rest = &after[bad..];
                        }
                        None => {
                            self.carry = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        self.trim();
    }

    /// Append text that is already decoded (e.g. a marker for omitted bytes).
    pub(crate) fn push_str(&mut self, s: &str) {
        self.text.push_str(s);
        self.total_chars += s.chars().count() as u64;
    }

    /// No more output will come: an incomplete sequence at the end becomes U+FFFD.
    pub(crate) fn finish(&mut self) {
        if !self.carry.is_empty() {
            self.carry.clear();
            self.push_str("\u{FFFD}");
        }
        self.complete = true;
        self.trim();
    }

    /// The text starts `bytes` into the output (a part that was not read): counted as
    /// that many characters, as for output that is plain ASCII.
    pub(crate) fn skip(&mut self, bytes: u64) {
        if self.text.is_empty() && self.carry.is_empty() {
            self.base_bytes += bytes;
            self.base_chars += bytes;
            self.total_chars += bytes;
        }
    }

    pub(crate) fn total_chars(&self) -> u64 {
        self.total_chars
    }

    fn trim(&mut self) {
        if self.text.len() <= self.cap {
            return;
        }
        let mut cut = self.text.len() - self.cap / 2;
        while !self.text.is_char_boundary(cut) {
            cut += 1;
        }
        self.base_chars += self.text[..cut].chars().count() as u64;
        self.base_bytes += cut as u64;
        self.text.drain(..cut);
    }

    /// What a subscriber at `pos` has not received, at most `max` bytes of it, and the
    /// position after it; `None` when there is nothing to send.
    pub(crate) fn next_chunk(&self, pos: &Position, max: usize) -> Option<(Chunk<'_>, Position)> {
        let from = if pos.run != self.run {
            Position {
                run: self.run,
                ..Position::default()
            }
        } else {
            *pos
        };
        let (start_chars, start_bytes) = if from.bytes < self.base_bytes {
            (self.base_chars, self.base_bytes)
        } else {
            (from.chars, from.bytes)
        };
        let offset = usize::try_from(start_bytes - self.base_bytes).ok()?;
        let rest = self.text.get(offset..)?;
        let mut end = rest.len().min(max.max(4));
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let text = &rest[..end];
        let is_complete = self.complete && end == rest.len();
        if text.is_empty() && (!is_complete || from.complete_sent) {
            return None;
        }
        let sent_chars = text.chars().count() as u64;
        let next = Position {
            run: self.run,
            chars: start_chars + sent_chars,
            bytes: start_bytes + end as u64,
            complete_sent: is_complete,
        };
        Some((
            Chunk {
                text,
                position: start_chars,
                total_length: self.total_chars,
                is_complete,
            },
            next,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(t: &LiveText, pos: &mut Position, max: usize) -> String {
        let mut out = String::new();
        while let Some((chunk, next)) = t.next_chunk(pos, max) {
            assert_eq!(chunk.position, pos.chars.max(t.base_chars));
            out.push_str(chunk.text);
            *pos = next;
        }
        out
    }

    #[test]
    fn split_characters_and_invalid_bytes_decode_like_a_whole_decode() {
        let bytes = "héllo → wörld ✓".as_bytes().to_vec();
        let mut with_junk = bytes.clone();
        with_junk.extend_from_slice(b"\xff\xfe ok \xe2\x82");
        let mut t = LiveText::new(1, 1 << 20);
        for piece in with_junk.chunks(1) {
            t.push_bytes(piece);
        }
        t.finish();
        let whole = String::from_utf8_lossy(&with_junk).into_owned();
        let mut pos = Position::default();
        assert_eq!(drain(&t, &mut pos, 5), whole);
        assert_eq!(t.total_chars(), whole.chars().count() as u64);
        assert_eq!(pos.chars, whole.chars().count() as u64);
        assert!(pos.complete_sent);
    }

    #[test]
    fn subscribers_get_increments_and_one_final_chunk() {
        let mut t = LiveText::new(7, 1 << 20);
        t.push_bytes(b"abc");
        let mut pos = Position::default();
        let (chunk, next) = t.next_chunk(&pos, 100).unwrap();
        assert_eq!(
            (chunk.text, chunk.position, chunk.is_complete),
            ("abc", 0, false)
        );
        pos = next;
        assert!(t.next_chunk(&pos, 100).is_none());
        t.push_bytes("dé".as_bytes());
        let (chunk, next) = t.next_chunk(&pos, 100).unwrap();
        assert_eq!(
            (chunk.text, chunk.position, chunk.total_length),
            ("dé", 3, 5)
        );
        pos = next;
        t.finish();
        let (chunk, next) = t.next_chunk(&pos, 100).unwrap();
        assert_eq!(
            (chunk.text, chunk.position, chunk.is_complete),
            ("", 5, true)
        );
        assert!(t.next_chunk(&next, 100).is_none());
    }

    #[test]
    fn a_skipped_start_counts_in_lengths_and_positions() {
        let mut t = LiveText::new(3, 1 << 20);
        t.skip(1000);
        t.push_bytes(b"tail");
        t.finish();
        assert_eq!(t.total_chars(), 1004);
        let mut pos = Position::default();
        let (chunk, _) = t.next_chunk(&pos, 100).unwrap();
        assert_eq!((chunk.text, chunk.position), ("tail", 1000));
        assert_eq!(drain(&t, &mut pos, 100), "tail");
        assert_eq!(pos.chars, 1004);
    }

    #[test]
    fn a_new_run_starts_subscribers_from_zero() {
        let mut t = LiveText::new(2, 1 << 20);
        t.push_bytes(b"new");
        let old = Position {
            run: 1,
            chars: 50,
            bytes: 50,
            complete_sent: true,
        };
        let (chunk, _) = t.next_chunk(&old, 100).unwrap();
        assert_eq!((chunk.text, chunk.position), ("new", 0));
    }

    #[test]
    fn memory_is_capped_and_late_subscribers_skip_the_dropped_part() {
        let mut t = LiveText::new(1, 64);
        let mut early = Position::default();
        t.push_bytes(&[b'a'; 40]);
        assert_eq!(drain(&t, &mut early, 1000).len(), 40);
        t.push_bytes(&[b'b'; 40]);
        assert!(t.text.len() <= 64);
        // The cut fell after its position: it continues at the new start.
        assert_eq!(drain(&t, &mut early, 1000), "b".repeat(32));
        assert_eq!(early.chars, 80);
        let mut late = Position::default();
        let first = t.next_chunk(&late, 1000).unwrap().0;
        assert!(first.position > 0, "starts after the dropped part");
        let got = drain(&t, &mut late, 1000);
        assert_eq!(late.chars, 80);
        assert_eq!(got, "b".repeat(32));
    }
}
