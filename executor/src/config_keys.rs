//! The book's luge.toml reference (docs/book/src/ref-config.md), made from
//! the config's own types rather than written twice: `[server]`'s keys
//! with their flags' help (one type is both, `options::Options`), and
//! every other section's keys as serde reads them. A test fails when the
//! book's copy differs; `LUGE_BLESS=1` rewrites it.

use serde::de::{self, Visitor};

/// The keys a struct that derives `Deserialize` reads: the names serde's
/// derive hands `deserialize_struct` (every field not skipped, as the
/// file spells it). Nothing is deserialized.
fn keys_of<T: de::DeserializeOwned>() -> &'static [&'static str] {
    let keys = std::cell::Cell::new(&[][..]);
    // Always an error: the deserializer stops once it has the keys.
    let _ = T::deserialize(Keys(&keys));
    keys.get()
}

/// A deserializer that records the keys of the struct asked of it, then
/// refuses it.
struct Keys<'a>(&'a std::cell::Cell<&'static [&'static str]>);

impl<'de> de::Deserializer<'de> for Keys<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("only a struct's keys are read"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.set(fields);
        Err(de::Error::custom("keys read"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

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
    let spec = keys_of::<luge_host::FunctionSpec>();
    page.push_str(&format!(
        "\n## `[[routes]]` and `[[functions]]`\n\n\
         A function on a route (`path`), or on none (a `[[functions]]` entry,\n\
         woken by its triggers): {}.\n",
        listed(spec)
    ));
    page.push_str(&format!(
        "\n## `[[chains]]`\n\n{}.\n",
        listed(keys_of::<luge_host::ChainSpec>())
    ));
    page.push_str(&format!(
        "\n## `[state]`\n\n{}.\n",
        listed(keys_of::<luge_host::config::StateSection>())
    ));
    page.push_str(&format!(
        "\n## `[telemetry]`\n\nBeside OpenTelemetry's environment variables, which win: {}.\n",
        listed(keys_of::<luge_telemetry::TelemetryTable>())
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

#[cfg(test)]
pub(crate) mod tests {
    /// The keys read are the struct's, and only a struct's.
    #[test]
    fn a_structs_keys_are_read() {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Two {
            first: u32,
            #[serde(rename = "second_key")]
            second: String,
            #[serde(skip)]
            hidden: u8,
        }
        assert_eq!(super::keys_of::<Two>(), ["first", "second_key"]);
        assert!(super::keys_of::<u32>().is_empty());
    }

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
}
