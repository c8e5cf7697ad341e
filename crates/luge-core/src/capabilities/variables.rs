//! The variables slice: `config.variables` annotations (Spin's component
//! `variables`, luge.toml's `variables`), what a component reads through
//! `wasi:config/store` and Spin's `variables` interface. Values may be
//! secrets: nothing here prints one.

use serde_json::Value;

use super::error::{GrantError, bad};

/// Most configuration variables one function may have (`config.variables`).
pub const MAX_VARIABLES: usize = 256;
/// Longest configuration variable name, bytes.
pub const MAX_VARIABLE_NAME_BYTES: usize = 128;
/// Largest configuration variable value, bytes (a certificate fits).
pub const MAX_VARIABLE_VALUE_BYTES: usize = 16 << 10;

/// Configuration variables by name. Values may be secrets: `Debug` shows
/// the names only, so no log line carries a value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Variables(pub Vec<(String, String)>);

/// Why a variable, or a set of them, was refused. Never holds a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VariableError {
    /// A name outside Spin's rule.
    #[error(
        "invalid variable name {0:?}: lowercase letters, digits and '_', starting with a letter, at most {MAX_VARIABLE_NAME_BYTES} bytes"
    )]
    Name(String),
    /// A value over [`MAX_VARIABLE_VALUE_BYTES`].
    #[error("variable {0:?} is longer than {MAX_VARIABLE_VALUE_BYTES} bytes")]
    TooLong(String),
    /// More than [`MAX_VARIABLES`].
    #[error("at most {MAX_VARIABLES} variables")]
    TooMany,
}

impl Variables {
    /// `pairs` as variables, if there are at most [`MAX_VARIABLES`] and
    /// each passes [`check_variable`]: the one check of every way variables
    /// arrive (annotations, configs, uploads, Spin manifests).
    pub fn checked(pairs: Vec<(String, String)>) -> Result<Self, VariableError> {
        if pairs.len() > MAX_VARIABLES {
            return Err(VariableError::TooMany);
        }
        for (name, value) in &pairs {
            check_variable(name, value)?;
        }
        Ok(Self(pairs))
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl std::fmt::Debug for Variables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| name))
            .finish()
    }
}

/// Checks one configuration variable: a name of lowercase ASCII letters,
/// digits and `_`, starting with a letter (Spin's rule, so a Spin app's
/// names carry over), within [`MAX_VARIABLE_NAME_BYTES`]; a value within
/// [`MAX_VARIABLE_VALUE_BYTES`].
pub fn check_variable(name: &str, value: &str) -> Result<(), VariableError> {
    let mut chars = name.chars();
    let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if !starts_with_letter
        || name.len() > MAX_VARIABLE_NAME_BYTES
        || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(VariableError::Name(name.to_owned()));
    }
    if value.len() > MAX_VARIABLE_VALUE_BYTES {
        return Err(VariableError::TooLong(name.to_owned()));
    }
    Ok(())
}

/// A `{{ name }}` template that cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{{` with no `}}` after it.
    #[error("{0:?}: an unclosed {{{{")]
    Unclosed(String),
    /// A name no variable has.
    #[error("{template:?}: no variable {name:?}")]
    Unknown {
        /// The template.
        template: String,
        /// The name it asked for.
        name: String,
    },
}

/// `template` with each `{{ name }}` replaced by `lookup(name)` (Spin's
/// template syntax, as in `allowed_outbound_hosts` and component
/// variables); names are trimmed, nothing else is interpreted.
pub fn expand<'a>(
    template: &str,
    lookup: impl Fn(&str) -> Option<&'a str>,
) -> Result<String, TemplateError> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| TemplateError::Unclosed(template.to_owned()))?;
        let name = after[..end].trim();
        let value = lookup(name).ok_or_else(|| TemplateError::Unknown {
            template: template.to_owned(),
            name: name.to_owned(),
        })?;
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// This slice's annotation key: `config.variables`, an object of strings.
/// Whether `key` was this slice's.
pub(super) fn annotate(out: &mut Variables, key: &str, value: &Value) -> Result<bool, GrantError> {
    if key != "config.variables" {
        return Ok(false);
    }
    let map = value
        .as_object()
        .ok_or_else(|| bad(key, "expected an object of strings"))?;
    let mut pairs = std::mem::take(&mut out.0);
    for (name, value) in map {
        let value = value
            .as_str()
            .ok_or_else(|| bad(key, format!("{name:?}: expected a string")))?;
        pairs.push((name.clone(), value.to_owned()));
    }
    *out = Variables::checked(pairs).map_err(|e| bad(key, e.to_string()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::capabilities::Annotations;

    #[test]
    fn variables_are_checked_bounded_and_never_shown() {
        let ann = Annotations::parse(&json!({
            "config.variables": {"greeting": "hi", "api_key": "s3cret"}
        }))
        .unwrap();
        assert_eq!(ann.variables.0.len(), 2);
        assert_eq!(ann.variables.get("api_key"), Some("s3cret"));
        let shown = format!("{ann:?}");
        assert!(
            shown.contains("api_key") && !shown.contains("s3cret"),
            "{shown}"
        );
        for bad in [
            json!({"config.variables": {"Upper": "x"}}),
            json!({"config.variables": {"1st": "x"}}),
            json!({"config.variables": {"a-b": "x"}}),
            json!({"config.variables": {"a": 1}}),
            json!({"config.variables": {"a": "x".repeat(MAX_VARIABLE_VALUE_BYTES + 1)}}),
            json!({"config.variables": ["a"]}),
            json!({"config.nothing": 1}),
        ] {
            assert!(Annotations::parse(&bad).is_err(), "{bad}");
        }
        let many: serde_json::Map<String, Value> = (0..=MAX_VARIABLES)
            .map(|i| (format!("v{i}"), json!("x")))
            .collect();
        assert!(Annotations::parse(&json!({ "config.variables": many })).is_err());
        // A refusal names the variable, never its value.
        let long = check_variable("secret", &"p".repeat(MAX_VARIABLE_VALUE_BYTES + 1));
        assert_eq!(long, Err(VariableError::TooLong("secret".into())));
    }

    #[test]
    fn templates_expand_by_name() {
        let vars = Variables(vec![("host".into(), "db.example".into())]);
        let lookup = |name: &str| vars.get(name);
        assert_eq!(
            expand("postgres://{{ host }}:{{host}}", lookup).unwrap(),
            "postgres://db.example:db.example"
        );
        assert!(matches!(
            expand("{{ nope }}", lookup),
            Err(TemplateError::Unknown { .. })
        ));
        assert!(matches!(
            expand("x{{ host", lookup),
            Err(TemplateError::Unclosed(_))
        ));
    }
}
