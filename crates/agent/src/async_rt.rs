//! The agent's one way to start Tokio: a current-thread runtime with I/O and timers. Each
//! subcommand that speaks gRPC, HTTP or the CRI runs on one; the agent never needs more threads
//! than the kernel's sockets give it work for.

use crate::error::{Error, failed};

/// A current-thread runtime with I/O and time enabled.
pub fn current_thread() -> Result<tokio::runtime::Runtime, Error> {
    builder()
        .build()
        .map_err(|e| failed("cannot start the async runtime", e))
}

/// The same runtime's builder, for the one caller that also bounds its blocking threads (the
/// exporter's scrapes).
pub fn builder() -> tokio::runtime::Builder {
    let mut b = tokio::runtime::Builder::new_current_thread();
    b.enable_all();
    b
}
