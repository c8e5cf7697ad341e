//! A real Kafka broker for the Kafka trigger's tests and benchmarks:
//! Apache Kafka 3.9.1 in KRaft mode (one JVM is broker and controller, no
//! ZooKeeper), started on free loopback ports with its log in a directory
//! of its own (kept across a `kill -9` and a restart), killed when
//! dropped; and a client (librdkafka, through rdkafka) that creates
//! topics, produces, reads a topic whole and says what a group has left
//! to commit.
//!
//! The broker's classpath is the jars `deploy/openwhisk/build/kafka-pom.xml`
//! names, resolved from Maven Central by `./scripts/setup.sh` into
//! `target/tools/kafka/kafka.cp` (or the file `LUGE_KAFKA_CLASSPATH`
//! names); it runs on the `java` on the PATH (17 or later).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::server::{self, ServerError};

const NAME: &str = "kafka";
const HINT: &str = "./scripts/setup.sh resolves its classpath; it needs java and mvn";

/// How long a client call may take (a broker just restarted elects its
/// partitions' leaders first).
const CALL: Duration = Duration::from_secs(30);

/// A running Kafka broker on 127.0.0.1.
#[derive(Debug)]
pub struct KafkaServer {
    child: Option<Child>,
    /// Its clients' port.
    pub port: u16,
    dir: tempfile::TempDir,
    classpath: String,
}

/// One message as a topic holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its payload.
    pub payload: Option<Vec<u8>>,
    /// Its headers, as text.
    pub headers: Vec<(String, String)>,
}

impl Stored {
    /// The header `name`'s value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Two different free ports on 127.0.0.1 (each bound while the other is
/// asked for, so that they differ).
fn two_free_ports() -> Result<(u16, u16), ServerError> {
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").map_err(ServerError::setup(NAME));
    let (a, b) = (bind()?, bind()?);
    let port = |l: &std::net::TcpListener| {
        l.local_addr()
            .map(|a| a.port())
            .map_err(ServerError::setup(NAME))
    };
    Ok((port(&a)?, port(&b)?))
}

fn classpath() -> Result<String, ServerError> {
    let file = std::env::var_os("LUGE_KAFKA_CLASSPATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/kafka/kafka.cp")
        });
    match std::fs::read_to_string(&file) {
        Ok(text) if !text.trim().is_empty() => Ok(text.trim().to_owned()),
        _ => Err(ServerError::NotInstalled {
            server: NAME,
            hint: HINT,
        }),
    }
}

impl KafkaServer {
    /// Formats a log directory and starts a broker on free ports.
    pub fn start() -> Result<Self, ServerError> {
        let classpath = classpath()?;
        let dir = tempfile::tempdir().map_err(ServerError::setup(NAME))?;
        let (port, controller) = two_free_ports()?;
        let data = dir.path().join("data");
        server::write(
            NAME,
            &dir.path().join("server.properties"),
            format!(
                "process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={data}
num.partitions=4
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
",
                data = data.display()
            ),
        )?;
        server::write(
            NAME,
            &dir.path().join("log4j.properties"),
            "log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
",
        )?;
        let mut server = Self {
            child: None,
            port,
            dir,
            classpath,
        };
        // Any cluster id will do: a base64 UUID ("luge-test-kafka0").
        let properties = server.dir.path().join("server.properties");
        server::run(
            server
                .java("kafka.tools.StorageTool")
                .args(["format", "-t", "bHVnZS10ZXN0LWthZmthMA", "-c"])
                .arg(properties),
            HINT,
        )?;
        server.spawn()?;
        Ok(server)
    }

    /// `java` with the broker's classpath running `main`.
    fn java(&self, main: &str) -> Command {
        let mut command = Command::new("java");
        command
            .arg("-Xmx512m")
            .arg("-XX:+UseSerialGC")
            .arg(format!(
                "-Dlog4j.configuration=file:{}",
                self.dir.path().join("log4j.properties").display()
            ))
            .arg("-cp")
            .arg(&self.classpath)
            .arg(main);
        command
    }

