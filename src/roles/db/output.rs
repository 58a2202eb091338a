//! Command output in the store: frames appended idempotently by sequence number, kept
//! within a head + tail limit per target, and read back in arrival order.
//!
//! Sequence numbers (docs/protocols.md, Wrapper <-> hub) number the frames of one (run, machine)
//! from 1, shared by stdout and stderr. A seq is *seen* once its frame arrived, whether
//! its bytes were kept or dropped by the limit; a seen seq is never stored again. The
//! target row keeps `seq_contiguous` (all of 1..=it seen); seqs seen above it (only after
//! a lost frame, until the wrapper resends from the acknowledged seq) sit in
//! `output_seen` until the gap closes. What the hub acknowledges is
//! [`max_contiguous_seq`], read after the batch commits.
//!
//! Output limit, in arrival order: the first `head` bytes are kept; later bytes go to a
//! rolling tail window of `tail` bytes whose oldest chunks are deleted (or trimmed) as
//! new ones arrive; everything pushed out is counted in `omitted_bytes`. Chunks carry
//! their absolute byte position (`pos`) in the target's output, so the head is
//! `[0, head_bytes)`, the omitted gap follows it, and the tail ends at `output_bytes`;
//! a live reader can poll "from position N" across trims. A frame that crosses the head
//! boundary is stored as two chunks with the same seq.
//!
//! Chunks are stored zstd-compressed when that pays (`wire::compress::encode_chunk`;
//! `encoding` says how, `raw_len` holds the uncompressed length, NULL for plain rows,
//! including every row written before schema version 7). Positions, limits and the
//! byte counts of the target row are all uncompressed bytes; readers get the bytes back
//! as the command wrote them.

use super::errors::{Op, StoreError, from_db, to_db};
pub(crate) use super::placement::{Chunks, Frame, Placement, Progress, place_within_limit};
use super::sql::{Db, params};
use super::stored_chunk::{decoded, raw_len_column, trim_front};
use crate::wire::compress::{Encoding, encode_chunk};
use crate::wire::db::{OutputBytes, OutputQuery};
use crate::wire::records::RunId;
use crate::wire::wrapper::Stream;

/// Seqs that may wait above a gap per target; more means the wrapper is not resending.
pub(crate) const MAX_PENDING_SEQS: u64 = 100_000;

/// What [`append_output_placed`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AppendOutcome {
    /// The seq was already seen; nothing changed.
    pub duplicate: bool,
    /// Bytes of this frame stored.
    pub kept: u64,
    /// Bytes that left the store through this frame (its own or older tail bytes).
    pub omitted: u64,
    /// [`max_contiguous_seq`] after this frame.
    pub contiguous_seq: u64,
}

/// Stores one output frame of a target, idempotently by `seq`, knowing what follows the
/// frame in its batch (`placement`).
pub(crate) fn append_output_placed<D: Db>(
    db: &mut D,
    run: RunId,
    machine: &str,
    seq: u64,
    stream: Stream,
    data: &[u8],
    placement: Placement,
) -> Result<AppendOutcome, StoreError> {
    let op = Op::AppendOutput;
    let run_id = to_db(op, "run id", run)?;
    if seq == 0 {
        return Err(StoreError::Invalid {
            op,
            reason: "output seq 0 (seqs start at 1)".into(),
        });
    }
    to_db(op, "output seq", seq)?;
    let compress = db.compress_output();
    db.atomic(op, |db| {
        let mut target = Target {
            db,
            run_id,
            machine,
            compress,
        };
        let mut progress = target.progress(op)?.ok_or_else(|| StoreError::NotFound {
            op,
            what: format!("target {machine} of run {run}"),
        })?;
        let sheds_tail = placement.sheds_tail(&progress, seq);
        if !target.mark_seen(&mut progress, seq)? {
            return Ok(AppendOutcome {
                duplicate: true,
                kept: 0,
                omitted: 0,
                contiguous_seq: progress.contiguous,
            });
        }
        let frame = Frame { seq, stream, data };
        let (kept, omitted) = place_within_limit(
            &mut target,
            &mut progress,
            frame,
            placement.limit,
            sheds_tail,
        )?;
        target.save(&progress)?;
        Ok(AppendOutcome {
            duplicate: false,
            kept,
            omitted,
            contiguous_seq: progress.contiguous,
        })
    })
}

