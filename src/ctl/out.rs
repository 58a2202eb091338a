//! Standard output of `saltpeterctl`, where a reader that went away ends the program.
//!
//! Rust ignores SIGPIPE, so writing to a closed pipe (`saltpeterctl runs | head -1`)
//! returns `EPIPE`, on which `println!` panics. Restoring SIGPIPE's default would also
//! kill the tool silently when the *daemon* hangs up mid-request, losing the error
//! message; so instead every write to standard output goes through here, and a closed
//! pipe exits at once with status 0, as ripgrep and coreutils-like tools do: what the
//! reader wanted it already has. Any other write error is one line on stderr, status 1.

use std::io;

use super::client::CtlError;
use super::exit::{EXIT_FAILED, EXIT_OK};

/// `println!` that ends the program quietly when standard output is a closed pipe.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::ctl::out::written({
            use std::io::Write as _;
            writeln!(std::io::stdout().lock(), $($arg)*)
        })
    };
}

/// `print!` that ends the program quietly when standard output is a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::ctl::out::written({
            use std::io::Write as _;
            write!(std::io::stdout().lock(), $($arg)*)
        })
    };
}

/// The reader of standard output is gone.
pub(super) fn closed_pipe(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

/// Ends the program on a write error: quietly (0) for a closed pipe, else with a message.
pub(super) fn written(result: io::Result<()>) {
    if let Err(e) = result {
        let (code, message) = write_failed(e);
        eprintln!("saltpeterctl: {message}");
        std::process::exit(code);
    }
}

/// The error for a failed write of `saltpeterctl`'s output; a closed pipe exits here.
pub(super) fn write_failed(e: io::Error) -> CtlError {
    if closed_pipe(&e) {
        std::process::exit(EXIT_OK);
    }
    (
        EXIT_FAILED,
        format!("could not write to standard output: {e}"),
    )
}

/// Writes bytes to standard output (and flushes), ending quietly on a closed pipe.
pub(super) fn bytes(data: &[u8]) {
    use std::io::Write as _;
    let mut stdout = io::stdout().lock();
    written(stdout.write_all(data).and_then(|()| stdout.flush()));
}

/// `v` as pretty JSON on stdout.
pub(crate) fn print_json(v: &serde_json::Value) {
    outln!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}
