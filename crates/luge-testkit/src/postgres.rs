//! A real PostgreSQL server for tests and benchmarks of outbound
//! PostgreSQL: a fresh cluster (`initdb`) in a temporary directory,
//! started on a free loopback port with a password-protected user, and
//! stopped (with its directory removed) when dropped. `./scripts/setup.sh`
//! installs it (Debian's `postgresql`). PostgreSQL refuses to run as
//! root: under root, the cluster belongs to `nobody`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::server::{self, ServerError};

const NAME: &str = "postgres";
const HINT: &str = "./scripts/setup.sh installs it";

/// A running PostgreSQL on 127.0.0.1.
#[derive(Debug)]
pub struct PostgresServer {
    child: Child,
    _dir: tempfile::TempDir,
    /// Its port.
    pub port: u16,
    /// The user's name.
    pub user: &'static str,
    /// The user's password.
    pub password: &'static str,
}

/// The newest installed PostgreSQL's `bin` directory.
fn bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// `program` with `args`, as `nobody` when this process is root.
fn command(program: &Path, as_nobody: bool) -> Command {
    if as_nobody {
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(program);
        command
    } else {
        Command::new(program)
    }
}

impl PostgresServer {
    /// Starts one on a free port, with the user `luge` (password
    /// `luge-pw`, SCRAM) owning the database `luge`.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(None)
    }

    /// [`PostgresServer::start`], offering TLS with the certificate and
    /// key `cert_pem` and `key_pem` (`ssl = on`; plain sessions still
    /// allowed).
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Result<Self, ServerError> {
        Self::start_with(Some((cert_pem, key_pem)))
    }

    fn start_with(tls: Option<(&str, &str)>) -> Result<Self, ServerError> {
        let bin = bin_dir().ok_or(ServerError::NotInstalled {
            server: "PostgreSQL under /usr/lib/postgresql",
            hint: HINT,
        })?;
        let dir = tempfile::tempdir().map_err(ServerError::setup(NAME))?;
        let root = rustix::process::geteuid().is_root();
        let (user, password) = ("luge", "luge-pw");
        let pwfile = dir.path().join("pw");
        server::write(NAME, &pwfile, password)?;
        if root {
            server::run(
                Command::new("chown")
                    .args(["-R", "nobody:nogroup"])
                    .arg(dir.path()),
                HINT,
            )?;
        }
        let data = dir.path().join("data");
        server::run(
            command(&bin.join("initdb"), root)
                .arg("-D")
                .arg(&data)
                .args([
                    "-U",
                    user,
                    "--auth=scram-sha-256",
                    "--no-sync",
                    "-E",
                    "UTF8",
                ])
                .arg(format!("--pwfile={}", pwfile.display())),
            HINT,
        )?;
        let port = server::free_port(NAME)?;
        let mut ssl = Vec::new();
        if let Some((cert, key)) = tls {
            // The server reads them as its own user; the key private.
            let (cert_file, key_file) = (data.join("server.crt"), data.join("server.key"));
            server::write(NAME, &cert_file, cert)?;
            server::write(NAME, &key_file, key)?;
            std::fs::set_permissions(
                &key_file,
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            )
            .map_err(ServerError::setup(NAME))?;
            if root {
                server::run(
                    Command::new("chown")
                        .arg("nobody:nogroup")
                        .arg(&cert_file)
                        .arg(&key_file),
                    HINT,
                )?;
            }
            ssl = vec![
                "-c".to_owned(),
                "ssl=on".to_owned(),
                "-c".to_owned(),
                format!("ssl_cert_file={}", cert_file.display()),
                "-c".to_owned(),
                format!("ssl_key_file={}", key_file.display()),
            ];
        }
        let child = server::spawn(
            command(&bin.join("postgres"), root)
                .arg("-D")
                .arg(&data)
                .args(&ssl)
                .args(["-p", &port.to_string(), "-h", "127.0.0.1", "-F"])
                .arg("-k")
                .arg(dir.path())
                .args(["-c", "max_connections=200", "-c", "shared_buffers=16MB"])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            HINT,
        )?;
        // Killed when dropped, should it not start.
        let mut this = Self {
            child,
            _dir: dir,
            port,
            user,
            password,
        };
        server::wait_serving(NAME, &mut this.child, port, Duration::from_secs(30))?;
        // The database named after the user, as clients default to it.
        server::run(
            command(&bin.join("createdb"), root)
                .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", user, user])
                .env("PGPASSWORD", password),
            HINT,
        )?;
        Ok(this)
    }

    /// `postgres://luge:luge-pw@127.0.0.1:PORT/luge`.
    pub fn url(&self) -> String {
        format!(
            "postgres://{}:{}@127.0.0.1:{}/{}",
            self.user, self.password, self.port, self.user
        )
    }

    /// A function's grant to reach it (`postgres://127.0.0.1:PORT`).
    pub fn grants(&self) -> luge_core::capabilities::AllowedHosts {
        crate::grants(&[&format!("postgres://127.0.0.1:{}", self.port)])
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
