//! A real PostgreSQL server for tests and benchmarks of outbound
//! PostgreSQL: a fresh cluster (`initdb`) in a temporary directory,
//! started on a free loopback port with a password-protected user, and
//! stopped (with its directory removed) when dropped. `./scripts/setup.sh`
//! installs it (Debian's `postgresql`). PostgreSQL refuses to run as
//! root: under root, the cluster belongs to `nobody`.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why a PostgreSQL server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum PostgresError {
    /// No PostgreSQL binaries.
    #[error("no PostgreSQL under /usr/lib/postgresql (./scripts/setup.sh installs it)")]
    NotInstalled,
    /// A step failed.
    #[error("{0}")]
    Step(String),
    /// It did not accept connections in time.
    #[error("postgres did not start on port {0}")]
    NotListening(u16),
}

/// A running PostgreSQL on 127.0.0.1.
#[derive(Debug)]
pub struct PostgresServer {
    child: Child,
    dir: tempfile::TempDir,
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
    pub fn start() -> Result<Self, PostgresError> {
        Self::start_with(None)
    }

    /// [`PostgresServer::start`], offering TLS with the certificate and
    /// key `cert_pem` and `key_pem` (`ssl = on`; plain sessions still
    /// allowed).
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Result<Self, PostgresError> {
        Self::start_with(Some((cert_pem, key_pem)))
    }

    fn start_with(tls: Option<(&str, &str)>) -> Result<Self, PostgresError> {
        let bin = bin_dir().ok_or(PostgresError::NotInstalled)?;
        let step =
            |what: &str, e: &dyn std::fmt::Display| PostgresError::Step(format!("{what}: {e}"));
        let dir = tempfile::tempdir().map_err(|e| step("temp dir", &e))?;
        let root = rustix::process::geteuid().is_root();
        let (user, password) = ("luge", "luge-pw");
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, password).map_err(|e| step("password file", &e))?;
        if root {
            let status = Command::new("chown")
                .args(["-R", "nobody:nogroup"])
                .arg(dir.path())
                .status()
                .map_err(|e| step("chown", &e))?;
            if !status.success() {
                return Err(PostgresError::Step("chown failed".into()));
            }
        }
        let data = dir.path().join("data");
        let out = command(&bin.join("initdb"), root)
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
            .arg(format!("--pwfile={}", pwfile.display()))
            .output()
            .map_err(|e| step("initdb", &e))?;
        if !out.status.success() {
            return Err(PostgresError::Step(format!(
                "initdb: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| step("port", &e))?
            .port();
        let mut ssl = Vec::new();
        if let Some((cert, key)) = tls {
            // The server reads them as its own user; the key private.
            let (cert_file, key_file) = (data.join("server.crt"), data.join("server.key"));
            std::fs::write(&cert_file, cert).map_err(|e| step("certificate", &e))?;
            std::fs::write(&key_file, key).map_err(|e| step("key", &e))?;
            std::fs::set_permissions(
                &key_file,
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            )
            .map_err(|e| step("key mode", &e))?;
            if root {
                let status = Command::new("chown")
                    .arg("nobody:nogroup")
                    .arg(&cert_file)
                    .arg(&key_file)
                    .status()
                    .map_err(|e| step("chown", &e))?;
                if !status.success() {
                    return Err(PostgresError::Step("chown failed".into()));
                }
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
        let child = command(&bin.join("postgres"), root)
            .arg("-D")
            .arg(&data)
            .args(&ssl)
            .args(["-p", &port.to_string(), "-h", "127.0.0.1", "-F"])
            .arg("-k")
            .arg(dir.path())
            .args(["-c", "max_connections=200", "-c", "shared_buffers=16MB"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| step("postgres", &e))?;
        let mut server = Self {
            child,
            dir,
            port,
            user,
            password,
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(30)
                || server.child.try_wait().ok().flatten().is_some()
            {
                return Err(PostgresError::NotListening(port));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The database named after the user, as clients default to it.
        let out = command(&bin.join("createdb"), root)
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", user, user])
            .env("PGPASSWORD", password)
            .output()
            .map_err(|e| step("createdb", &e))?;
        if !out.status.success() {
            let _ = server.child.kill();
            return Err(PostgresError::Step(format!(
                "createdb: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let _ = &server.dir;
        Ok(server)
    }

    /// `postgres://luge:luge-pw@127.0.0.1:PORT/luge`.
    pub fn url(&self) -> String {
        format!(
            "postgres://{}:{}@127.0.0.1:{}/{}",
            self.user, self.password, self.port, self.user
        )
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
