//! The shared-state slice: `state.namespaces` (luge.toml's and uploads'
//! `state`, a Spin component's `key_value_stores`), the namespaces a
//! function may use besides its private one, and `state.global_stores`,
//! the stores (namespaces, or `default`) it reaches on the global tier by
//! their plain label (a Spin runtime config's `[key_value_store.NAME]
//! type = "redis"`). What a key may be and how the tiers answer is
//! [`crate::state`]'s.

use serde_json::Value;

use super::error::{GrantError, bad};

/// Most state namespaces one function may be granted.
pub const MAX_STATE_GRANTS: usize = 64;

const KEY: &str = "state.namespaces";
const GLOBAL_KEY: &str = "state.global_stores";

/// What this slice reads from annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requested {
    /// `state.namespaces`.
    pub namespaces: Vec<String>,
    /// `state.global_stores`.
    pub global_stores: Vec<String>,
}

/// This slice's annotation keys: `state.namespaces` and
/// `state.global_stores`, lists of strings. Whether `key` was this
/// slice's.
pub(super) fn annotate(out: &mut Requested, key: &str, value: &Value) -> Result<bool, GrantError> {
    let out = match key {
        KEY => &mut out.namespaces,
        GLOBAL_KEY => &mut out.global_stores,
        _ => return Ok(false),
    };
    let list = value
        .as_array()
        .ok_or_else(|| bad(key, "expected a list"))?;
    for ns in list {
        let ns = ns.as_str().ok_or_else(|| bad(key, "expected strings"))?;
        out.push(ns.to_owned());
    }
    Ok(true)
}

/// `requested`'s global stores checked: each `default` or a valid
/// namespace, at most [`MAX_STATE_GRANTS`].
pub(super) fn grant_global(requested: &[String]) -> Result<Vec<String>, GrantError> {
    if requested.len() > MAX_STATE_GRANTS {
        return Err(bad(
            GLOBAL_KEY,
            format!("at most {MAX_STATE_GRANTS} stores"),
        ));
    }
    if let Some(label) = requested.iter().find(|label| {
        label.as_str() != crate::keyvalue::DEFAULT_BUCKET && !crate::state::valid_namespace(label)
    }) {
        return Err(bad(GLOBAL_KEY, format!("{label:?} is not a store label")));
    }
    Ok(requested.to_vec())
}

/// `requested` checked: at most [`MAX_STATE_GRANTS`], each a valid
/// namespace.
pub(super) fn grant(requested: &[String]) -> Result<Vec<String>, GrantError> {
    if requested.len() > MAX_STATE_GRANTS {
        return Err(bad(KEY, format!("at most {MAX_STATE_GRANTS} namespaces")));
    }
    if let Some(ns) = requested
        .iter()
        .find(|ns| !crate::state::valid_namespace(ns))
    {
        return Err(bad(
            KEY,
            format!("{ns:?}: 1-64 letters, digits, '.', '_' or '-'"),
        ));
    }
    Ok(requested.to_vec())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::capabilities::{Annotations, Capabilities};

    #[test]
    fn namespaces_are_checked_and_bounded() {
        let grant = |v| Capabilities::grant(&Annotations::parse(&v).unwrap(), None);
        assert_eq!(
            grant(json!({"state.namespaces": ["shared", "a.b-c_d"]}))
                .unwrap()
                .state,
            vec!["shared", "a.b-c_d"]
        );
        assert!(grant(json!({"state.namespaces": ["~me"]})).is_err());
        assert!(grant(json!({"state.namespaces": [""]})).is_err());
        let many: Vec<_> = (0..=super::MAX_STATE_GRANTS)
            .map(|i| format!("n{i}"))
            .collect();
        assert!(grant(json!({ "state.namespaces": many })).is_err());
    }
}
