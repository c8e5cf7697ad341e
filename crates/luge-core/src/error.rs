//! What every error of Luge shares: an engine's or the system's error kept
//! whole as a cause, and the one way a chain of causes is shown to people.

/// An engine's or the system's own error, kept whole with its causes: the
/// errors that carry one return it as their `source`, and [`error_line`]
/// reads the chain.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error and its causes as one line, `what: why: why`, the way a person
/// reads a start-up failure of `luge` or `luge-precompile`; the binaries add
/// the backtrace only when `RUST_BACKTRACE` asks for it.
pub fn error_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        // thiserror's `#[error(transparent)]` and `{0}` forms repeat
        // their cause; say each thing once.
        if !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line.replace('\n', " ")
}
