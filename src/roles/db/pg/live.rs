//! The leader's side of the live views: its announcements, sent in the batch's
//! transaction (the standby's side is `listener.rs`).

use super::super::live::CHANNEL;
use super::super::sql::Db;
use super::super::store::{Op, StoreError};
use super::PgStore;

impl PgStore {
    /// `NOTIFY` each payload on [`CHANNEL`], in the open batch (one statement).
    pub(crate) fn announce_live(&mut self, payloads: &[String]) -> Result<(), StoreError> {
        let op = Op::Announce;
        self.atomic(op, |pg| {
            pg.sql(op)?
                .rows(
                    op,
                    "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p",
                    &[&CHANNEL, &payloads],
                )
                .map(|_| ())
        })
    }
}