/// Highest seq such that every seq in `1..=seq` is stored or accounted for.
pub(crate) fn max_contiguous_seq<D: Db>(
    db: &mut D,
    run: RunId,
    machine: &str,
) -> Result<u64, StoreError> {
    let op = Op::ReadOutput;
    let run_id = to_db(op, "run id", run)?;
    let progress = db.read(op, |db| {
        Target {
            db,
            run_id,
            machine,
            compress: false,
        }
        .progress(op)
    })?;
    match progress {
        Some(progress) => Ok(progress.contiguous),
        None => Err(StoreError::NotFound {
            op,
            what: format!("target {machine} of run {run}"),
        }),
    }
}

#[cfg(test)]
/// All kept output of a target, in arrival order.
pub(crate) fn output<D: Db>(
    db: &mut D,
    run: RunId,
    machine: &str,
) -> Result<OutputBytes, StoreError> {
    read_output(db, run, machine, &OutputQuery::default())
}

/// Part of a target's kept output (a stream, a position onwards, a tail).
pub(crate) fn read_output<D: Db>(
    db: &mut D,
    run: RunId,
    machine: &str,
    query: &OutputQuery,
) -> Result<OutputBytes, StoreError> {
    let op = Op::ReadOutput;
    let run_id = to_db(op, "run id", run)?;
    let from = to_db(op, "output position", query.from)?;
    let (progress, rows) = db.read(op, |db| {
        let progress = Target {
            db: &mut *db,
            run_id,
            machine,
            compress: false,
        }
        .progress(op)?
        .ok_or_else(|| StoreError::NotFound {
            op,
            what: format!("target {machine} of run {run}"),
        })?;
        let rows = db.rows(
            op,
            // Seek to the chunk holding `from` instead of scanning the target.
            "SELECT pos, data, encoding, raw_len FROM output_chunks
             WHERE run_id = ?1 AND machine = ?2 AND pos >= coalesce(
                 (SELECT max(pos) FROM output_chunks
                  WHERE run_id = ?1 AND machine = ?2 AND pos <= ?3), 0)
             AND pos + coalesce(raw_len, length(data)) > ?3
             AND (CAST(?4 AS INTEGER) IS NULL OR stream = ?4) ORDER BY pos",
            params![run_id, machine, from, query.stream.map(|s| s as u8)],
        )?;
        Ok((progress, rows))
    })?;

    let gap_end = progress.head + progress.omitted;
    let mut out = OutputBytes {
        omitted_bytes: progress.omitted,
        total_bytes: progress.total,
        ..OutputBytes::default()
    };
    // (index in data, absolute position) where each chunk's bytes begin.
    let mut starts: Vec<(usize, u64)> = Vec::new();
    let mut before_gap = query.from < gap_end;
    for mut row in rows {
        let pos = from_db(op, "output_chunks.pos", row.get(op, 0)?)?;
        if pos >= progress.total {
            // Written after the progress was read (PostgreSQL reads each statement at
            // its own snapshot): the next read, from `total`, returns it once.
            break;
        }
        let bytes = decoded(op, row.take_blob(op, 1)?, row.get(op, 2)?, row.get(op, 3)?)?;
        let skip = usize::try_from(query.from.saturating_sub(pos)).unwrap_or(usize::MAX);
        let end = usize::try_from(progress.total - pos).map_or(bytes.len(), |n| n.min(bytes.len()));
        let Some(bytes) = bytes.get(skip..end) else {
            continue;
        };
        if before_gap && progress.omitted > 0 && pos >= gap_end {
            out.omitted_at = Some(out.data.len());
        }
        before_gap = pos < progress.head;
        starts.push((out.data.len(), pos + skip as u64));
        out.data.extend_from_slice(bytes);
    }

    if let Some(tail) = query.tail {
        let keep = usize::try_from(tail).unwrap_or(usize::MAX);
        let cut = out.data.len().saturating_sub(keep);
        if cut > 0 {
            out.data.drain(..cut);
            out.omitted_at = out.omitted_at.and_then(|at| at.checked_sub(cut));
            // Chunks wholly before the cut go; the one the cut falls in starts later.
            let first = starts
                .iter()
                .rposition(|(start, _)| *start <= cut)
                .unwrap_or(0);
            starts = starts
                .split_off(first)
                .into_iter()
                .map(|(start, pos)| match start.checked_sub(cut) {
                    Some(start) => (start, pos),
                    None => (0, pos + (cut - start) as u64),
                })
                .collect();
        }
    }
    out.next_from = progress.total;
    if let Some(max) = query.max_bytes {
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        if out.data.len() > max {
            // Position of the first byte not returned.
            out.next_from = match starts.iter().rev().find(|(start, _)| *start <= max) {
                Some((start, pos)) => pos + (max - start) as u64,
                None => progress.total,
            };
            out.data.truncate(max);
            out.omitted_at = out.omitted_at.filter(|at| *at <= max);
        }
    }
    Ok(out)
}