    fn spawn(&mut self) -> Result<(), ServerError> {
        let mut command = self.java("kafka.Kafka");
        command.arg(self.dir.path().join("server.properties"));
        command.stdout(Stdio::null()).stderr(Stdio::null());
        let mut child = server::spawn(&mut command, HINT)?;
        let started = server::wait_serving(NAME, &mut child, self.port, Duration::from_secs(90));
        self.child = Some(child);
        started?;
        // Up once it answers a metadata request as its own controller.
        server::wait_until(
            NAME,
            self.port,
            Duration::from_secs(60),
            Duration::from_millis(200),
            || {
                self.consumer(None)
                    .and_then(|c| c.fetch_metadata(None, Duration::from_secs(2)))
                    .is_ok_and(|m| !m.brokers().is_empty())
            },
        )
    }

    /// `kill -9` of the broker: its log stays.
    pub fn kill(&mut self) {
        server::kill(&mut self.child);
    }

    /// Starts it again on its ports, over its log.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill();
        self.spawn()
    }

    /// `kafka://127.0.0.1:PORT`, as a trigger names it.
    pub fn address(&self) -> String {
        format!("kafka://127.0.0.1:{}", self.port)
    }

    fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", format!("127.0.0.1:{}", self.port))
            // A paced producer's request must not wait on the broker's
            // delayed ACK (Nagle's algorithm is librdkafka's default).
            .set("socket.nagle.disable", "true")
            .set("log_level", "3");
        config
    }

    fn consumer(&self, group: Option<&str>) -> rdkafka::error::KafkaResult<BaseConsumer> {
        let mut config = self.config();
        config
            .set("group.id", group.unwrap_or("luge-testkit"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false");
        config.create()
    }

    /// Creates `topic` with `partitions` partitions.
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<(), String> {
        let admin: AdminClient<DefaultClientContext> =
            self.config().create().map_err(|e| e.to_string())?;
        // On a thread of its own: the caller may be a runtime's.
        let results = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())?;
                    runtime
                        .block_on(admin.create_topics(
                            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
                            &AdminOptions::new().operation_timeout(Some(CALL)),
                        ))
                        .map_err(|e| e.to_string())
                })
                .join()
                .map_err(|_| "creating the topic panicked".to_owned())?
        })?;
        for result in results {
            result.map_err(|(topic, code)| format!("{topic}: {code}"))?;
        }
        Ok(())
    }

    /// Produces each `(key, payload)` to `topic`, acknowledged by the
    /// broker before it returns: how many.
    pub fn produce(
        &self,
        topic: &str,
        messages: impl IntoIterator<Item = (Option<Vec<u8>>, Vec<u8>)>,
    ) -> Result<usize, String> {
        let producer: BaseProducer = self
            .config()
            .set("linger.ms", "5")
            .set("message.max.bytes", "4000000")
            .create()
            .map_err(|e| e.to_string())?;
        let mut sent = 0;
        for (key, payload) in messages {
            let mut record = BaseRecord::<[u8], [u8]>::to(topic).payload(&payload);
            if let Some(key) = &key {
                record = record.key(key);
            }
            let mut record = Some(record);
            while let Some(next) = record.take() {
                match producer.send(next) {
                    Ok(()) => {}
                    Err((e, back))
                        if e.rdkafka_error_code()
                            == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) =>
                    {
                        producer.poll(Duration::from_millis(10));
                        record = Some(back);
                    }
                    Err((e, _)) => return Err(e.to_string()),
                }
            }
            sent += 1;
            producer.poll(Duration::ZERO);
        }
        producer.flush(CALL).map_err(|e| e.to_string())?;
        if producer.in_flight_count() != 0 {
            return Err("messages not acknowledged".to_owned());
        }
        Ok(sent)
    }

    /// A producer that sends one message at a time, each acknowledged
    /// before the next (a paced publisher's).
    pub fn producer(&self) -> Result<KafkaProducer, String> {
        let producer = self
            .config()
            .set("linger.ms", "0")
            .create()
            .map_err(|e| e.to_string())?;
        Ok(KafkaProducer(producer))
    }

    /// What `group` has left on `topic`: the messages past its committed
    /// offsets, summed over the partitions (`None` if the broker does not
    /// answer).
    pub fn lag(&self, topic: &str, group: &str) -> Option<i64> {
        let consumer = self.consumer(Some(group)).ok()?;
        let metadata = consumer.fetch_metadata(Some(topic), CALL).ok()?;
        let partitions = metadata.topics().first()?.partitions().len();
        if partitions == 0 {
            return None;
        }
        let mut list = TopicPartitionList::new();
        for partition in 0..partitions as i32 {
            list.add_partition(topic, partition);
        }
        let committed = consumer.committed_offsets(list, CALL).ok()?;
        let mut lag = 0;
        for element in committed.elements() {
            let (_, high) = consumer
                .fetch_watermarks(topic, element.partition(), CALL)
                .ok()?;
            let at = match element.offset() {
                Offset::Offset(at) => at,
                _ => 0,
            };
            lag += high - at;
        }
        Some(lag)
    }

    /// How many members `group` has once it is stable (`None` while it
    /// rebalances, or if the broker does not answer).
    pub fn stable_members(&self, group: &str) -> Option<usize> {
        let consumer = self.consumer(None).ok()?;
        let groups = consumer.fetch_group_list(Some(group), CALL).ok()?;
        let found = groups.groups().iter().find(|g| g.name() == group)?;
        (found.state() == "Stable").then(|| found.members().len())
    }

    /// Every message `topic` holds, partition by partition.
    pub fn messages(&self, topic: &str) -> Result<Vec<Stored>, String> {
        let consumer = self.consumer(None).map_err(|e| e.to_string())?;
        let metadata = consumer
            .fetch_metadata(Some(topic), CALL)
            .map_err(|e| e.to_string())?;
        let Some(described) = metadata.topics().first() else {
            return Ok(Vec::new());
        };
        let mut list = TopicPartitionList::new();
        let mut left = 0;
        for partition in described.partitions() {
            let (low, high) = consumer
                .fetch_watermarks(topic, partition.id(), CALL)
                .map_err(|e| e.to_string())?;
            left += high - low;
            list.add_partition_offset(topic, partition.id(), Offset::Beginning)
                .map_err(|e| e.to_string())?;
        }
        consumer.assign(&list).map_err(|e| e.to_string())?;
        let mut stored = Vec::new();
        let started = std::time::Instant::now();
        while left > 0 {
            if started.elapsed() > CALL {
                return Err(format!("{left} messages of {topic} not read"));
            }
            let Some(message) = consumer.poll(Duration::from_millis(200)) else {
                continue;
            };
            let message = message.map_err(|e| e.to_string())?;
            left -= 1;
            let headers = message
                .headers()
                .map(|headers| {
                    headers
                        .iter()
                        .map(|h| {
                            (
                                h.key.to_owned(),
                                String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            stored.push(Stored {
                key: message.key().map(<[u8]>::to_vec),
                payload: message.payload().map(<[u8]>::to_vec),
                headers,
            });
        }
        Ok(stored)
    }
}

/// A producer of [`KafkaServer::producer`].
pub struct KafkaProducer(BaseProducer);

impl KafkaProducer {
    /// Sends `payload` (keyless) to `topic` and waits for the broker's
    /// acknowledgement.
    pub fn send(&self, topic: &str, payload: &[u8]) -> Result<(), String> {
        self.0
            .send(BaseRecord::<(), [u8]>::to(topic).payload(payload))
            .map_err(|(e, _)| e.to_string())?;
        // Served delivery reports until it has its own: librdkafka's flush
        // waited about 100 ms a message, which held a publisher paced at
        // 1,000 a second to 10.
        let started = std::time::Instant::now();
        while self.0.in_flight_count() > 0 {
            if started.elapsed() > CALL {
                return Err("not acknowledged".to_owned());
            }
            self.0.poll(Duration::from_millis(1));
        }
        Ok(())
    }
}

impl Drop for KafkaServer {
    fn drop(&mut self) {
        self.kill();
    }
}
