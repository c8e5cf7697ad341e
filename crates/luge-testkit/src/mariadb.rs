//! A real MariaDB server for tests of outbound MySQL: a fresh data
//! directory (`mariadb-install-db`) in a temporary directory, started on a
//! free loopback port with a password-protected user, stopped when
//! dropped. `./scripts/setup.sh` installs it (Debian's `mariadb-server`).

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why a MariaDB server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum MariaDbError {
    /// A step failed.
    #[error("{0} (./scripts/setup.sh installs mariadb-server)")]
    Step(String),
    /// It did not accept connections in time.
    #[error("mariadbd did not start on port {0}")]
    NotListening(u16),
}

/// A running MariaDB on 127.0.0.1.
#[derive(Debug)]
pub struct MariaDbServer {
    child: Child,
    _dir: tempfile::TempDir,
    /// Its port.
    pub port: u16,
    /// The user's name (it owns the database of the same name).
    pub user: &'static str,
    /// The user's password.
    pub password: &'static str,
}

impl MariaDbServer {
    /// Starts one on a free port, with the user `luge` (password
    /// `luge-pw`) owning the database `luge`.
    pub fn start() -> Result<Self, MariaDbError> {
        Self::start_with(None)
    }

    /// [`MariaDbServer::start`] with TLS: the server certificate
    /// `cert_pem` and its key, and every client connection over TCP
    /// required to use it (`require_secure_transport`).
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Result<Self, MariaDbError> {
        Self::start_with(Some((cert_pem, key_pem)))
    }

    fn start_with(tls: Option<(&str, &str)>) -> Result<Self, MariaDbError> {
        let step =
            |what: &str, e: &dyn std::fmt::Display| MariaDbError::Step(format!("{what}: {e}"));
        let dir = tempfile::tempdir().map_err(|e| step("temp dir", &e))?;
        let root = rustix::process::geteuid().is_root();
        let data = dir.path().join("data");
        // Temporary tables in a directory of this server's own: servers
        // bootstrapped at once in a shared /tmp have removed each other's
        // (mariadb-install-db: "Could not remove temporary table").
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).map_err(|e| step("temp dir", &e))?;
        let mut install = Command::new("mariadb-install-db");
        install
            .env("TMPDIR", &tmp)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if root {
            install.arg("--user=root");
        }
        let out = install
            .output()
            .map_err(|e| step("mariadb-install-db", &e))?;
        if !out.status.success() {
            return Err(MariaDbError::Step(format!(
                "mariadb-install-db: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| step("port", &e))?
            .port();
        let socket = dir.path().join("sock");
        let mut server = Command::new("mariadbd");
        server
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--port={port}"))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", dir.path().join("pid").display()))
            .args([
                "--skip-log-bin",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=16M",
                "--max-connections=200",
            ]);
        if root {
            server.arg("--user=root");
        }
        if let Some((cert, key)) = tls {
            let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
            std::fs::write(&cert_file, cert).map_err(|e| step("certificate", &e))?;
            std::fs::write(&key_file, key).map_err(|e| step("key", &e))?;
            server
                .arg(format!("--ssl-cert={}", cert_file.display()))
                .arg(format!("--ssl-key={}", key_file.display()))
                .arg("--require-secure-transport=ON");
        }
        let child = server
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| step("mariadbd", &e))?;
        let mut server = Self {
            child,
            _dir: dir,
            port,
            user: "luge",
            password: "luge-pw",
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(30)
                || server.child.try_wait().ok().flatten().is_some()
            {
                return Err(MariaDbError::NotListening(port));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let sql = format!(
            "CREATE USER '{u}'@'%' IDENTIFIED BY '{p}'; CREATE DATABASE {u}; GRANT ALL ON {u}.* TO '{u}'@'%';",
            u = server.user,
            p = server.password
        );
        let out = Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", socket.display()))
            .args(["-u", "root", "-e", &sql])
            .output()
            .map_err(|e| step("mariadb", &e))?;
        if !out.status.success() {
            return Err(MariaDbError::Step(format!(
                "creating the user: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(server)
    }

    /// `mysql://luge:luge-pw@127.0.0.1:PORT/luge`.
    pub fn url(&self) -> String {
        format!(
            "mysql://{}:{}@127.0.0.1:{}/{}",
            self.user, self.password, self.port, self.user
        )
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
