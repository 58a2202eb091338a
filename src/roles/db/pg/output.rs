//! Command output on PostgreSQL: the twin of `db/output.rs`, with the same rules —
//! frames stored idempotently by seq (a seen seq is never stored again; seqs seen above
//! a gap wait in `output_seen`), the first `head` bytes kept, then a rolling tail window
//! of `tail` bytes, everything pushed out counted in `omitted_bytes`, chunks placed by
//! their absolute byte position so a reader can continue "from position N".
//!
//! Chunks are stored compressed when that pays, with the same `encoding` and `raw_len`
//! columns as SQLite (`db::stored_chunk`); every length below is uncompressed.
//!
//! The reading side (`read_output`) shapes the chunks exactly as SQLite's does; the
//! storage test suite (`storage_tests.rs`) holds both to the same answers.

use super::super::output::{AppendOutcome, MAX_PENDING_SEQS};
use super::super::store::{Op, StoreError, from_db, to_db};
use super::{PgStore, Sql, col};
use crate::roles::db::output::{Chunks, Frame, Placement, Progress, place_within_limit};
use crate::roles::db::stored_chunk::{decoded, raw_len_column, trim_front};
use crate::wire::compress::{Encoding, encode_chunk};
use crate::wire::db::{OutputBytes, OutputLimit, OutputQuery};
use crate::wire::records::RunId;
use crate::wire::wrapper::Stream;

impl Chunks for Target<'_, '_, '_> {
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
        self.sql.exec(
            op,
            "INSERT INTO output_chunks
             (run_id, machine, pos, seq, stream, data, encoding, raw_len)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &self.run_id,
                &self.machine,
                &pos,
                &seq,
                &(stream as i32),
                &stored.bytes.as_ref(),
                &(stored.encoding as i16),
                &raw_len,
            ],
        )?;
        Ok(())
    }

    /// Deletes every tail chunk; returns their bytes.
    fn delete_tail(&mut self, head: u64) -> Result<u64, StoreError> {
        let op = Op::AppendOutput;
        let head = to_db(op, "head bytes", head)?;
        let rows = self.sql.rows(
            op,
            "DELETE FROM output_chunks WHERE run_id = $1 AND machine = $2 AND pos >= $3
             RETURNING coalesce(raw_len, length(data))",
            &[&self.run_id, &self.machine, &head],
        )?;
        let mut bytes = 0u64;
        for row in &rows {
            let len: i64 = col(op, row, 0)?;
            bytes += u64::try_from(len).unwrap_or(0);
        }
        Ok(bytes)
    }

    /// Removes up to `excess` bytes from the front of the tail window (the whole oldest
    /// chunk or the front of it); returns how many went. The tail window starts right
    /// after the omitted gap.
    fn shed_oldest_tail(&mut self, p: &Progress, excess: u64) -> Result<u64, StoreError> {
        let op = Op::AppendOutput;
        let pos = to_db(op, "output position", p.head + p.omitted)?;
        let excess_db = to_db(op, "trim", excess)?;
        // The whole oldest chunk when it fits in the excess (one round trip)...
        if let Some(row) = self.sql.opt(
            op,
            "DELETE FROM output_chunks
             WHERE run_id = $1 AND machine = $2 AND pos = $3
             AND coalesce(raw_len, length(data)) <= $4::BIGINT
             RETURNING coalesce(raw_len, length(data))",
            &[&self.run_id, &self.machine, &pos, &excess_db],
        )? {
            let len: i64 = col(op, &row, 0)?;
            return Ok(u64::try_from(len).unwrap_or(0));
        }
        // An encoded chunk is cut in Rust: decoded, cut, stored again.
        let Some(row) = self.sql.opt(
            op,
            "SELECT data, encoding, raw_len FROM output_chunks
             WHERE run_id = $1 AND machine = $2 AND pos = $3",
            &[&self.run_id, &self.machine, &pos],
        )?
        else {
            return Ok(0);
        };
        let encoding: i16 = col(op, &row, 1)?;
        if encoding != Encoding::Plain as i16 {
            let data = decoded(op, col(op, &row, 0)?, encoding.into(), col(op, &row, 2)?)?;
            let t = trim_front(op, &data, excess, self.compress)?;
            self.sql.exec(
                op,
                "UPDATE output_chunks SET data = $4, encoding = $5, raw_len = $6,
                 pos = pos + $7 WHERE run_id = $1 AND machine = $2 AND pos = $3",
                &[
                    &self.run_id,
                    &self.machine,
                    &pos,
                    &t.bytes,
                    &(t.encoding as i16),
                    &t.raw_len,
                    &t.shift,
                ],
            )?;
            return Ok(t.cut);
        }
        // ... else its front.
        let cut = i32::try_from(excess).map_err(|_| StoreError::Invalid {
            op,
            reason: format!("trim of {excess} bytes is out of range"),
        })?;
        let trimmed = self.sql.exec(
            op,
            "UPDATE output_chunks SET data = substr(data, $4::INTEGER + 1),
             pos = pos + $4::INTEGER
             WHERE run_id = $1 AND machine = $2 AND pos = $3",
            &[&self.run_id, &self.machine, &pos, &cut],
        )?;
        Ok(if trimmed == 0 { 0 } else { excess })
    }
}

