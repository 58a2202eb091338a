//! Where the bytes of a new output frame go (both backends place them by these rules,
//! through their [`Chunks`]): the head, the tail window, or the omitted gap; and what a
//! batch tells each frame about the frames that follow it (`superseded_hints`).

use std::collections::HashMap;

use super::errors::StoreError;
use crate::wire::db::{DbRequest, OutputLimit};
use crate::wire::records::RunId;

/// The output bookkeeping columns of a target row (both backends keep the same).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Progress {
    pub contiguous: u64,
    pub pending: u64,
    pub total: u64,
    pub omitted: u64,
    pub head: u64,
    pub tail: u64,
}

/// Where a target's stored output chunks live: the three operations the head and tail
/// placement needs, so both backends place bytes by the same rules
/// ([`place_within_limit`]).
pub(crate) trait Chunks {
    fn insert_chunk(
        &mut self,
        pos: u64,
        seq: u64,
        stream: Stream,
        data: &[u8],
    ) -> Result<(), StoreError>;
    /// Delete every chunk after the head; returns the bytes removed.
    fn delete_tail(&mut self, head: u64) -> Result<u64, StoreError>;
    /// Drop at most `excess` bytes from the oldest tail chunks; returns the bytes dropped.
    fn shed_oldest_tail(&mut self, p: &Progress, excess: u64) -> Result<u64, StoreError>;
}
use crate::wire::wrapper::Stream;

/// How a frame is placed: its target's limit, and how many bytes of the same target's
/// next frames (consecutive seqs, same limit) follow it in the same batch.
///
/// When those later bytes fill the whole tail window by themselves, whatever this frame
/// puts in the tail, and the tail before it, would be shed before the batch commits: it
/// is counted as omitted at once and never written (`place_within_limit`). What is
/// stored when the batch commits is the same; a flood writes its head and the last tail
/// window of each batch instead of every byte. db leaves it at 0 when the batch also
/// reads output, so no read can see the state between the frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    pub limit: OutputLimit,
    pub superseded: u64,
}

impl From<OutputLimit> for Placement {
    fn from(limit: OutputLimit) -> Placement {
        Placement {
            limit,
            superseded: 0,
        }
    }
}

impl Placement {
    /// Whether the tail part of frame `seq` is shed within the batch anyway: later
    /// frames of the batch fill the tail window, and they are sure to be placed after
    /// it (this frame is the next seq and nothing was seen above it).
    pub(crate) fn sheds_tail(&self, p: &Progress, seq: u64) -> bool {
        self.superseded > 0
            && self.superseded >= self.limit.tail_bytes
            && p.pending == 0
            && seq == p.contiguous + 1
    }
}

/// One new output frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame<'d> {
    pub seq: u64,
    pub stream: Stream,
    pub data: &'d [u8],
}

/// Stores the bytes of a new frame within `limit`: the head fills first, then a tail
/// window of at most `limit.tail_bytes` bytes keeps the newest, and what falls between is
/// counted as omitted. With `sheds_tail` ([`Placement::sheds_tail`]) the frame's tail
/// part and the tail before it are counted as omitted at once (later frames of the batch
/// refill the window). Returns (kept, omitted) bytes.
pub(crate) fn place_within_limit<C: Chunks + ?Sized>(
    chunks: &mut C,
    p: &mut Progress,
    frame: Frame<'_>,
    limit: OutputLimit,
    sheds_tail: bool,
) -> Result<(u64, u64), StoreError> {
    let Frame { seq, stream, data } = frame;
    let mut pos = p.total;
    let mut rest = data;
    let mut kept = 0u64;
    let omitted_before = p.omitted;
    p.total += data.len() as u64;

    // The head stays open until the first byte goes elsewhere.
    if p.tail == 0 && p.omitted == 0 && p.head < limit.head_bytes {
        let room = usize::try_from(limit.head_bytes - p.head).unwrap_or(usize::MAX);
        let (head, after) = rest.split_at(room.min(rest.len()));
        chunks.insert_chunk(pos, seq, stream, head)?;
        p.head += head.len() as u64;
        kept += head.len() as u64;
        pos += head.len() as u64;
        rest = after;
    }
    if rest.is_empty() {
        return Ok((kept, 0));
    }
    if sheds_tail {
        if p.tail > 0 {
            let removed = chunks.delete_tail(p.head)?;
            debug_assert_eq!(removed, p.tail, "the tail chunks hold the tail bytes");
            p.omitted += removed;
            p.tail = 0;
        }
        p.omitted += rest.len() as u64;
        return Ok((kept, p.omitted - omitted_before));
    }
    let tail_room = usize::try_from(limit.tail_bytes).unwrap_or(usize::MAX);
    if rest.len() >= tail_room {
        // The frame alone fills the tail window: it replaces the window.
        let removed = chunks.delete_tail(p.head)?;
        p.omitted += removed;
        let drop = rest.len() - tail_room;
        p.omitted += drop as u64;
        let keep = &rest[drop..];
        chunks.insert_chunk(pos + drop as u64, seq, stream, keep)?;
        p.tail = keep.len() as u64;
        kept += keep.len() as u64;
    } else {
        chunks.insert_chunk(pos, seq, stream, rest)?;
        p.tail += rest.len() as u64;
        kept += rest.len() as u64;
        let mut excess = p.tail.saturating_sub(limit.tail_bytes);
        while excess > 0 {
            let shed = chunks.shed_oldest_tail(p, excess)?;
            debug_assert!(
                shed > 0,
                "the tail window starts right after the omitted gap"
            );
            if shed == 0 {
                break;
            }
            excess -= shed;
            p.tail -= shed;
            p.omitted += shed;
        }
    }
    debug_assert!(
        p.total == p.head + p.omitted + p.tail,
        "every byte received is in the head, the omitted gap or the tail"
    );
    Ok((kept, p.omitted - omitted_before))
}

