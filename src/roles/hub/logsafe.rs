//! Client-supplied text on its way into a log line or an echoed error message: the
//! hub uses the shared rules (`crate::logsafe`: control characters, ANSI/OSC escapes and
//! bidi controls escaped, the text cut to a bound; a flood's warning held back).

pub(crate) use crate::logsafe::{Repeated, clip};
