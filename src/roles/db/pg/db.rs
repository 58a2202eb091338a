//! The shared operations' [`Db`] on PostgreSQL: `?N` placeholders as `$N`, each
//! [`Value`] bound as the type PostgreSQL inferred for its placeholder, columns read
//! back by their type.

use std::error::Error;

use postgres::types::private::BytesMut;
use postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use super::super::sql::{Db, Dialect, Row, Value, numbered_dollars};
use super::super::store::{Op, StoreError};
use super::{Param, PgStore, pg_error};

type BoxError = Box<dyn Error + Sync + Send>;

impl ToSql for Value<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(v) => match *ty {
                Type::INT2 => i16::try_from(*v)?.to_sql_checked(ty, out),
                Type::INT4 => i32::try_from(*v)?.to_sql_checked(ty, out),
                Type::BOOL => (*v != 0).to_sql_checked(ty, out),
                _ => v.to_sql_checked(ty, out),
            },
            Value::Bool(v) => match *ty {
                Type::INT2 | Type::INT4 | Type::INT8 => Value::Int((*v).into()).to_sql(ty, out),
                _ => v.to_sql_checked(ty, out),
            },
            Value::Text(v) => v.as_ref().to_sql_checked(ty, out),
            Value::Blob(v) => v.as_ref().to_sql_checked(ty, out),
        }
    }

    /// Any type: `to_sql` converts or refuses by the placeholder's type.
    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// Column `idx` of `row`, by its type.
fn column(row: &postgres::Row, idx: usize) -> Result<Value<'static>, postgres::Error> {
    let ty = row.columns()[idx].type_();
    Ok(match *ty {
        Type::BOOL => row.try_get::<_, Option<bool>>(idx)?.into(),
        Type::INT2 => row.try_get::<_, Option<i16>>(idx)?.map(i64::from).into(),
        Type::INT4 => row.try_get::<_, Option<i32>>(idx)?.into(),
        Type::INT8 => row.try_get::<_, Option<i64>>(idx)?.into(),
        Type::BYTEA => match row.try_get::<_, Option<Vec<u8>>>(idx)? {
            Some(bytes) => Value::Blob(bytes.into()),
            None => Value::Null,
        },
        _ => row.try_get::<_, Option<String>>(idx)?.into(),
    })
}

fn owned(op: Op, rows: Vec<postgres::Row>) -> Result<Vec<Row>, StoreError> {
    rows.iter()
        .map(|row| {
            (0..row.len())
                .map(|idx| column(row, idx))
                .collect::<Result<_, _>>()
                .map(Row)
                .map_err(pg_error(op))
        })
        .collect()
}

fn refs<'a>(params: &'a [Value<'_>]) -> Vec<Param<'a>> {
    params.iter().map(|p| p as Param<'a>).collect()
}

impl Db for PgStore {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn compress_output(&self) -> bool {
        self.compress_output
    }

    fn exec(&mut self, op: Op, sql: &str, params: &[Value<'_>]) -> Result<u64, StoreError> {
        self.sql(op)?.exec(op, sql, &refs(params))
    }

    fn rows(&mut self, op: Op, sql: &str, params: &[Value<'_>]) -> Result<Vec<Row>, StoreError> {
        let rows = self.sql(op)?.rows(op, sql, &refs(params))?;
        owned(op, rows)
    }

    fn rows_built(
        &mut self,
        op: Op,
        sql: &str,
        params: &[Value<'_>],
    ) -> Result<Vec<Row>, StoreError> {
        let text = numbered_dollars(sql);
        let rows = self.sql(op)?.rows_uncached(op, &text, &refs(params))?;
        owned(op, rows)
    }

    /// A savepoint in a batch, a transaction of its own outside one. A connection lost
    /// during a batch is [`StoreError::BatchLost`].
    fn atomic<T>(
        &mut self,
        op: Op,
        apply: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let batch = self.batch;
        self.sql(op)?
            .simple(op, if batch { "SAVEPOINT store_op" } else { "BEGIN" })?;
        self.in_op = true;
        let result = apply(self).and_then(|value| {
            self.sql(op)?
                .simple(op, if batch { "RELEASE store_op" } else { "COMMIT" })?;
            Ok(value)
        });
        if result.is_err() {
            let undo = if batch {
                "ROLLBACK TO store_op; RELEASE store_op"
            } else {
                "ROLLBACK"
            };
            let _ = self.sql(op).and_then(|mut sql| sql.simple(op, undo));
        }
        self.in_op = false;
        match result {
            Err(_) if batch && self.connection_lost() => Err(StoreError::BatchLost { op }),
            other => other,
        }
    }

    /// In a transaction too, so the statements of one read see one state.
    fn read<T>(
        &mut self,
        op: Op,
        apply: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.atomic(op, apply)
    }
}
