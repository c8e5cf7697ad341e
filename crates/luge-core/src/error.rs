//! What every error of Luge shares: an engine's or the system's error kept
//! whole as a cause, and the one way a chain of causes is shown to people.

/// An engine's or the system's own error, kept whole with its causes: the
/// errors that carry one return it as their `source`, and [`error_line`]
/// reads the chain.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error and its causes as one line, `what: why: why`, the way a person
/// reads a start-up failure of `luge` or `luge-precompile`; the binaries add
/// the backtrace only when `RUST_BACKTRACE` asks for it.
///
/// At most [`MAX_ERROR_LINE`] bytes: engines put whole Wasm backtraces in
/// their errors (Wasmer's for a stack overflow in a start function ran to
/// 700 KB), and this line goes into responses and logs.
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
    let mut line = line.replace('\n', " ");
    if line.len() > MAX_ERROR_LINE {
        let mut end = MAX_ERROR_LINE;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push_str("...");
    }
    line
}

/// The longest [`error_line`], in bytes (before its `...`).
pub const MAX_ERROR_LINE: usize = 2048;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Long(String);

    #[test]
    fn a_long_error_is_cut_on_a_character_boundary() {
        let line = error_line(&Long("é\n".repeat(4000)));
        assert!(line.len() <= MAX_ERROR_LINE + 3);
        assert!(line.ends_with("..."));
        assert!(!line.contains('\n'));
        assert_eq!(error_line(&Long("short".into())), "short");
    }
}
