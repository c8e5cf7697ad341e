//! What the outbound database tests (PostgreSQL, MySQL, Redis) share: the
//! example Spin app (actions/spin) served against a real server, the
//! luge.toml routes that run its component, and the checks every database
//! answers alike.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{Luge, serve_spin};
use crate::spin::{manifest, text, upstream};

/// A server as the example app reaches it.
pub struct Db {
    /// The app's route segment, and its variables' prefix: `pg`, `mysql`,
    /// `redis`.
    pub name: &'static str,
    /// `host:port`, what the app's grant names.
    pub host: String,
    /// The URL the app connects to.
    pub address: String,
}

impl Db {
    /// `luge serve --spin` of the example app, its state in `state`,
    /// `args` besides, reaching this server (its `NAME_host` and
    /// `NAME_address` variables, as Spin sets them).
    pub fn serve_app(&self, state: &Path, args: &[&str]) -> Luge {
        let prefix = self.name.to_uppercase();
        let (host, address) = (
            format!("SPIN_VARIABLE_{prefix}_HOST"),
            format!("SPIN_VARIABLE_{prefix}_ADDRESS"),
        );
        let upstream = upstream();
        let env = [
            ("SPIN_VARIABLE_UPSTREAM", upstream.as_str()),
            (host.as_str(), self.host.as_str()),
            (address.as_str(), self.address.as_str()),
        ];
        serve_spin(&manifest(), state, args, &env)
    }

    /// `POST /NAME/OPERATION` with `body`: the status and the answer.
    pub fn post(&self, luge: &Luge, operation: &str, body: &str) -> (u16, String) {
        text(
            luge,
            "POST",
            &format!("/{}/{operation}", self.name),
            body.as_bytes(),
        )
    }
}

/// What a hostile app tries on every database, and how each ends: `huge`
/// (a gigabyte selected) is an error, not the host's memory; the
/// `backend` component, which has no grant, reaches nothing; `password`
/// is in no log.
#[track_caller]
pub fn assert_bounded_and_granted(luge: &Luge, db: &Db, huge: &str, password: &str) {
    let (status, body) = db.post(luge, "query", huge);
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("larger than"), "{body}");
    let (status, body) = text(
        luge,
        "POST",
        &format!("/backend/{}/query", db.name),
        b"SELECT 1",
    );
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("not granted"), "{body}");
    let log = format!("{}{}", luge.stderr(), luge.stdout());
    assert!(!log.contains(password), "{log}");
}

/// luge.toml routes running the app's component, granted `scheme` to
/// 127.0.0.1:`port`: `/db/...` reaching `url` within 1.5 s, `/wrong/...`
/// reaching `wrong` (a wrong password). `variable` is the app's address
/// variable (`pg_address`).
pub fn toml_routes(scheme: &str, variable: &str, port: u16, url: &str, wrong: &str) -> String {
    let route = |path: &str, url: &str| {
        format!(
            "[[routes]]\npath = \"{path}\"\nmodule = \"spin-app.wasm\"\n\
             allowed_outbound_hosts = [\"{scheme}://127.0.0.1:{port}\"]\n\
             variables = {{ {variable} = \"{url}\" }}\n"
        )
    };
    route("/db/...", url) + "limits = { timeout_ms = 1500 }\n" + route("/wrong/...", wrong).as_str()
}

/// On [`toml_routes`]' routes: `sleep` (a statement that outlives the
/// route's time) ends with the request.
#[track_caller]
pub fn assert_ends_by_deadline(luge: &Luge, name: &str, sleep: &str) {
    let started = Instant::now();
    let (status, body) = text(luge, "POST", &format!("/db/{name}/query"), sleep.as_bytes());
    assert_ne!(status, 200, "{body}");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// On [`toml_routes`]' routes: a wrong password is refused and not
/// repeated, and the route answers on.
#[track_caller]
pub fn assert_wrong_password_refused(luge: &Luge, name: &str) {
    let (status, body) = text(luge, "POST", &format!("/wrong/{name}/query"), b"SELECT 1");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("ConnectionFailed"), "{body}");
    assert!(!body.contains("not-the-password"), "{body}");
    let (status, body) = text(
        luge,
        "POST",
        &format!("/db/{name}/query"),
        b"SELECT 'still' AS here",
    );
    assert_eq!(
        (status, body.as_str()),
        (200, "here:DbDataType::Str\nDbValue::Str(\"still\")")
    );
}
