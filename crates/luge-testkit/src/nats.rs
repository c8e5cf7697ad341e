//! A real `nats-server` with JetStream for the NATS trigger's tests and
//! benchmarks: started on a free loopback port with its store in a
//! directory of its own (kept across a `kill -9` and a restart), killed
//! when dropped; and a small blocking client of NATS's text protocol
//! that publishes with JetStream's acknowledgements and asks JetStream's
//! API. `./scripts/setup.sh` installs the server (Debian's
//! `nats-server`, 2.9).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::server::{self, ServerError};

const NAME: &str = "nats-server";

/// A running `nats-server -js` on 127.0.0.1.
#[derive(Debug)]
pub struct NatsServer {
    child: Option<Child>,
    /// Its port.
    pub port: u16,
    user: Option<(String, String)>,
    store: tempfile::TempDir,
}

impl NatsServer {
    /// Starts one on a free port.
    pub fn start() -> Result<Self, ServerError> {
        Self::new(None)
    }

    /// Starts one on a free port that asks clients for `user` and
    /// `password`.
    pub fn with_password(user: &str, password: &str) -> Result<Self, ServerError> {
        Self::new(Some((user.to_owned(), password.to_owned())))
    }

    fn new(user: Option<(String, String)>) -> Result<Self, ServerError> {
        let mut server = Self {
            child: None,
            port: server::free_port(NAME)?,
            user,
            store: tempfile::tempdir().map_err(ServerError::setup(NAME))?,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), ServerError> {
        let mut command = Command::new(NAME);
        command
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-js"])
            .arg("-sd")
            .arg(self.store.path());
        if let Some((user, password)) = &self.user {
            command.args(["--user", user, "--pass", password]);
        }
        command.stdout(Stdio::null()).stderr(Stdio::null());
        self.child = Some(server::spawn(
            &mut command,
            "./scripts/setup.sh installs it",
        )?);
        // Up once JetStream answers (it starts after the port opens).
        server::wait_until(
            NAME,
            self.port,
            Duration::from_secs(10),
            Duration::from_millis(50),
            || {
                self.client()
                    .and_then(|mut c| c.request("$JS.API.INFO", b""))
                    .is_ok()
            },
        )
    }

    /// `kill -9` of the server: what it stored stays in its store.
    pub fn kill(&mut self) {
        server::kill(&mut self.child);
    }

    /// Starts it again on its port, over its store.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill();
        self.spawn()
    }

    /// `nats://[user:password@]127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        match &self.user {
            Some((user, password)) => format!("nats://{user}:{password}@127.0.0.1:{}", self.port),
            None => format!("nats://127.0.0.1:{}", self.port),
        }
    }

    /// A client connection to it.
    pub fn client(&self) -> std::io::Result<NatsClient> {
        NatsClient::connect(self.port, self.user.as_ref())
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One message as the server delivered it.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// Its subject.
    pub subject: String,
    /// Its headers' block (`NATS/1.0` and `Name: value` lines), if any.
    pub headers: String,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Where its answer goes, if anywhere.
    pub reply_to: Option<String>,
}

/// A blocking client of NATS's text protocol, enough for tests.
pub struct NatsClient {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    next_sid: u64,
}

