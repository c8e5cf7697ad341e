//! The book's references of luge.toml (docs/book/src/ref-config.md) and of
//! Spin's runtime config (ref-runtime-config.md), made from the configs'
//! own types rather than written twice: `[server]`'s keys with their
//! flags' help (one type is both, `options::Options`), every other
//! section's keys as serde reads them ([`luge_core::serde_keys`]), and the runtime
//! config's sections from its table of them. A test fails when the book's
//! copy differs; `LUGE_BLESS=1` rewrites it.

/// `keys` as one line of code spans.
fn listed(keys: &[&str]) -> String {
    keys.iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The reference, as the book holds it.
pub fn reference() -> String {
    let mut page = String::from(
        "# luge.toml reference\n\n\
         Every key `luge serve --config luge.toml` reads, section by section,\n\
         made from the config's own types by the test\n\
         `config_keys::tests::the_books_config_reference_is_the_configs`\n\
         (`LUGE_BLESS=1` rewrites it): do not edit it by hand. Any other key\n\
         is refused at start, naming it. What each does: \"Standalone function\n\
         host\" (routes, functions, chains, uploads), \"Shared state\", \"Events\n\
         and schedules\" (triggers) and \"Watching Luge\" (telemetry).\n\n\
         ## `[server]`\n\n\
         Each key is also a flag of `luge serve` (`_` written `-`); a flag\n\
         given wins over the key. Paths are relative to the config's\n\
         directory.\n\n\
         | key | what it sets |\n|---|---|\n",
    );
    let flags = <crate::options::Options as clap::Args>::augment_args(clap::Command::new("serve"));
    for key in crate::options::Options::KEYS {
        let help = flags
            .get_arguments()
            .find(|arg| arg.get_id().as_str() == *key)
            .and_then(clap::Arg::get_help)
            .map(|help| help.to_string().replace('\n', " ").replace('|', "\\|"))
            .unwrap_or_default();
        page.push_str(&format!("| `{key}` | {help} |\n"));
    }
    let spec = luge_core::serde_keys::of::<luge_host::FunctionSpec>();
    page.push_str(&format!(
        "\n## `[[routes]]` and `[[functions]]`\n\n\
         A function on a route (`path`), or on none (a `[[functions]]` entry,\n\
         woken by its triggers): {}.\n",
        listed(spec)
    ));
    page.push_str(&format!(
        "\n## `[[chains]]`\n\n{}.\n",
        listed(luge_core::serde_keys::of::<luge_host::ChainSpec>())
    ));
    page.push_str(&format!(
        "\n## `[state]`\n\n{}.\n",
        listed(luge_core::serde_keys::of::<luge_host::config::StateSection>())
    ));
    page.push_str(&format!(
        "\n## `[telemetry]`\n\nBeside OpenTelemetry's environment variables, which win: {}.\n",
        listed(luge_core::serde_keys::of::<luge_telemetry::TelemetryTable>())
    ));
    page.push_str(
        "\n## `[[triggers]]`\n\n\
         `function` (a route's path or a function's name), `relative_deadline_us`,\n\
         `max_in_flight`, and one source, the key of its kind:\n\n\
         | kind | its settings |\n|---|---|\n",
    );
    for kind in luge_trigger::KINDS {
        page.push_str(&format!("| `{}` | `{}` |\n", kind.name(), kind.shape()));
    }
    page
}

/// The runtime config reference, as the book holds it.
pub fn runtime_reference() -> String {
    use crate::runtime_config::{SECTIONS, Shape};
    let mut page = String::from(
        "# Runtime config reference\n\n\
         Every section of Spin's runtime config file that Luge reads\n\
         (`--runtime-config-file`, or the `runtime-config.toml` beside a\n\
         `spin.toml` under `luge up`), with its keys, made from the types\n\
         that read them by the test\n\
         `config_keys::tests::the_books_runtime_config_reference_is_the_readers`\n\
         (`LUGE_BLESS=1` rewrites it): do not edit it by hand. Any other\n\
         section, type or key is refused at start, naming it (never its\n\
         value: a URL or a token may be a secret). Paths are relative to the\n\
         file's directory. How each is used: \"Spin apps\" and \"Reaching the\n\
         world\".\n",
    );
    for section in SECTIONS {
        page.push_str(&format!(
            "\n## `{}`\n\n{}.\n",
            section.heading,
            capitalized(section.what)
        ));
        match &section.shape {
            Shape::Keys(keys) => page.push_str(&format!("\nKeys: {}.\n", listed(keys()))),
            Shape::Types(types) => {
                page.push_str("\n| `type` | its keys |\n|---|---|\n");
                for kind in types("type") {
                    let keys = match kind.keys {
                        Some([]) => "none".to_owned(),
                        Some(keys) => listed(keys),
                        None => "refused by name: not served by Luge".to_owned(),
                    };
                    page.push_str(&format!("| `{}` | {keys} |\n", kind.name));
                }
            }
            Shape::NotServed => page.push_str("\nRefused by name: not served by Luge.\n"),
        }
    }
    page
}

/// `text` with its first letter upper case.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    /// Whether the book's page `page` (under docs/book/src) is `made`,
    /// the text the code makes of it; with `LUGE_BLESS` set, first
    /// rewritten to it. A reference made from the code (the CLI's,
    /// luge.toml's) is held to the book by one of these.
    pub(crate) fn the_book_holds(page: &str, made: &str) -> bool {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../docs/book/src")
            .join(page);
        if std::env::var_os("LUGE_BLESS").is_some() {
            std::fs::write(&path, made).expect("the book is writable");
        }
        std::fs::read_to_string(&path).unwrap_or_default() == made
    }

    /// The book's reference is the config's: a key added, renamed or
    /// explained anew fails here until the book says it too.
    #[test]
    fn the_books_config_reference_is_the_configs() {
        assert!(
            the_book_holds("ref-config.md", &super::reference()),
            "docs/book/src/ref-config.md is not luge.toml's keys: rewrite it with \
             `LUGE_BLESS=1 ./scripts/cargo-linted.sh test --workspace --all-features --lib -- \
             the_books_config_reference` and commit it"
        );
    }

    /// The book's runtime config reference is what the readers read: a
    /// section, type or key added fails here until the book says it too.
    #[test]
    fn the_books_runtime_config_reference_is_the_readers() {
        let made = super::runtime_reference();
        // Every type the readers serve is listed with its keys.
        for expected in [
            "| `redis` | `url` |",
            "| `spin` | `path` |",
            "| `static` | `values` |",
            "| `vault` | refused by name",
            "`ca_roots_file`",
            "`block_networks`",
            "## `[llm_compute]`",
        ] {
            assert!(made.contains(expected), "{expected} is not in:\n{made}");
        }
        assert!(
            the_book_holds("ref-runtime-config.md", &made),
            "docs/book/src/ref-runtime-config.md is not the runtime config's keys: rewrite it \
             with `LUGE_BLESS=1 ./scripts/cargo-linted.sh test --workspace --all-features --lib \
             -- the_books_runtime_config_reference` and commit it"
        );
    }
}
