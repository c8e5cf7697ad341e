//! The SQLite slice end to end: `spin:sqlite@3.1.0` from the Spin app
//! (actions/spin, `spin-sdk` 7's `sqlite` module) under `luge serve
//! --spin` and on luge.toml routes; the app's `default` database kept
//! across a restart; named databases from the runtime config; and what a
//! hostile function tries (an ungranted label, another file, a huge
//! result set, a statement that never ends).

use crate::common::*;
use crate::spin::{fresh_app, serve_app, text};

/// `POST path` with `body`: the status and the body as text.
fn post(luge: &Luge, path: &str, body: &str) -> (u16, String) {
    text(luge, "POST", path, body.as_bytes())
}

/// Asserts that `POST path` failed with `error` in the body.
#[track_caller]
fn assert_refused(luge: &Luge, path: &str, body: &str, error: &str) {
    let (status, text) = post(luge, path, body);
    assert_eq!(status, 500, "{path} {body}: {text}");
    assert!(text.contains(error), "{path} {body}: {text}");
}

#[test]
fn a_spin_apps_database_is_its_own_and_kept_across_restarts() {
    let Some((luge, state_dir, upstream)) = fresh_app() else {
        return;
    };

    // Parameters, the rowid and the changed rows.
    assert_eq!(post(&luge, "/sql/insert/hello", ""), (200, "1 1".into()));
    assert_eq!(
        post(&luge, "/sql/insert/it's%20'quoted'", ""),
        (200, "2 1".into())
    );
    let select = "SELECT id, text, length(text) AS n, 0.5 AS r, NULL AS z FROM notes ORDER BY id";
    let expected = "id|text|n|r|z\n1|hello|5|0.5|NULL\n2|it's%20'quoted'|15|0.5|NULL";
    assert_eq!(post(&luge, "/sql", select), (200, expected.into()));

    // What the manifest does not grant: another label, and the backend
    // component (no sqlite_databases) even for `default`.
    assert_refused(&luge, "/sql?db=other", "SELECT 1", "AccessDenied");
    assert_refused(&luge, "/backend/sql", "SELECT 1", "AccessDenied");

    // Nothing beyond the database file.
    let outside = state_dir.path().join("outside.db");
    for statement in [
        format!("ATTACH DATABASE '{}' AS x", outside.display()),
        format!("VACUUM INTO '{}'", outside.display()),
        "PRAGMA writable_schema = ON".to_owned(),
        "PRAGMA max_page_count = 4294967294".to_owned(),
        "PRAGMA database_list".to_owned(),
    ] {
        assert_refused(&luge, "/sql", &statement, "authoriz");
    }
    assert!(!outside.exists());

    // A gigabyte selected: an error, not the host's memory.
    assert_refused(
        &luge,
        "/sql",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 1000000) \
         SELECT i, zeroblob(1000) FROM n",
        "result set is larger than",
    );
    // And the app still answers.
    assert_eq!(
        post(&luge, "/sql", "SELECT count(*) AS c FROM notes"),
        (200, "c\n2".into())
    );
    drop(luge);

    // The database outlives the process, in the state directory, as the
    // app's (`spin.APP`).
    let file = state_dir.path().join("sqlite/spin%2Eluge-spin-app.db");
    assert!(file.exists(), "{}", file.display());
    let luge = serve_app(state_dir.path(), &upstream);
    assert_eq!(post(&luge, "/sql", select), (200, expected.into()));
}

