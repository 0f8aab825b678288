//! The errors of this crate, named after piegpu's (piegpu/errors.py): TraceError and ValidationError.
//!
//! Ops on tensors cannot return a `Result` (they are `std::ops` operators), so a bad op *panics*
//! with an [`Error`] payload; [`crate::trace`] catches it and returns `Err(error)`, so a traced
//! function's mistakes come back as a `Result` naming the op and the fix. Decoding
//! ([`crate::Program::from_bytes`]) returns `Result` directly.

use std::cell::Cell;
use std::fmt;
use std::sync::Once;

/// Which kind of mistake: misuse while tracing, or bad shapes/dtypes/bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Misuse while tracing: a tensor used as a bool (`==`, `<`), an op outside a trace, no outputs.
    Trace,
    /// Shapes, dtypes, literals that do not fit, bad container bytes.
    Validation,
}

/// An error with the message piegpu's tracers give: what was wrong, where, and `Fix: ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    /// A TraceError.
    pub fn trace(message: impl Into<String>) -> Self {
        Error { kind: ErrorKind::Trace, message: message.into() }
    }

    /// A ValidationError.
    pub fn validation(message: impl Into<String>) -> Self {
        Error { kind: ErrorKind::Validation, message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.kind {
            ErrorKind::Trace => "TraceError",
            ErrorKind::Validation => "ValidationError",
        };
        write!(f, "{name}: {}", self.message)
    }
}

impl std::error::Error for Error {}

/// The ValidationError every type rule uses: "op: what. Fix: fix".
pub(crate) fn invalid(op: &str, what: impl fmt::Display, fix: impl fmt::Display) -> Error {
    Error::validation(format!("{op}: {what}. Fix: {fix}"))
}

thread_local! {
    static TRACING: Cell<usize> = const { Cell::new(0) };
}

/// Abort the op in progress with `e`: inside trace() the payload is the Error, which trace() returns as
/// `Err(e)`; outside any trace an ordinary panic whose message is the error's text.
pub(crate) fn raise(e: Error) -> ! {
    if TRACING.with(|t| t.get() > 0) {
        std::panic::panic_any(e)
    }
    panic!("{e}")
}

/// Unwrap a rule's result inside a trace (raise on error).
pub(crate) fn check<T>(r: Result<T, Error>) -> T {
    r.unwrap_or_else(|e| raise(e))
}

/// Mark this thread as tracing for the closure's duration: the panic hook stays silent for
/// [`Error`] payloads there, since trace() returns them as `Err`.
pub(crate) fn quietly<R>(f: impl FnOnce() -> R) -> R {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let ours = info.payload().downcast_ref::<Error>().is_some();
            if !(ours && TRACING.with(|t| t.get() > 0)) {
                previous(info);
            }
        }));
    });
    struct Depth;
    impl Drop for Depth {
        fn drop(&mut self) {
            TRACING.with(|t| t.set(t.get() - 1));
        }
    }
    TRACING.with(|t| t.set(t.get() + 1));
    let _depth = Depth;
    f()
}
