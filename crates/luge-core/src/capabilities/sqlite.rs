//! The SQLite slice: `sqlite.databases` (luge.toml's and uploads'
//! `sqlite_databases`, a Spin component's `sqlite_databases`), the
//! databases a function may open by label, and whose its own `default`
//! database is. Opening and bounding them is `luge-sqlite`'s; serving
//! `spin:sqlite` is each engine's.

use serde_json::Value;

use super::error::{GrantError, bad};

/// Most database labels one function may be granted.
pub const MAX_SQLITE_GRANTS: usize = 64;

const KEY: &str = "sqlite.databases";

/// The databases a function may open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SqliteGrant {
    /// Labels it may open (`default`, or a database of the runtime
    /// config); none by default.
    pub databases: Vec<String>,
    /// Whose `default` database it opens: a function's name, or a Spin
    /// app's (`spin.APP`, shared by its components). Set by the host that
    /// names the function (a route, an upload, a Spin app); `None`, as for
    /// an OpenWhisk action, where names are not unique across tenants: no
    /// `default` database at all.
    pub owner: Option<String>,
}

impl SqliteGrant {
    /// Whether any database is granted.
    pub fn is_empty(&self) -> bool {
        self.databases.is_empty()
    }
}

/// This slice's annotation key: `sqlite.databases`, a list of labels.
/// Whether `key` was this slice's.
pub(super) fn annotate(
    out: &mut Vec<String>,
    key: &str,
    value: &Value,
) -> Result<bool, GrantError> {
    if key != KEY {
        return Ok(false);
    }
    let list = value
        .as_array()
        .ok_or_else(|| bad(key, "expected a list"))?;
    for label in list {
        let label = label.as_str().ok_or_else(|| bad(key, "expected strings"))?;
        out.push(label.to_owned());
    }
    Ok(true)
}

/// Whether `label` may name a database: 1-64 letters, digits, `_` or
/// `-` (Spin's labels are identifiers).
pub fn valid_label(label: &str) -> bool {
    (1..=64).contains(&label.len())
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `requested` checked: at most [`MAX_SQLITE_GRANTS`], each a
/// [`valid_label`], duplicates dropped; no owner yet.
pub(super) fn grant(requested: &[String]) -> Result<SqliteGrant, GrantError> {
    if requested.len() > MAX_SQLITE_GRANTS {
        return Err(bad(KEY, format!("at most {MAX_SQLITE_GRANTS} databases")));
    }
    let mut databases: Vec<String> = Vec::with_capacity(requested.len());
    for label in requested {
        if !valid_label(label) {
            return Err(bad(
                KEY,
                format!("{label:?}: 1-64 letters, digits, '_' or '-'"),
            ));
        }
        if !databases.contains(label) {
            databases.push(label.clone());
        }
    }
    Ok(SqliteGrant {
        databases,
        owner: None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::capabilities::{Annotations, Capabilities};

    #[test]
    fn labels_are_checked_and_bounded() {
        let grant = |v| Capabilities::grant(&Annotations::parse(&v).unwrap(), None);
        let granted = grant(json!({"sqlite.databases": ["default", "orders", "default"]}))
            .unwrap()
            .sqlite;
        assert_eq!(granted.databases, vec!["default", "orders"]);
        assert_eq!(granted.owner, None);
        for bad in ["", "../x", "a b", "x.db"] {
            assert!(
                grant(json!({ "sqlite.databases": [bad] })).is_err(),
                "{bad}"
            );
        }
        assert!(Annotations::parse(&json!({"sqlite.databases": "default"})).is_err());
        let many: Vec<_> = (0..=super::MAX_SQLITE_GRANTS)
            .map(|i| format!("d{i}"))
            .collect();
        assert!(grant(json!({ "sqlite.databases": many })).is_err());
    }
}
