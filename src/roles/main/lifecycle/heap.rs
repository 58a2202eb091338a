//! Handing main's freed heap back to the kernel after its large one-off allocations.
//!
//! Loading the configuration (and, at start, parsing it in main itself), planning every
//! schedule and rendering the first views for the hub allocate several times what main
//! keeps. glibc returns freed memory at the top of the heap by itself, but not the free
//! pages between live allocations; with 10,000 jobs those made main's resident size about
//! a third larger than what it holds. So, a moment after the start and after each applied
//! reload (one-off timers, never periodic), main asks glibc to release every free page.

use std::time::Duration;

use crate::evloop::Ctx;

/// Long enough for the views and replies that follow a load to be sent and freed.
const AFTER: Duration = Duration::from_secs(2);

/// Release free heap pages in a moment.
pub(crate) fn trim_soon<R: 'static>(ctx: &mut Ctx<R>) {
    ctx.after(AFTER, |_, _| trim());
}

#[cfg(target_env = "gnu")]
fn trim() {
    // SAFETY: malloc_trim takes no pointers and only walks glibc's own free lists under
    // its arena locks; it may be called at any time from any thread.
    let released = unsafe { nix::libc::malloc_trim(0) };
    log::debug!("heap trimmed (memory released: {})", released == 1);
}

#[cfg(not(target_env = "gnu"))]
fn trim() {}