/// The last `bytes` of each target's output (lossy UTF-8), for a notification.
pub(crate) fn output_tails<D: Db>(
    db: &mut D,
    run: RunId,
    bytes: u64,
    max_targets: usize,
) -> Result<Vec<(String, String)>, StoreError> {
    let op = Op::ReadOutput;
    let id = to_db(op, "run id", run)?;
    let machines: Vec<String> = db.read(op, |db| {
        db.rows(
            op,
            "SELECT machine FROM targets WHERE run_id = ?1 ORDER BY machine",
            params![id],
        )?
        .iter()
        .map(|row| row.get(op, 0))
        .collect()
    })?;
    let query = OutputQuery {
        tail: Some(bytes),
        ..Default::default()
    };
    let mut tails = Vec::new();
    for machine in machines.into_iter().take(max_targets) {
        let out = read_output(db, run, &machine, &query)?;
        tails.push((machine, String::from_utf8_lossy(&out.data).into_owned()));
    }
    Ok(tails)
}

/// One target's output rows, inside an operation.
struct Target<'d, 'm, D> {
    db: &'d mut D,
    run_id: i64,
    machine: &'m str,
    /// Write chunks compressed when that pays.
    compress: bool,
}

impl<D: Db> Chunks for Target<'_, '_, D> {
    fn insert_chunk(
        &mut self,
        pos: u64,
        seq: u64,
        stream: Stream,
        data: &[u8],
    ) -> Result<(), StoreError> {
        let op = Op::AppendOutput;
        if data.is_empty() {
            return Ok(());
        }
        let pos = to_db(op, "output position", pos)?;
        let seq = to_db(op, "output seq", seq)?;
        let stored = encode_chunk(data, self.compress);
        let raw_len = raw_len_column(op, &stored, data.len())?;
        self.db.exec(
            op,
            "INSERT INTO output_chunks
             (run_id, machine, pos, seq, stream, data, encoding, raw_len)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                self.run_id,
                self.machine,
                pos,
                seq,
                stream as u8,
                stored.bytes.as_ref(),
                stored.encoding as i64,
                raw_len
            ],
        )?;
        Ok(())
    }

    /// Deletes every tail chunk; returns their bytes.
    fn delete_tail(&mut self, head: u64) -> Result<u64, StoreError> {
        let op = Op::AppendOutput;
        let head = to_db(op, "head bytes", head)?;
        let mut bytes = 0;
        for row in self.db.rows(
            op,
            "DELETE FROM output_chunks WHERE run_id = ?1 AND machine = ?2 AND pos >= ?3
             RETURNING CAST(coalesce(raw_len, length(data)) AS BIGINT)",
            params![self.run_id, self.machine, head],
        )? {
            bytes += from_db(op, "output_chunks.data", row.get(op, 0)?)?;
        }
        Ok(bytes)
    }

    /// Removes up to `excess` bytes from the front of the tail window (the whole oldest
    /// chunk or the front of it); returns how many went.
    ///
    /// The tail window starts right after the omitted gap, so its oldest chunk is found
    /// by equality on `pos`: a range on a bound parameter would make SQLite (STAT4)
    /// prepare the statement again at every call.
    fn shed_oldest_tail(&mut self, p: &Progress, excess: u64) -> Result<u64, StoreError> {
        let op = Op::AppendOutput;
        let pos = to_db(op, "output position", p.head + p.omitted)?;
        let excess_db = to_db(op, "trim", excess)?;
        // The whole oldest chunk when it fits in the excess (one statement)...
        if let Some(row) = self.db.row(
            op,
            "DELETE FROM output_chunks WHERE run_id = ?1 AND machine = ?2 AND pos = ?3
             AND coalesce(raw_len, length(data)) <= CAST(?4 AS BIGINT)
             RETURNING CAST(coalesce(raw_len, length(data)) AS BIGINT)",
            params![self.run_id, self.machine, pos, excess_db],
        )? {
            return from_db(op, "output_chunks.data", row.get(op, 0)?);
        }
        // ... else its front.
        let Some(row) = self.db.row(
            op,
            "SELECT encoding FROM output_chunks WHERE run_id = ?1 AND machine = ?2 AND pos = ?3",
            params![self.run_id, self.machine, pos],
        )?
        else {
            return Ok(0);
        };
        if row.get::<i64>(op, 0)? != Encoding::Plain as i64 {
            return self.trim_encoded(pos, excess);
        }
        self.db.exec(
            op,
            "UPDATE output_chunks SET data = substr(data, CAST(?4 AS INTEGER) + 1),
             pos = pos + CAST(?4 AS INTEGER)
             WHERE run_id = ?1 AND machine = ?2 AND pos = ?3",
            params![self.run_id, self.machine, pos, excess_db],
        )?;
        Ok(excess)
    }
}

