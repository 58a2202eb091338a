//! The small SQL dialect both backends speak, so each operation of the store is written
//! once (`runs.rs`, `output.rs`, `deliveries.rs`, ...) over [`Db`].
//!
//! Outline:
//! 1. Statements are written with SQLite's numbered placeholders (`?1`, `?2`, ...);
//!    PostgreSQL rewrites them to `$1`, `$2` ([`numbered_dollars`]) once per statement
//!    text, when it prepares it.
//! 2. Parameters are [`Value`]s: each backend binds them as its own type (PostgreSQL by
//!    the type it inferred for the placeholder: `INTEGER`, `BIGINT`, `BOOLEAN`, ...), so
//!    the stored data is what each backend always stored (a flag is `0/1` on SQLite and
//!    `BOOLEAN` on PostgreSQL, bytes are `BLOB`/`BYTEA`).
//! 3. Rows come back as owned [`Row`]s read by column index with [`Row::get`].
//! 4. What the two really write differently is asked of [`Dialect`]: locking rows taken
//!    from a queue, the least of two values. Elsewhere the statements keep to what both
//!    read alike (`CAST(? AS BIGINT)` where PostgreSQL would sum to `NUMERIC` or could
//!    not tell a placeholder's type, `RETURNING`, `ON CONFLICT`, `TRUE`/`FALSE`).
//!
//! A write runs in [`Db::atomic`] (a savepoint, or a transaction of its own outside a
//! batch); a read in [`Db::read`] (SQLite reads straight away, PostgreSQL in a
//! transaction so a read of several statements sees one state).

use std::borrow::Cow;

use super::errors::{Op, StoreError};

/// Which SQL a backend speaks where the two differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// Appended to a SELECT of queue rows about to be leased: other takers skip them.
    pub(crate) fn lock_taken(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres => " FOR UPDATE SKIP LOCKED",
        }
    }

    /// The lesser of two values (SQLite's two-argument `min`).
    pub(crate) fn least(self) -> &'static str {
        match self {
            Dialect::Sqlite => "min",
            Dialect::Postgres => "LEAST",
        }
    }
}

/// A parameter of a statement, or a column value read back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value<'a> {
    Null,
    Int(i64),
    Bool(bool),
    Text(Cow<'a, str>),
    Blob(Cow<'a, [u8]>),
}

impl From<i64> for Value<'_> {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<i32> for Value<'_> {
    fn from(v: i32) -> Self {
        Value::Int(v.into())
    }
}

impl From<u32> for Value<'_> {
    fn from(v: u32) -> Self {
        Value::Int(v.into())
    }
}

impl From<u8> for Value<'_> {
    fn from(v: u8) -> Self {
        Value::Int(v.into())
    }
}

impl From<bool> for Value<'_> {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(v: &'a str) -> Self {
        Value::Text(Cow::Borrowed(v))
    }
}

impl<'a> From<&'a String> for Value<'a> {
    fn from(v: &'a String) -> Self {
        Value::Text(Cow::Borrowed(v))
    }
}

impl From<String> for Value<'_> {
    fn from(v: String) -> Self {
        Value::Text(Cow::Owned(v))
    }
}

impl<'a> From<&'a [u8]> for Value<'a> {
    fn from(v: &'a [u8]) -> Self {
        Value::Blob(Cow::Borrowed(v))
    }
}

impl<'a> From<&'a Vec<u8>> for Value<'a> {
    fn from(v: &'a Vec<u8>) -> Self {
        Value::Blob(Cow::Borrowed(v))
    }
}

impl<'a, T: Into<Value<'a>>> From<Option<T>> for Value<'a> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

impl<'a> From<&'a Option<String>> for Value<'a> {
    fn from(v: &'a Option<String>) -> Self {
        v.as_deref().map_or(Value::Null, Into::into)
    }
}

/// The parameters of a statement, each turned into a [`Value`].
macro_rules! params {
    ($($value:expr),* $(,)?) => {
        &[$($crate::roles::db::sql::Value::from($value)),*]
    };
}
pub(crate) use params;

