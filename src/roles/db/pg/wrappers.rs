//! Fleet state of wrapper builds on PostgreSQL: the twin of `db/wrappers.rs`, whose
//! rules (bounds, newer wins, paths kept per minion, byte-wise order) it applies with
//! its own SQL. Two servers recording the same (minion, path) at once serialise on the
//! row: the second upsert waits for the first's transaction, then compares `seen`.

use super::super::store::{Op, StoreError};
use super::super::wrappers::{KEEP_PATHS, check_bounds, log_forgotten, minions_of};
use super::{PgStore, col};
use crate::wire::db::WrapperSeen;

impl PgStore {
    pub fn record_wrappers(&mut self, rows: &[WrapperSeen]) -> Result<(), StoreError> {
        let op = Op::WriteWrappers;
        check_bounds(op, rows)?;
        let forgotten = self.atomic(op, |sql| {
            for row in rows {
                sql.exec(
                    op,
                    "INSERT INTO minion_wrappers (minion, path, sha256, seen)
                     VALUES ($1, $2, $3, $4)
                     ON CONFLICT (minion, path) DO UPDATE
                     SET sha256 = excluded.sha256, seen = excluded.seen
                     WHERE excluded.seen >= minion_wrappers.seen",
                    &[&row.minion, &row.path, &row.sha256, &row.seen],
                )?;
            }
            let mut forgotten = Vec::new();
            for minion in minions_of(rows) {
                let n = sql.exec(
                    op,
                    "DELETE FROM minion_wrappers WHERE minion = $1 AND path NOT IN (
                         SELECT path FROM minion_wrappers WHERE minion = $1
                         ORDER BY seen DESC, path LIMIT $2)",
                    &[&minion, &KEEP_PATHS],
                )?;
                forgotten.push((minion, n));
            }
            Ok(forgotten)
        })?;
        for (minion, n) in forgotten {
            log_forgotten(minion, n);
        }
        Ok(())
    }

    pub fn forget_wrapper(&mut self, minion: &str, path: &str) -> Result<bool, StoreError> {
        let op = Op::WriteWrappers;
        self.atomic(op, |sql| {
            sql.exec(
                op,
                "DELETE FROM minion_wrappers WHERE minion = $1 AND path = $2",
                &[&minion, &path],
            )
            .map(|n| n > 0)
        })
    }

    pub fn wrappers(&mut self) -> Result<Vec<WrapperSeen>, StoreError> {
        let op = Op::ReadWrappers;
        self.atomic(op, |sql| {
            sql.rows(
                op,
                "SELECT minion, path, sha256, seen FROM minion_wrappers ORDER BY minion, path",
                &[],
            )?
            .iter()
            .map(|row| {
                Ok(WrapperSeen {
                    minion: col(op, row, 0)?,
                    path: col(op, row, 1)?,
                    sha256: col(op, row, 2)?,
                    seen: col(op, row, 3)?,
                })
            })
            .collect()
        })
    }
}