#[test]
fn luge_toml_routes_open_their_own_and_the_runtime_configs_databases() {
    wasmtime_only!();
    let state_dir = tempfile::tempdir().unwrap();
    let rc_dir = tempfile::tempdir().unwrap();
    let rc = rc_dir.path().join("rc.toml");
    std::fs::write(
        &rc,
        "[sqlite_database.shared]\ntype = \"spin\"\npath = \"data/shared.db\"\n",
    )
    .unwrap();
    let routes = "\
        [[routes]]\npath = \"/one/...\"\nmodule = \"spin-app.wasm\"\n\
        sqlite_databases = [\"default\", \"shared\"]\nlimits = { timeout_ms = 1500 }\n\
        [[routes]]\npath = \"/two/...\"\nmodule = \"spin-app.wasm\"\n\
        sqlite_databases = [\"default\"]\n\
        [[routes]]\npath = \"/none/...\"\nmodule = \"spin-app.wasm\"\n";
    let site = Site::new(&["spin-app"], routes);
    let args = [
        "--state-dir",
        path_str(state_dir.path()),
        "--runtime-config-file",
        path_str(&rc),
    ];
    let luge = site.start(&args);

    // Each route's `default` is its own.
    assert_eq!(post(&luge, "/one/sql/insert/mine", ""), (200, "1 1".into()));
    assert_refused(&luge, "/two/sql", "SELECT * FROM notes", "no such table");
    assert_eq!(
        post(&luge, "/two/sql/insert/theirs", ""),
        (200, "1 1".into())
    );
    assert_eq!(
        post(&luge, "/one/sql", "SELECT text FROM notes"),
        (200, "text\nmine".into())
    );
    // The named database: the route granted it shares it; the others
    // are refused; a route with no grant opens nothing.
    assert_eq!(
        post(&luge, "/one/sql?db=shared", "CREATE TABLE t (x)").0,
        200
    );
    assert!(rc_dir.path().join("data/shared.db").exists());
    assert_refused(&luge, "/two/sql?db=shared", "SELECT 1", "AccessDenied");
    assert_refused(&luge, "/none/sql", "SELECT 1", "AccessDenied");

    // A statement that never ends ends at the route's deadline, and the
    // connection's database is free again after it.
    let started = std::time::Instant::now();
    let (status, body) = post(
        &luge,
        "/one/sql",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n",
    );
    assert_ne!(status, 200, "{body}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        post(&luge, "/one/sql", "SELECT count(*) AS c FROM notes"),
        (200, "c\n1".into())
    );
    drop(luge);

    // A granted label no runtime config defines stops the start, by name.
    site.write_config(&routes.replace("\"shared\"", "\"missing\""));
    let error = site.try_start(&args).err().unwrap();
    assert!(
        error.contains("sqlite_databases names \"missing\""),
        "{error}"
    );
}

/// Temporary tables count against a bound as the database does, and what
/// a request makes temporary ends with it: the next request finds none,
/// and the server holds no temporary file of it afterwards.
#[test]
fn temporary_tables_are_bounded_and_end_with_their_request() {
    let Some((luge, _state_dir, _upstream)) = fresh_app() else {
        return;
    };
    // A deleted file the server holds open (SQLite's temporary files are).
    let deleted = || {
        std::fs::read_dir(format!("/proc/{}/fd", luge.pid()))
            .map(|fds| {
                fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                    .filter(|target| target.to_string_lossy().ends_with("(deleted)"))
                    .count()
            })
            .unwrap_or(0)
    };
    let before = deleted();
    // One request fills a temporary table past the bound: refused as full.
    let (status, body) = post(
        &luge,
        "/sql",
        "CREATE TEMP TABLE t AS WITH RECURSIVE n(i) AS \
         (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) \
         SELECT randomblob(1000000) AS b FROM n",
    );
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("DatabaseFull"), "{body}");
    // A temporary table that fits ends with its request too: the next
    // requests see none.
    assert_eq!(post(&luge, "/sql", "CREATE TEMP TABLE small (x)").0, 200);
    for _ in 0..3 {
        assert_eq!(
            post(
                &luge,
                "/sql",
                "SELECT count(*) AS c FROM sqlite_temp_master"
            ),
            (200, "c\n0".into())
        );
    }
    assert!(
        deleted() <= before,
        "{} deleted files held, {before} before",
        deleted()
    );
}
