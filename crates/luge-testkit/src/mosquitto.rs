//! A real `mosquitto` MQTT broker for tests and benchmarks of MQTT
//! triggers: started on a free loopback port, without persistence (its
//! sessions live as long as it does), killed when dropped; messages are
//! published with `mosquitto_pub`. `./scripts/setup.sh` installs both
//! (Debian's `mosquitto` and `mosquitto-clients`).

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::server::{self, ServerError};

const NAME: &str = "mosquitto";
const HINT: &str = "./scripts/setup.sh installs it";

/// Why a broker could not be started or a message published.
#[derive(Debug, thiserror::Error)]
pub enum MosquittoError {
    /// The broker, `mosquitto_pub` or `mosquitto_sub` could not be started.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// A pipe to or from a client failed.
    #[error("mosquitto client I/O")]
    Io(#[from] std::io::Error),
    /// `mosquitto_pub` failed; its standard error.
    #[error("mosquitto_pub failed: {0}")]
    Publish(String),
}

/// A running `mosquitto` on 127.0.0.1.
#[derive(Debug)]
pub struct MosquittoServer {
    child: Child,
    _dir: tempfile::TempDir,
    /// Its port.
    pub port: u16,
}

impl MosquittoServer {
    /// Starts one on a free port.
    pub fn start() -> Result<Self, MosquittoError> {
        Self::on(server::free_port(NAME)?)
    }

    /// Starts one on `port` (again, after one was stopped there); waits up
    /// to 10 s for it to accept connections. Anonymous clients may
    /// connect; at most 20 QoS 1 messages are in flight to each client
    /// (mosquitto's default).
    pub fn on(port: u16) -> Result<Self, MosquittoError> {
        let dir = tempfile::tempdir().map_err(ServerError::setup(NAME))?;
        let config = dir.path().join("mosquitto.conf");
        server::write(
            NAME,
            &config,
            format!(
                "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n\
                 max_inflight_messages 20\nmax_queued_messages 200000\nlog_dest none\n"
            ),
        )?;
        let child = server::spawn(
            Command::new(NAME)
                .arg("-c")
                .arg(&config)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            HINT,
        )?;
        // Killed when dropped, should it not start.
        let this = Self {
            child,
            _dir: dir,
            port,
        };
        server::wait_listening(NAME, &[port], Duration::from_secs(10))?;
        Ok(this)
    }

    /// `mqtt://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// Publishes `message` on `topic` at `qos`.
    pub fn publish(&self, topic: &str, message: &str, qos: u8) -> Result<(), MosquittoError> {
        self.publish_lines(topic, &[message], qos)
    }

    /// Publishes `message` (any bytes, any size the broker takes) on
    /// `topic` at `qos`.
    pub fn publish_bytes(
        &self,
        topic: &str,
        message: &[u8],
        qos: u8,
    ) -> Result<(), MosquittoError> {
        self.mosquitto_pub(topic, qos, "-s", message)
    }

    /// Publishes each of `messages` (one per line, none holding a newline)
    /// on `topic` at `qos`, in order, over one connection.
    pub fn publish_lines(
        &self,
        topic: &str,
        messages: &[&str],
        qos: u8,
    ) -> Result<(), MosquittoError> {
        let lines: String = messages.iter().map(|m| format!("{m}\n")).collect();
        self.mosquitto_pub(topic, qos, "-l", lines.as_bytes())
    }

    /// `mosquitto_pub` on `topic` at `qos`, `stdin` its input as `mode`
    /// reads it (`-s`: one message; `-l`: one per line).
    fn mosquitto_pub(
        &self,
        topic: &str,
        qos: u8,
        mode: &str,
        stdin: &[u8],
    ) -> Result<(), MosquittoError> {
        let mut child = server::spawn(
            Command::new("mosquitto_pub")
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                .args(["-t", topic, "-q", &qos.to_string(), mode])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped()),
            HINT,
        )?;
        if let Some(mut input) = child.stdin.take() {
            input.write_all(stdin)?;
        }
        let output = child.wait_with_output()?;
        if output.status.success() {
            Ok(())
        } else {
            Err(MosquittoError::Publish(
                String::from_utf8_lossy(&output.stderr).into_owned(),
            ))
        }
    }
}

impl MosquittoServer {
    /// Subscribes to `topic` (QoS 1) with `mosquitto_sub` until `count`
    /// messages arrived or 20 s passed; [`Subscriber::messages`] reads
    /// them.
    pub fn subscribe(&self, topic: &str, count: usize) -> Result<Subscriber, MosquittoError> {
        let child = server::spawn(
            Command::new("mosquitto_sub")
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                .args(["-t", topic, "-q", "1", "-C", &count.to_string(), "-W", "20"])
                .stdout(Stdio::piped())
                .stderr(Stdio::null()),
            HINT,
        )?;
        Ok(Subscriber(child))
    }
}

/// A running `mosquitto_sub`.
#[derive(Debug)]
pub struct Subscriber(Child);

impl Subscriber {
    /// Whether it has received its count (or given up).
    pub fn done(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(Some(_)))
    }

    /// The messages it received, one per line, once it ended.
    pub fn messages(self) -> Result<Vec<String>, MosquittoError> {
        let output = self.0.wait_with_output()?;
        Ok(String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_owned)
            .collect())
    }
}

impl Drop for MosquittoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