/// One target's output rows, inside an operation.
struct Target<'s, 'c, 'm> {
    sql: &'s mut Sql<'c>,
    run_id: i64,
    machine: &'m str,
    /// Write chunks compressed when that pays.
    compress: bool,
}

impl PgStore {
    pub fn append_output(
        &mut self,
        run: RunId,
        machine: &str,
        seq: u64,
        stream: Stream,
        data: &[u8],
        limit: OutputLimit,
    ) -> Result<AppendOutcome, StoreError> {
        self.append_output_placed(run, machine, seq, stream, data, limit.into())
    }

    /// [`PgStore::append_output`] knowing what follows the frame in its batch.
    pub fn append_output_placed(
        &mut self,
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
        let compress = self.compress_output;
        self.atomic(op, |sql| {
            let mut target = Target {
                sql,
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

    pub fn read_output(
        &mut self,
        run: RunId,
        machine: &str,
        query: &OutputQuery,
    ) -> Result<OutputBytes, StoreError> {
        let op = Op::ReadOutput;
        let run_id = to_db(op, "run id", run)?;
        let from = to_db(op, "output position", query.from)?;
        let stream = query.stream.map(|s| s as i32);
        let (progress, chunks) = self.atomic(op, |sql| {
            let mut target = Target {
                sql,
                run_id,
                machine,
                compress: false,
            };
            let progress = target.progress(op)?.ok_or_else(|| StoreError::NotFound {
                op,
                what: format!("target {machine} of run {run}"),
            })?;
            let rows = target.sql.rows(
                op,
                // Seek to the chunk holding `from` instead of scanning the target.
                "SELECT pos, data, encoding, raw_len FROM output_chunks
                 WHERE run_id = $1 AND machine = $2 AND pos >= coalesce(
                     (SELECT max(pos) FROM output_chunks
                      WHERE run_id = $1 AND machine = $2 AND pos <= $3), 0)
                 AND pos + coalesce(raw_len, length(data)) > $3 AND ($4::INTEGER IS NULL OR stream = $4)
                 ORDER BY pos",
                &[&run_id, &machine, &from, &stream],
            )?;
            let mut chunks = Vec::with_capacity(rows.len());
            for row in &rows {
                let pos = from_db(op, "output_chunks.pos", col(op, row, 0)?)?;
                let encoding: i16 = col(op, row, 2)?;
                let data = decoded(op, col(op, row, 1)?, encoding.into(), col(op, row, 3)?)?;
                chunks.push((pos, data));
            }
            Ok((progress, chunks))
        })?;
        Ok(shape(progress, chunks, query))
    }

    pub fn output_tails(
        &mut self,
        run: RunId,
        bytes: u64,
        max_targets: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let op = Op::ReadOutput;
        let id = to_db(op, "run id", run)?;
        let machines: Vec<String> = self.atomic(op, |sql| {
            sql.rows(
                op,
                "SELECT machine FROM targets WHERE run_id = $1 ORDER BY machine",
                &[&id],
            )?
            .iter()
            .map(|row| col(op, row, 0))
            .collect()
        })?;
        let query = OutputQuery {
            tail: Some(bytes),
            ..Default::default()
        };
        let mut tails = Vec::new();
        for machine in machines.into_iter().take(max_targets) {
            let out = self.read_output(run, &machine, &query)?;
            tails.push((machine, String::from_utf8_lossy(&out.data).into_owned()));
        }
        Ok(tails)
    }
}

/// The chunks from the query's position on, shaped as `OutputBytes` (tail, max_bytes,
/// where the omitted gap falls), as SQLite's `read_output` does.
fn shape(progress: Progress, chunks: Vec<(u64, Vec<u8>)>, query: &OutputQuery) -> OutputBytes {
    let gap_end = progress.head + progress.omitted;
    let mut out = OutputBytes {
        omitted_bytes: progress.omitted,
        total_bytes: progress.total,
        ..OutputBytes::default()
    };
    // (index in data, absolute position) where each chunk's bytes begin.
    let mut starts: Vec<(usize, u64)> = Vec::new();
    let mut before_gap = query.from < gap_end;
    for (pos, bytes) in chunks {
        let skip = usize::try_from(query.from.saturating_sub(pos)).unwrap_or(usize::MAX);
        let Some(bytes) = bytes.get(skip..) else {
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
            out.next_from = match starts.iter().rev().find(|(start, _)| *start <= max) {
                Some((start, pos)) => pos + (max - start) as u64,
                None => progress.total,
            };
            out.data.truncate(max);
            out.omitted_at = out.omitted_at.filter(|at| *at <= max);
        }
    }
    out
}

impl Target<'_, '_, '_> {
    fn progress(&mut self, op: Op) -> Result<Option<Progress>, StoreError> {
        let Some(row) = self.sql.opt(
            op,
            "SELECT seq_contiguous, seq_pending, output_bytes, omitted_bytes,
             head_bytes, tail_bytes FROM targets WHERE run_id = $1 AND machine = $2",
            &[&self.run_id, &self.machine],
        )?
        else {
            return Ok(None);
        };
        Ok(Some(Progress {
            contiguous: from_db(op, "targets.seq_contiguous", col(op, &row, 0)?)?,
            pending: from_db(op, "targets.seq_pending", col(op, &row, 1)?)?,
            total: from_db(op, "targets.output_bytes", col(op, &row, 2)?)?,
            omitted: from_db(op, "targets.omitted_bytes", col(op, &row, 3)?)?,
            head: from_db(op, "targets.head_bytes", col(op, &row, 4)?)?,
            tail: from_db(op, "targets.tail_bytes", col(op, &row, 5)?)?,
        }))
    }

    fn save(&mut self, p: &Progress) -> Result<(), StoreError> {
        let op = Op::AppendOutput;
        let values = [
            to_db(op, "seq", p.contiguous)?,
            to_db(op, "pending seqs", p.pending)?,
            to_db(op, "output bytes", p.total)?,
            to_db(op, "omitted bytes", p.omitted)?,
            to_db(op, "head bytes", p.head)?,
            to_db(op, "tail bytes", p.tail)?,
        ];
        self.sql.exec(
            op,
            "UPDATE targets SET seq_contiguous = $3, seq_pending = $4, output_bytes = $5,
             omitted_bytes = $6, head_bytes = $7, tail_bytes = $8
             WHERE run_id = $1 AND machine = $2",
            &[
                &self.run_id,
                &self.machine,
                &values[0],
                &values[1],
                &values[2],
                &values[3],
                &values[4],
                &values[5],
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
            if p.pending > 0 {
                let seen = self.sql.opt(
                    op,
                    "SELECT 1 FROM output_seen WHERE run_id = $1 AND machine = $2 AND seq = $3",
                    &[&self.run_id, &self.machine, &seq_db],
                )?;
                if seen.is_some() {
                    return Ok(false);
                }
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
            self.sql.exec(
                op,
                "INSERT INTO output_seen (run_id, machine, seq) VALUES ($1, $2, $3)",
                &[&self.run_id, &self.machine, &seq_db],
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
        let seen = self.sql.rows(
            op,
            "SELECT seq FROM output_seen WHERE run_id = $1 AND machine = $2 ORDER BY seq",
            &[&self.run_id, &self.machine],
        )?;
        for row in &seen {
            if from_db(op, "output_seen.seq", col(op, row, 0)?)? != p.contiguous + 1 {
                break;
            }
            p.contiguous += 1;
        }
        let contiguous = to_db(op, "seq", p.contiguous)?;
        let removed = self.sql.exec(
            op,
            "DELETE FROM output_seen WHERE run_id = $1 AND machine = $2 AND seq <= $3",
            &[&self.run_id, &self.machine, &contiguous],
        )?;
        p.pending = p.pending.saturating_sub(removed);
        Ok(())
    }
}