impl<D: Db> Target<'_, '_, D> {
    /// Cuts the first `excess` bytes of an encoded chunk at `pos`: decoded, cut and
    /// stored again (encoded when the rest still pays).
    fn trim_encoded(&mut self, pos: i64, excess: u64) -> Result<u64, StoreError> {
        let op = Op::AppendOutput;
        let Some(mut row) = self.db.row(
            op,
            "SELECT data, encoding, raw_len FROM output_chunks
             WHERE run_id = ?1 AND machine = ?2 AND pos = ?3",
            params![self.run_id, self.machine, pos],
        )?
        else {
            return Ok(0);
        };
        let data = decoded(op, row.take_blob(op, 0)?, row.get(op, 1)?, row.get(op, 2)?)?;
        let t = trim_front(op, &data, excess, self.compress)?;
        self.db.exec(
            op,
            "UPDATE output_chunks SET data = ?4, encoding = ?5, raw_len = ?6, pos = pos + ?7
             WHERE run_id = ?1 AND machine = ?2 AND pos = ?3",
            params![
                self.run_id,
                self.machine,
                pos,
                &t.bytes,
                t.encoding as i64,
                t.raw_len,
                t.shift
            ],
        )?;
        Ok(t.cut)
    }

    fn progress(&mut self, op: Op) -> Result<Option<Progress>, StoreError> {
        let Some(row) = self.db.row(
            op,
            "SELECT seq_contiguous, seq_pending, output_bytes, omitted_bytes,
             head_bytes, tail_bytes FROM targets WHERE run_id = ?1 AND machine = ?2",
            params![self.run_id, self.machine],
        )?
        else {
            return Ok(None);
        };
        Ok(Some(Progress {
            contiguous: from_db(op, "targets.seq_contiguous", row.get(op, 0)?)?,
            pending: from_db(op, "targets.seq_pending", row.get(op, 1)?)?,
            total: from_db(op, "targets.output_bytes", row.get(op, 2)?)?,
            omitted: from_db(op, "targets.omitted_bytes", row.get(op, 3)?)?,
            head: from_db(op, "targets.head_bytes", row.get(op, 4)?)?,
            tail: from_db(op, "targets.tail_bytes", row.get(op, 5)?)?,
        }))
    }

