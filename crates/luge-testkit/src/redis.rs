//! A real `redis-server` for tests and benchmarks of the state API's
//! global tier: started on a free loopback port, killed when dropped.
//! `./scripts/setup.sh` installs it (Debian's `redis-server`).

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::server::{self, ServerError};

const NAME: &str = "redis-server";

/// A running `redis-server` on 127.0.0.1, without persistence.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    /// Its port.
    pub port: u16,
    password: Option<String>,
    /// A TLS server's certificate and key files.
    _files: Option<tempfile::TempDir>,
}

impl RedisServer {
    /// Starts one on a free port.
    pub fn start() -> Result<Self, ServerError> {
        let port = server::free_port(NAME)?;
        Self::on(port)
    }

    /// Starts one on a free port that asks clients for `password`.
    pub fn with_password(password: &str) -> Result<Self, ServerError> {
        let port = server::free_port(NAME)?;
        let mut server = Self::spawn(port, &["--requirepass", password])?;
        server.password = Some(password.to_owned());
        Ok(server)
    }

    /// Starts one on a free port that speaks TLS only (no plain port),
    /// with the certificate and key `cert_pem` and `key_pem`, asking
    /// clients for no certificate.
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Result<Self, ServerError> {
        let port = server::free_port(NAME)?;
        let files = tempfile::tempdir().map_err(ServerError::setup(NAME))?;
        let (cert, key) = (files.path().join("cert.pem"), files.path().join("key.pem"));
        server::write(NAME, &cert, cert_pem)?;
        server::write(NAME, &key, key_pem)?;
        let (cert, key) = (cert.display().to_string(), key.display().to_string());
        let mut server = Self::spawn(
            port,
            &[
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--tls-cert-file",
                &cert,
                "--tls-key-file",
                &key,
                "--tls-auth-clients",
                "no",
            ],
        )?;
        server._files = Some(files);
        Ok(server)
    }

    /// Starts one on a free port that keeps its data across a `kill -9`:
    /// an append-only file in a directory of its own, each write synced
    /// before it is answered.
    pub fn durable() -> Result<Self, ServerError> {
        let port = server::free_port(NAME)?;
        let files = tempfile::tempdir().map_err(ServerError::setup(NAME))?;
        let mut server = Self::spawn(port, &Self::durable_args(files.path()))?;
        server._files = Some(files);
        Ok(server)
    }

    fn durable_args(dir: &std::path::Path) -> Vec<&str> {
        let dir = dir.to_str().unwrap_or(".");
        vec![
            "--dir",
            dir,
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ]
    }

    /// `kill -9` of the server.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a [`RedisServer::durable`] one again on its port, over its
    /// data (after [`RedisServer::kill`]).
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill();
        let dir = self
            ._files
            .as_ref()
            .map(|f| f.path().to_path_buf())
            .ok_or(ServerError::NoStore { server: NAME })?;
        let mut again = Self::spawn(self.port, &Self::durable_args(&dir))?;
        std::mem::swap(&mut self.child, &mut again.child);
        Ok(())
    }

    /// Starts one on `port` (again, after one was stopped there); waits up
    /// to 10 s for it to accept connections.
    pub fn on(port: u16) -> Result<Self, ServerError> {
        Self::spawn(port, &[])
    }

    fn spawn(port: u16, extra: &[&str]) -> Result<Self, ServerError> {
        let child = server::spawn(
            Command::new(NAME)
                .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                .args(["--save", "", "--appendonly", "no"])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            "./scripts/setup.sh installs it",
        )?;
        // Killed when dropped, should it not start.
        let this = Self {
            child,
            port,
            password: None,
            _files: None,
        };
        server::wait_listening(NAME, &[port], Duration::from_secs(10))?;
        Ok(this)
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl RedisServer {
    /// `PUBLISH channel message`: how many subscribers received it.
    pub fn publish(&self, channel: &str, message: &[u8]) -> std::io::Result<i64> {
        self.command(&[b"PUBLISH", channel.as_bytes(), message])
    }

    /// `PUBLISH channel message`, `count` times, pipelined over one
    /// connection in batches of 1,000: how many deliveries in all.
    pub fn publish_many(
        &self,
        channel: &str,
        message: &[u8],
        count: usize,
    ) -> std::io::Result<i64> {
        use std::io::{BufRead, BufReader, Write};
        let stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut frame = Vec::new();
        for arg in [&b"PUBLISH"[..], channel.as_bytes(), message] {
            frame.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            frame.extend_from_slice(arg);
            frame.extend_from_slice(b"\r\n");
        }
        let frame = [b"*3\r\n".as_slice(), &frame].concat();
        let mut delivered = 0;
        let mut left = count;
        while left > 0 {
            let batch = left.min(1000);
            (&stream).write_all(&frame.repeat(batch))?;
            for _ in 0..batch {
                let mut line = String::new();
                reader.read_line(&mut line)?;
                delivered += line
                    .trim_end()
                    .trim_start_matches(':')
                    .parse::<i64>()
                    .unwrap_or(0);
            }
            left -= batch;
        }
        Ok(delivered)
    }

    /// `XADD stream * payload PAYLOAD`: a message on a stream, as a
    /// `redis-streams` trigger reads it.
    pub fn add(&self, stream: &str, payload: &[u8]) -> std::io::Result<()> {
        let reply = self.send(&[b"XADD", stream.as_bytes(), b"*", b"payload", payload])?;
        // `$LEN` then the id on a line of its own; only the head is read.
        if reply.starts_with('$') {
            Ok(())
        } else {
            Err(std::io::Error::other(format!("redis answered {reply:?}")))
        }
    }

    /// Runs one command whose reply is an integer (after `AUTH` when the
    /// server asks for a password), over a connection of its own.
    pub fn command(&self, args: &[&[u8]]) -> std::io::Result<i64> {
        let reply = self.send(args)?;
        reply
            .strip_prefix(':')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("redis answered {reply:?}")))
    }

    /// Runs one command (after `AUTH` when the server asks for a
    /// password), over a connection of its own: the first line of its
    /// reply.
    fn send(&self, args: &[&[u8]]) -> std::io::Result<String> {
        use std::io::{BufRead, BufReader, Write};
        let stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut send = |args: &[&[u8]]| -> std::io::Result<String> {
            let mut frame = format!("*{}\r\n", args.len()).into_bytes();
            for arg in args {
                frame.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
                frame.extend_from_slice(arg);
                frame.extend_from_slice(b"\r\n");
            }
            (&stream).write_all(&frame)?;
            let mut line = String::new();
            reader.read_line(&mut line)?;
            Ok(line.trim_end().to_owned())
        };
        if let Some(password) = &self.password {
            send(&[b"AUTH", password.as_bytes()])?;
        }
        send(args)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