/// A Rust type a column is read as.
pub(crate) trait FromValue: Sized {
    fn from_value(value: &Value<'_>) -> Option<Self>;
}

impl FromValue for i64 {
    fn from_value(value: &Value<'_>) -> Option<Self> {
        match value {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }
}

impl FromValue for i32 {
    fn from_value(value: &Value<'_>) -> Option<Self> {
        i64::from_value(value).and_then(|v| i32::try_from(v).ok())
    }
}

impl FromValue for bool {
    fn from_value(value: &Value<'_>) -> Option<Self> {
        match value {
            Value::Bool(v) => Some(*v),
            Value::Int(v) => Some(*v != 0),
            _ => None,
        }
    }
}

impl FromValue for String {
    fn from_value(value: &Value<'_>) -> Option<Self> {
        match value {
            Value::Text(v) => Some(v.to_string()),
            _ => None,
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(value: &Value<'_>) -> Option<Self> {
        match value {
            Value::Blob(v) => Some(v.to_vec()),
            _ => None,
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value<'_>) -> Option<Self> {
        match value {
            Value::Null => Some(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// One row of a result, owned.
#[derive(Debug)]
pub(crate) struct Row(pub Vec<Value<'static>>);

impl Row {
    /// Column `idx` as a `T`, or an error naming the operation (never a panic on a type
    /// the build does not expect).
    pub(crate) fn get<T: FromValue>(&self, op: Op, idx: usize) -> Result<T, StoreError> {
        let value = self.0.get(idx).unwrap_or(&Value::Null);
        T::from_value(value).ok_or_else(|| StoreError::Invalid {
            op,
            reason: format!(
                "column {idx} holds {value:?}, not a {}",
                std::any::type_name::<T>()
            ),
        })
    }

    /// Takes the bytes of column `idx` out of the row, without copying them.
    pub(crate) fn take_blob(&mut self, op: Op, idx: usize) -> Result<Vec<u8>, StoreError> {
        match self.0.get_mut(idx) {
            Some(Value::Blob(bytes)) => Ok(std::mem::take(bytes).into_owned()),
            _ => self.get(op, idx),
        }
    }
}

/// What the shared operations need of a backend's connection.
pub(crate) trait Db {
    fn dialect(&self) -> Dialect;

    /// Whether output chunks are written compressed when that pays.
    fn compress_output(&self) -> bool;

    /// Runs a statement (kept prepared); returns the rows it changed.
    fn exec(&mut self, op: Op, sql: &str, params: &[Value<'_>]) -> Result<u64, StoreError>;

    /// Runs a query (kept prepared); returns its rows.
    fn rows(&mut self, op: Op, sql: &str, params: &[Value<'_>]) -> Result<Vec<Row>, StoreError>;

    /// A query built at run time (a filtered listing): PostgreSQL does not keep it.
    fn rows_built(
        &mut self,
        op: Op,
        sql: &str,
        params: &[Value<'_>],
    ) -> Result<Vec<Row>, StoreError> {
        self.rows(op, sql, params)
    }

    /// Runs `apply` inside a savepoint (in a batch) or a transaction of its own: all of
    /// its writes or none of them.
    fn atomic<T>(
        &mut self,
        op: Op,
        apply: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError>
    where
        Self: Sized;

    /// Runs the reads of `apply`.
    fn read<T>(
        &mut self,
        op: Op,
        apply: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError>
    where
        Self: Sized;

    /// The first row of a query, if any.
    fn row(&mut self, op: Op, sql: &str, params: &[Value<'_>]) -> Result<Option<Row>, StoreError> {
        Ok(self.rows(op, sql, params)?.into_iter().next())
    }
}

/// A SELECT whose WHERE clause grows with the filter's set fields, each value bound as a
/// parameter (never spliced into the text).
pub(crate) struct Select {
    pub sql: String,
    pub args: Vec<Value<'static>>,
}

impl Select {
    /// `head` is the statement up to its WHERE clause.
    pub(crate) fn new(head: String) -> Select {
        Select {
            sql: format!("{head} WHERE 1 = 1"),
            args: Vec::new(),
        }
    }

    /// `AND clause ?N`, with `value` as parameter N.
    pub(crate) fn and(&mut self, clause: &str, value: impl Into<Value<'static>>) {
        self.args.push(value.into());
        self.sql
            .push_str(&format!(" AND {clause} ?{}", self.args.len()));
    }
}

/// `sql` with its `?N` placeholders written `$N` (PostgreSQL). The statements of the
/// store hold no `?` in their string literals.
pub(crate) fn numbered_dollars(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_renumbered_for_postgres() {
        assert_eq!(
            numbered_dollars("SELECT a FROM t WHERE b = ?1 AND c = ?12 AND d = '?'"),
            "SELECT a FROM t WHERE b = $1 AND c = $12 AND d = '?'"
        );
    }

    #[test]
    fn columns_read_as_their_types() {
        let row = Row(vec![
            Value::Int(3),
            Value::Null,
            Value::Int(1),
            Value::Text("x".into()),
        ]);
        assert_eq!(row.get::<i64>(Op::ReadRuns, 0).unwrap(), 3);
        assert_eq!(row.get::<Option<i64>>(Op::ReadRuns, 1).unwrap(), None);
        assert!(row.get::<bool>(Op::ReadRuns, 2).unwrap());
        assert_eq!(row.get::<String>(Op::ReadRuns, 3).unwrap(), "x");
        assert!(row.get::<i64>(Op::ReadRuns, 3).is_err());
    }
}