impl NatsClient {
    fn connect(port: u16, user: Option<&(String, String)>) -> std::io::Result<Self> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        // Each command is its own write (a publication's SUB, PUB and
        // UNSUB): with Nagle's algorithm a write behind an unacknowledged
        // one waits for the server's delayed ACK, 40 ms, and a paced
        // publisher managed 23 messages a second, not 1,000.
        stream.set_nodelay(true)?;
        let mut client = Self {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            next_sid: 1,
        };
        let info = client.line()?;
        if !info.starts_with("INFO ") {
            return Err(std::io::Error::other(format!("not a NATS server: {info}")));
        }
        let mut connect = serde_json::json!({
            "verbose": false, "pedantic": false, "headers": true, "no_responders": true,
        });
        if let Some((user, password)) = user {
            connect["user"] = user.as_str().into();
            connect["pass"] = password.as_str().into();
        }
        write!(client.writer, "CONNECT {connect}\r\nPING\r\n")?;
        match client.line()?.as_str() {
            "PONG" => Ok(client),
            other => Err(std::io::Error::other(format!("refused: {other}"))),
        }
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line.trim_end().to_owned())
    }

    /// Waits at most `timeout` for each read from now on (`None`: until
    /// the server sends or closes; 10 s when connected).
    pub fn read_timeout(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.writer.set_read_timeout(timeout)
    }

    /// Subscribes to `subject`, the server having the subscription when
    /// this returns.
    pub fn subscribe(&mut self, subject: &str) -> std::io::Result<()> {
        let sid = self.next_sid;
        self.next_sid += 1;
        write!(self.writer, "SUB {subject} {sid}\r\nPING\r\n")?;
        match self.line()?.as_str() {
            "PONG" => Ok(()),
            other => Err(std::io::Error::other(format!("refused: {other}"))),
        }
    }

    /// Sends `payload` to `subject` as it is (core NATS: no stream's
    /// acknowledgement waited for).
    pub fn send(&mut self, subject: &str, payload: &[u8]) -> std::io::Result<()> {
        write!(self.writer, "PUB {subject} {}\r\n", payload.len())?;
        self.writer.write_all(payload)?;
        self.writer.write_all(b"\r\n")
    }

    /// The next message delivered (answering the server's pings).
    pub fn next_message(&mut self) -> std::io::Result<Delivered> {
        loop {
            let line = self.line()?;
            let parts: Vec<&str> = line.split(' ').collect();
            match parts[0] {
                "PING" => self.writer.write_all(b"PONG\r\n")?,
                "PONG" | "+OK" => {}
                "MSG" | "HMSG" => {
                    let header = parts[0] == "HMSG";
                    let sizes: Vec<usize> = parts
                        .iter()
                        .rev()
                        .take(if header { 2 } else { 1 })
                        .map(|n| n.parse().unwrap_or(0))
                        .collect();
                    let (total, headers) = if header {
                        (sizes[0], sizes[1])
                    } else {
                        (sizes[0], 0)
                    };
                    let mut body = vec![0; total + 2];
                    self.reader.read_exact(&mut body)?;
                    body.truncate(total);
                    let payload = body.split_off(headers);
                    // `MSG subject sid [reply-to] size`, `HMSG` with one
                    // size more.
                    let with_reply = if header { 6 } else { 5 };
                    return Ok(Delivered {
                        subject: parts[1].to_owned(),
                        headers: String::from_utf8_lossy(&body).into_owned(),
                        payload,
                        reply_to: (parts.len() == with_reply).then(|| parts[3].to_owned()),
                    });
                }
                _ => return Err(std::io::Error::other(line)),
            }
        }
    }

    fn inbox(&mut self) -> std::io::Result<(String, u64)> {
        let sid = self.next_sid;
        self.next_sid += 1;
        let inbox = format!("_INBOX.test.{sid}");
        write!(self.writer, "SUB {inbox}.* {sid}\r\n")?;
        Ok((inbox, sid))
    }

    /// Sends `payload` to `subject` and waits for the one answer.
    pub fn request(&mut self, subject: &str, payload: &[u8]) -> std::io::Result<Vec<u8>> {
        let (inbox, sid) = self.inbox()?;
        write!(self.writer, "PUB {subject} {inbox}.0 {}\r\n", payload.len())?;
        self.writer.write_all(payload)?;
        self.writer.write_all(b"\r\n")?;
        let answer = self.next_message()?;
        write!(self.writer, "UNSUB {sid}\r\n")?;
        if answer.headers.contains(" 503") {
            return Err(std::io::Error::other(format!("no responders on {subject}")));
        }
        Ok(answer.payload)
    }

    /// A JetStream API call: its JSON answer, or its error.
    pub fn api(
        &mut self,
        subject: &str,
        request: serde_json::Value,
    ) -> std::io::Result<serde_json::Value> {
        let answer = self.request(subject, request.to_string().as_bytes())?;
        let answer: serde_json::Value =
            serde_json::from_slice(&answer).map_err(std::io::Error::other)?;
        match answer.get("error") {
            Some(error) => Err(std::io::Error::other(error.to_string())),
            None => Ok(answer),
        }
    }

    /// Creates stream `name` (file storage) storing `subjects`.
    pub fn create_stream(&mut self, name: &str, subjects: &[&str]) -> std::io::Result<()> {
        self.api(
            &format!("$JS.API.STREAM.CREATE.{name}"),
            serde_json::json!({"name": name, "subjects": subjects, "storage": "file"}),
        )
        .map(drop)
    }

    /// How many messages stream `name` holds (0 if it does not exist).
    pub fn stream_messages(&mut self, name: &str) -> std::io::Result<u64> {
        match self.api(
            &format!("$JS.API.STREAM.INFO.{name}"),
            serde_json::json!({}),
        ) {
            Ok(info) => Ok(info["state"]["messages"].as_u64().unwrap_or(0)),
            Err(e) if e.to_string().contains("10059") => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Consumer `consumer` of stream `stream`: its messages delivered and
    /// not acknowledged, and those not yet delivered.
    pub fn consumer_pending(
        &mut self,
        stream: &str,
        consumer: &str,
    ) -> std::io::Result<(u64, u64)> {
        let info = self.api(
            &format!("$JS.API.CONSUMER.INFO.{stream}.{consumer}"),
            serde_json::json!({}),
        )?;
        Ok((
            info["num_ack_pending"].as_u64().unwrap_or(0),
            info["num_pending"].as_u64().unwrap_or(0),
        ))
    }

    /// Message `sequence` of stream `stream`: its headers' block and its
    /// payload.
    pub fn stream_message(&mut self, stream: &str, sequence: u64) -> std::io::Result<Delivered> {
        use base64::Engine;
        let answer = self.api(
            &format!("$JS.API.STREAM.MSG.GET.{stream}"),
            serde_json::json!({"seq": sequence}),
        )?;
        let message = &answer["message"];
        let decode = |field: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(message[field].as_str().unwrap_or(""))
                .map_err(std::io::Error::other)
        };
        Ok(Delivered {
            subject: message["subject"].as_str().unwrap_or("").to_owned(),
            headers: String::from_utf8_lossy(&decode("hdrs")?).into_owned(),
            payload: decode("data")?,
            reply_to: None,
        })
    }

    /// Publishes each of `payloads` to `subject` through JetStream, a
    /// thousand at a time, each waiting for the stream's acknowledgement:
    /// how many a stream stored.
    pub fn publish<P: AsRef<[u8]>>(
        &mut self,
        subject: &str,
        payloads: impl IntoIterator<Item = P>,
    ) -> std::io::Result<usize> {
        let (inbox, sid) = self.inbox()?;
        let mut stored = 0;
        let mut payloads = payloads.into_iter().peekable();
        while payloads.peek().is_some() {
            let mut frame = Vec::new();
            let mut sent = 0;
            for payload in payloads.by_ref().take(1000) {
                let payload = payload.as_ref();
                write!(frame, "PUB {subject} {inbox}.{sent} {}\r\n", payload.len())?;
                frame.extend_from_slice(payload);
                frame.extend_from_slice(b"\r\n");
                sent += 1;
            }
            self.writer.write_all(&frame)?;
            for _ in 0..sent {
                let ack = self.next_message()?;
                if ack.payload.starts_with(b"{\"stream\"") {
                    stored += 1;
                }
            }
        }
        write!(self.writer, "UNSUB {sid}\r\n")?;
        Ok(stored)
    }
}
