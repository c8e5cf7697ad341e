//! A WASI 0.3 `wasi:cli` command: its stdin, as a stream, becomes its
//! stdout (the function ABI's JSON in, the same JSON out); an input of
//! `"fail"` ends it with `run`'s error result instead.

wasip3::cli::command::export!(Command);

struct Command;

impl wasip3::exports::cli::run::Guest for Command {
    async fn run() -> Result<(), ()> {
        let (stdin, _read) = wasip3::cli::stdin::read_via_stream();
        let input = stdin.collect().await;
        if input == b"\"fail\"" {
            return Err(());
        }
        let (mut tx, rx) = wasip3::wit_stream::new();
        let written = wasip3::cli::stdout::write_via_stream(rx);
        let remaining = tx.write_all(input).await;
        drop(tx);
        written.await.map_err(|_| ())?;
        if remaining.is_empty() {
            Ok(())
        } else {
            Err(())
        }
    }
}