    fn save(&mut self, p: &Progress) -> Result<(), StoreError> {
        let op = Op::AppendOutput;
        self.db.exec(
            op,
            "UPDATE targets SET seq_contiguous = ?3, seq_pending = ?4, output_bytes = ?5,
             omitted_bytes = ?6, head_bytes = ?7, tail_bytes = ?8
             WHERE run_id = ?1 AND machine = ?2",
            params![
                self.run_id,
                self.machine,
                to_db(op, "seq", p.contiguous)?,
                to_db(op, "pending seqs", p.pending)?,
                to_db(op, "output bytes", p.total)?,
                to_db(op, "omitted bytes", p.omitted)?,
                to_db(op, "head bytes", p.head)?,
                to_db(op, "tail bytes", p.tail)?
            ],
        )?;
        Ok(())
    }

    /// Records `seq` as seen; false when it already was.
    fn mark_seen(&mut self, p: &mut Progress, seq: u64) -> Result<bool, StoreError> {
        let op = Op::AppendOutput;
        let seq_db = to_db(op, "output seq", seq)?;
        if seq <= p.contiguous {
            return Ok(false);
        }
        if seq > p.contiguous + 1 {
            if p.pending > 0
                && self
                    .db
                    .row(
                        op,
                        "SELECT 1 FROM output_seen WHERE run_id = ?1 AND machine = ?2 AND seq = ?3",
                        params![self.run_id, self.machine, seq_db],
                    )?
                    .is_some()
            {
                return Ok(false);
            }
            if p.pending >= MAX_PENDING_SEQS {
                return Err(StoreError::Invalid {
                    op,
                    reason: format!(
                        "{} output frames of {} wait behind missing seq {}",
                        p.pending,
                        self.machine,
                        p.contiguous + 1
                    ),
                });
            }
            self.db.exec(
                op,
                "INSERT INTO output_seen (run_id, machine, seq) VALUES (?1, ?2, ?3)",
                params![self.run_id, self.machine, seq_db],
            )?;
            p.pending += 1;
            return Ok(true);
        }
        p.contiguous = seq;
        if p.pending > 0 {
            self.close_gap(p)?;
        }
        Ok(true)
    }

    /// Advances `contiguous` over seqs seen above it and forgets them.
    fn close_gap(&mut self, p: &mut Progress) -> Result<(), StoreError> {
        let op = Op::AppendOutput;
        let seen = self.db.rows(
            op,
            "SELECT seq FROM output_seen WHERE run_id = ?1 AND machine = ?2 ORDER BY seq",
            params![self.run_id, self.machine],
        )?;
        for row in &seen {
            if from_db(op, "output_seen.seq", row.get(op, 0)?)? != p.contiguous + 1 {
                break;
            }
            p.contiguous += 1;
        }
        let contiguous = to_db(op, "seq", p.contiguous)?;
        let removed = self.db.exec(
            op,
            "DELETE FROM output_seen WHERE run_id = ?1 AND machine = ?2 AND seq <= ?3",
            params![self.run_id, self.machine, contiguous],
        )?;
        p.pending = p.pending.saturating_sub(removed);
        Ok(())
    }
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
