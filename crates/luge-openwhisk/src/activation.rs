//! The activation context OpenWhisk gives an action as `__OW_*`
//! variables: from the container's environment (`luge proxy`), from a run
//! body's top-level keys ([`crate::protocol::parse_run`]), read back here
//! where the executor needs them (the tenant, the action's own name).

/// The prefix of every OpenWhisk context variable.
pub const PREFIX: &str = "__OW_";

/// The activation's namespace (the tenant).
pub const NAMESPACE: &str = "__OW_NAMESPACE";
/// The action's full name, `/namespace/[package/]action`.
pub const ACTION_NAME: &str = "__OW_ACTION_NAME";
/// The activation's id.
pub const ACTIVATION_ID: &str = "__OW_ACTIVATION_ID";

/// The value of `key` in `env`, an activation's `__OW_*` variables.
pub fn get<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter()
        .find(|(k, _)| k == key)
        .map(|(_, value)| value.as_str())
}

/// The activation's OpenWhisk namespace (`__OW_NAMESPACE`), the tenant
/// whose share of admission places it takes.
pub fn namespace(env: &[(String, String)]) -> Option<&str> {
    get(env, NAMESPACE)
}

/// The action's full name (`__OW_ACTION_NAME`, `/namespace/[package/]action`)
/// split into its namespace and the rest; `None` when absent or not of
/// that form.
pub fn action_name(env: &[(String, String)]) -> Option<(&str, &str)> {
    get(env, ACTION_NAME)?
        .trim_start_matches('/')
        .split_once('/')
}

/// The `__OW_*` variables among `vars` (a container's own environment,
/// which OpenWhisk starts it with): what every action in it also sees.
pub fn container_env(vars: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
    vars.into_iter()
        .filter(|(key, _)| key.starts_with(PREFIX))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_context_is_read_by_name() {
        let e = env(&[
            ("__OW_NAMESPACE", "guest"),
            ("__OW_ACTION_NAME", "/guest/pkg/hello"),
            ("PATH", "/bin"),
        ]);
        assert_eq!(namespace(&e), Some("guest"));
        assert_eq!(action_name(&e), Some(("guest", "pkg/hello")));
        assert_eq!(action_name(&env(&[("__OW_ACTION_NAME", "bare")])), None);
        assert_eq!(namespace(&env(&[])), None);
        assert_eq!(
            container_env(e),
            env(&[
                ("__OW_NAMESPACE", "guest"),
                ("__OW_ACTION_NAME", "/guest/pkg/hello")
            ])
        );
    }
}