/// For each request of a batch, the bytes of the same target's frames that follow it in
/// the batch with consecutive seqs and the same limit ([`Placement::superseded`]); 0 for
/// every other request, and for all of them when the batch reads output (a read must not
/// see the state between two frames).
pub(super) fn superseded_hints<'r>(
    reqs: impl DoubleEndedIterator<Item = &'r DbRequest> + Clone,
) -> Vec<u64> {
    let reads_output = reqs
        .clone()
        .any(|r| matches!(r, DbRequest::Output { .. } | DbRequest::OutputTails { .. }));
    let mut hints: Vec<u64> = Vec::new();
    // Per target, walking backwards: the first seq of the chain after this point, its
    // limit, and the bytes from there to the end of the batch.
    let mut chains: HashMap<(RunId, &str), (u64, OutputLimit, u64)> = HashMap::new();
    for req in reqs.rev() {
        let DbRequest::AppendOutput {
            run,
            machine,
            seq,
            data,
            limit,
            ..
        } = req
        else {
            hints.push(0);
            continue;
        };
        let key = (*run, machine.as_str());
        let follows = match chains.get(&key) {
            Some((first, chain_limit, bytes))
                if seq.checked_add(1) == Some(*first) && chain_limit == limit =>
            {
                *bytes
            }
            _ => 0,
        };
        hints.push(if reads_output { 0 } else { follows });
        chains.insert(key, (*seq, *limit, follows + data.len() as u64));
    }
    hints.reverse();
    hints
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::db::{OutputQuery, TargetUpdate};

    const LIMIT: OutputLimit = OutputLimit {
        head_bytes: 1,
        tail_bytes: 1,
    };

    fn frame(run: RunId, machine: &str, seq: u64, len: usize) -> DbRequest {
        DbRequest::AppendOutput {
            run,
            machine: machine.into(),
            seq,
            stream: Stream::Stdout,
            data: vec![b'x'; len],
            limit: LIMIT,
        }
    }

    #[test]
    fn each_frame_learns_the_bytes_of_the_chain_after_it() {
        let reqs = [
            frame(1, "a", 5, 10),
            frame(1, "b", 1, 7),
            DbRequest::UpdateTarget {
                run: 1,
                machine: "a".into(),
                update: TargetUpdate::default(),
            },
            frame(1, "a", 6, 20),
            frame(2, "a", 7, 99),
            frame(1, "a", 7, 30),
            frame(1, "b", 2, 3),
        ];
        assert_eq!(superseded_hints(reqs.iter()), [50, 3, 0, 30, 0, 0, 0]);
    }

    #[test]
    fn a_gap_a_repeat_or_another_limit_ends_the_chain() {
        let mut other_limit = frame(1, "a", 4, 8);
        if let DbRequest::AppendOutput { limit, .. } = &mut other_limit {
            limit.tail_bytes = 2;
        }
        let reqs = [
            frame(1, "a", 1, 10),
            frame(1, "a", 3, 10),
            frame(1, "a", 3, 10),
            other_limit,
        ];
        assert_eq!(superseded_hints(reqs.iter()), [0, 0, 0, 0]);
    }

    #[test]
    fn a_batch_that_reads_output_gets_no_hints() {
        let reqs = [
            frame(1, "a", 1, 10),
            DbRequest::Output {
                run: 1,
                machine: "z".into(),
                query: OutputQuery::default(),
            },
            frame(1, "a", 2, 10),
        ];
        assert_eq!(superseded_hints(reqs.iter()), [0, 0, 0]);
    }
}
