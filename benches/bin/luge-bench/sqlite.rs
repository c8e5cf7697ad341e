//! `sqlite`: what a SQLite insert and select cost from a function, beside
//! the same statements from native code. The Spin app (actions/spin,
//! `spin:sqlite` through `spin-sdk` 7) on a luge.toml route granted its
//! `default` database, at one connection: its hello path (no database,
//! the request's own cost), `POST /sql/insert/TEXT` (open the database,
//! `CREATE TABLE IF NOT EXISTS`, one parameterised `INSERT`, the rowid)
//! and `POST /sql` with a `SELECT` of one row by key. Natively, in this
//! process: the same statements through `luge-sqlite` (the host's own
//! library: a connection opened per operation, as a function opens one
//! per request, taken from the database's idle ones), and through plain
//! `rusqlite` on one open connection (SQLite's own floor).

use std::time::{Duration, Instant};

use luge_benches::load::Target;
use luge_benches::wasm;

use crate::Report;
use crate::Setup;
use crate::http_proxy::{LUGE_MARKER, load_columns, luge_serve, luge_site, measure, start};

const CREATE: &str =
    "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)";
const INSERT: &str = "INSERT INTO notes (text) VALUES (?)";
const SELECT: &str = "SELECT id, text FROM notes WHERE id = 1";

/// `op` run for `window`: operations per second, p50 and p99 in µs.
fn native(window: Duration, mut op: impl FnMut()) -> (f64, f64, f64) {
    let mut times = Vec::new();
    let started = Instant::now();
    while started.elapsed() < window {
        let t = Instant::now();
        op();
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() as f64 - 1.0) * q) as usize];
    (
        times.len() as f64 / started.elapsed().as_secs_f64(),
        at(0.5),
        at(0.99),
    )
}

pub(crate) fn sqlite(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("spin-app.wasm"), wasm("spin-app"))?;
    luge_site(
        dir.path(),
        "[[routes]]\npath = \"/db/...\"\nmodule = \"spin-app.wasm\"\nsqlite_databases = [\"default\"]\n\
         variables = { greeting = \"Hello\" }\n",
    )?;
    let luge = start(luge_serve(setup, dir.path(), "state", &[])?, LUGE_MARKER)?;
    let mut columns = load_columns("where");
    columns.insert(1, "operation");
    let mut rows = Vec::new();
    let cases: [(&str, &str, &[u8], Option<usize>); 3] = [
        ("hello (no database)", "/db/hello", b"", None),
        ("insert", "/db/sql/insert/a-note-of-some-length", b"", None),
        ("select one row", "/db/sql", SELECT.as_bytes(), None),
    ];
    for (what, path, body, len) in cases {
        let method = if body.is_empty() && what.starts_with("hello") {
            hyper::Method::GET
        } else {
            hyper::Method::POST
        };
        let target = Target {
            addr: luge.addr,
            method,
            path: path.to_owned(),
            body: bytes::Bytes::copy_from_slice(body),
            expect_len: len,
            headers: Vec::new(),
        };
        let (_, row) = measure(&luge, &target, 1, window);
        rows.push([vec!["luge (function)".to_owned(), what.to_owned()], row].concat());
    }

    rows.extend(natively(window)?);
    Ok(Report {
        name: "sqlite",
        title: "A SQLite insert and select from a function, and the same statements natively"
            .into(),
        columns,
        rows,
        x_desc: "",
        y_desc: "",
        series: Vec::new(),
        notes: format!(
            "The Spin app (actions/spin, spin-sdk 7, spin:sqlite@3.1.0) on a luge.toml route of `luge serve` (this build) granted its `default` database (a file in the state directory, WAL, Luge's hardening: authorizer, limits, deadline); one closed-loop keep-alive client, {} ms per point after a 500 ms warm-up; each request instantiates the component and opens the database (an idle hardened connection kept from an earlier request, up to 4 per database). The insert request runs `CREATE TABLE IF NOT EXISTS` and one parameterised `INSERT` (autocommit); the select reads one row by key. Natively, in the bench process for the same time: `luge-sqlite` (the host's library, a connection opened per operation from the idle ones, the same statements) and plain `rusqlite` 0.43 on one open connection (WAL, a prepared select). Server CPU from /proc/PID/stat (10 ms ticks).",
            window.as_millis()
        ),
    })
}

/// The same statements natively, in this process for `window` each: the
/// host's library with a connection per operation, and plain rusqlite on
/// one open connection; their rows.
fn natively(window: Duration) -> anyhow::Result<Vec<Vec<String>>> {
    // Natively: the host's library, a connection per operation.
    let native_dir = tempfile::tempdir()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let databases = luge_sqlite::Databases::new(Some(native_dir.path().to_owned()));
    let grant = vec!["default".to_owned()];
    let later = || Instant::now() + Duration::from_secs(10);
    let mut native_rows = Vec::new();
    let per_op = |statements: &[(&str, Vec<luge_sqlite::Value>)]| {
        runtime.block_on(async {
            let c = databases
                .open("default", &grant, "bench", later())
                .await
                .expect("open");
            for (sql, params) in statements {
                c.execute((*sql).to_owned(), params.clone(), later(), 1 << 20)
                    .await
                    .expect("statement");
            }
        })
    };
    let text = || luge_sqlite::Value::Text("a-note-of-some-length".into());
    native_rows.push((
        "luge-sqlite, open per operation",
        "insert",
        native(window, || {
            per_op(&[(CREATE, vec![]), (INSERT, vec![text()])])
        }),
    ));
    native_rows.push((
        "luge-sqlite, open per operation",
        "select one row",
        native(window, || per_op(&[(SELECT, vec![])])),
    ));
    // Plain rusqlite, one open connection (WAL, as Luge's).
    let plain = rusqlite::Connection::open(native_dir.path().join("plain.db"))?;
    plain.pragma_update(None, "journal_mode", "WAL")?;
    plain.execute(CREATE, [])?;
    native_rows.push((
        "rusqlite, one open connection",
        "insert",
        native(window, || {
            plain
                .execute(INSERT, ["a-note-of-some-length"])
                .expect("insert");
        }),
    ));
    let mut select = plain.prepare(SELECT)?;
    native_rows.push((
        "rusqlite, one open connection",
        "select one row",
        native(window, || {
            let _: Vec<(i64, String)> = select
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .expect("select")
                .collect::<Result<_, _>>()
                .expect("rows");
        }),
    ));
    let mut rows = Vec::new();
    for (where_, what, (rate, p50, p99)) in native_rows {
        rows.push(vec![
            where_.to_owned(),
            what.to_owned(),
            "-".to_owned(),
            format!("{rate:.0}"),
            format!("{p50:.0}"),
            format!("{p99:.0}"),
            "-".to_owned(),
            "-".to_owned(),
            "0".to_owned(),
        ]);
    }
    Ok(rows)
}
