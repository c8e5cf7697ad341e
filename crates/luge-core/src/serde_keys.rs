//! What a config type reads, asked of serde's derive rather than written
//! twice: a struct's keys, and an internally tagged enum's types with each
//! type's keys. The book's references (luge.toml's, the runtime config's)
//! and a trigger kind's description of its settings are made from these,
//! so a key added to a type is a key in the book and in the errors.
//!
//! Nothing is deserialized: each probe hands the type a deserializer that
//! records what the derive names (the fields it passes to
//! `deserialize_struct`, or the names it lists when it refuses a variant
//! or a field), then stops.

use serde::de::{self, Visitor};

/// The keys a struct that derives `Deserialize` reads: the names serde's
/// derive hands `deserialize_struct` (every field not skipped, as the
/// file spells it); empty for anything that is not a struct.
pub fn of<T: de::DeserializeOwned>() -> &'static [&'static str] {
    let keys = std::cell::Cell::new(&[][..]);
    // Always an error: the deserializer stops once it has the keys.
    let _ = T::deserialize(Fields(&keys));
    keys.get()
}

/// One type of an internally tagged enum, as [`types`] finds it.
#[derive(Debug, PartialEq, Eq)]
pub struct Type {
    /// The tag's value, as the file spells it.
    pub name: &'static str,
    /// The keys beside the tag; `None` for a type read as any table,
    /// which Luge reads only to refuse it by name.
    pub keys: Option<&'static [&'static str]>,
}

/// The types of `T`, an enum tagged by the key `tag` whose variants refuse
/// unknown keys (`#[serde(tag = "...", deny_unknown_fields)]`), in the
/// enum's order; empty for a type that is not one.
pub fn types<T: de::DeserializeOwned>(tag: &'static str) -> Vec<Type> {
    // A tag no variant has (a NUL): refused with the variants' names.
    let Err(Probe::Names(names)) = T::deserialize(map(&[(tag, "\0")])) else {
        return Vec::new();
    };
    names
        .iter()
        .map(|&name| {
            // The variant with a key no type has: refused with its keys,
            // or taken, by a variant that reads any table.
            let keys = match T::deserialize(map(&[(tag, name), ("\0", "")])) {
                Err(Probe::Names(keys)) => Some(keys),
                _ => None,
            };
            Type { name, keys }
        })
        .collect()
}

/// A map of `entries`, for a probe.
fn map<'a>(
    entries: &'a [(&'static str, &'static str)],
) -> de::value::MapDeserializer<
    'static,
    std::iter::Copied<std::slice::Iter<'a, (&'static str, &'static str)>>,
    Probe,
> {
    de::value::MapDeserializer::new(entries.iter().copied())
}

/// A probe's answer: the names the derive listed when it refused a
/// variant or a key, or any other error.
#[derive(Debug)]
enum Probe {
    /// The variants, or the keys, the derive expected.
    Names(&'static [&'static str]),
    /// Anything else.
    Other,
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a probe of a config type's keys")
    }
}

impl std::error::Error for Probe {}

impl de::Error for Probe {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        Probe::Other
    }

    fn unknown_variant(_: &str, expected: &'static [&'static str]) -> Self {
        Probe::Names(expected)
    }

    fn unknown_field(_: &str, expected: &'static [&'static str]) -> Self {
        Probe::Names(expected)
    }
}

/// A deserializer that records the keys of the struct asked of it, then
/// refuses it.
struct Fields<'a>(&'a std::cell::Cell<&'static [&'static str]>);

impl<'de> de::Deserializer<'de> for Fields<'_> {
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

#[cfg(test)]
mod tests {
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
        assert_eq!(super::of::<Two>(), ["first", "second_key"]);
        assert!(super::of::<u32>().is_empty());
    }

    /// A tagged enum's types are read with their keys, a type that takes
    /// any table without them, and nothing of a type that is not one.
    #[test]
    fn a_tagged_enums_types_are_read() {
        #[derive(serde::Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
        #[allow(dead_code)]
        enum Store {
            Local {
                path: Option<String>,
            },
            RemoteServer {
                url: String,
                #[serde(default)]
                token: Option<String>,
            },
            Refused(std::collections::BTreeMap<String, String>),
        }
        let types = super::types::<Store>("type");
        assert_eq!(
            types,
            [
                super::Type {
                    name: "local",
                    keys: Some(&["path"])
                },
                super::Type {
                    name: "remote_server",
                    keys: Some(&["url", "token"])
                },
                super::Type {
                    name: "refused",
                    keys: None
                },
            ]
        );
        assert!(super::types::<Store>("kind").is_empty());
        assert!(super::types::<u32>("type").is_empty());
    }
}
