//! A real MariaDB server for tests of outbound MySQL: a fresh data
//! directory (`mariadb-install-db`) in a temporary directory, started on a
//! free loopback port with a password-protected user, stopped when
//! dropped. `./scripts/setup.sh` installs it (Debian's `mariadb-server`).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::server::{self, ServerError};

const NAME: &str = "mariadbd";
const HINT: &str = "./scripts/setup.sh installs mariadb-server";

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
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(None)
    }

    /// [`MariaDbServer::start`] with TLS: the server certificate
    /// `cert_pem` and its key, and every client connection over TCP
    /// required to use it (`require_secure_transport`).
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Result<Self, ServerError> {
        Self::start_with(Some((cert_pem, key_pem)))
    }

    fn start_with(tls: Option<(&str, &str)>) -> Result<Self, ServerError> {
        let dir = tempfile::tempdir().map_err(ServerError::setup(NAME))?;
        let root = rustix::process::geteuid().is_root();
        let data = dir.path().join("data");
        // Temporary tables in a directory of this server's own: servers
        // bootstrapped at once in a shared /tmp have removed each other's
        // (mariadb-install-db: "Could not remove temporary table").
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).map_err(ServerError::setup(NAME))?;
        let mut install = Command::new("mariadb-install-db");
        install
            .env("TMPDIR", &tmp)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if root {
            install.arg("--user=root");
        }
        server::run(&mut install, HINT)?;
        let port = server::free_port(NAME)?;
        let socket = dir.path().join("sock");
        let mut mariadbd = Command::new(NAME);
        mariadbd
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
            mariadbd.arg("--user=root");
        }
        if let Some((cert, key)) = tls {
            let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
            server::write(NAME, &cert_file, cert)?;
            server::write(NAME, &key_file, key)?;
            mariadbd
                .arg(format!("--ssl-cert={}", cert_file.display()))
                .arg(format!("--ssl-key={}", key_file.display()))
                .arg("--require-secure-transport=ON");
        }
        let child = server::spawn(mariadbd.stdout(Stdio::null()).stderr(Stdio::null()), HINT)?;
        // Killed when dropped, should it not start.
        let mut this = Self {
            child,
            _dir: dir,
            port,
            user: "luge",
            password: "luge-pw",
        };
        server::wait_serving(NAME, &mut this.child, port, Duration::from_secs(30))?;
        let sql = format!(
            "CREATE USER '{u}'@'%' IDENTIFIED BY '{p}'; CREATE DATABASE {u}; GRANT ALL ON {u}.* TO '{u}'@'%';",
            u = this.user,
            p = this.password
        );
        server::run(
            Command::new("mariadb")
                .arg("--no-defaults")
                .arg(format!("--socket={}", socket.display()))
                .args(["-u", "root", "-e", &sql]),
            HINT,
        )?;
        Ok(this)
    }

    /// `mysql://luge:luge-pw@127.0.0.1:PORT/luge`.
    pub fn url(&self) -> String {
        format!(
            "mysql://{}:{}@127.0.0.1:{}/{}",
            self.user, self.password, self.port, self.user
        )
    }

    /// A function's grant to reach it (`mysql://127.0.0.1:PORT`).
    pub fn grants(&self) -> luge_core::capabilities::AllowedHosts {
        crate::grants(&[&format!("mysql://127.0.0.1:{}", self.port)])
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
