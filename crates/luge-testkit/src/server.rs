//! What every server of the kit shares: a free loopback port, its binary
//! spawned, a wait until it answers, and one error type for the ways
//! starting one fails.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Why a server of the kit could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// No free loopback port, or its files or directory could not be
    /// written.
    #[error("cannot prepare {server}")]
    Setup {
        /// The server.
        server: &'static str,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Its binary could not be run.
    #[error("{program} could not be run ({hint})")]
    Spawn {
        /// The program, as it was named.
        program: String,
        /// What installs or builds it.
        hint: &'static str,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Its binaries are not where they are looked for.
    #[error("{server} is not installed ({hint})")]
    NotInstalled {
        /// The server.
        server: &'static str,
        /// What installs it.
        hint: &'static str,
    },
    /// A step of its preparation (a tool run before or after it starts)
    /// exited with a failure.
    #[error("{program} failed: {stderr}")]
    Failed {
        /// The program, as it was named.
        program: String,
        /// What it wrote to its standard error.
        stderr: String,
    },
    /// It exited before it answered.
    #[error("{server} exited before it answered on port {port} ({status})")]
    Exited {
        /// The server.
        server: &'static str,
        /// The port it was to answer on.
        port: u16,
        /// How it exited.
        status: std::process::ExitStatus,
    },
    /// It was asked to restart over a store it was not started with.
    #[error("{server} keeps no store to restart over")]
    NoStore {
        /// The server.
        server: &'static str,
    },
    /// It did not answer on its port in time.
    #[error("{server} did not start on port {port} within {within:?}")]
    NotListening {
        /// The server.
        server: &'static str,
        /// The port it was to answer on.
        port: u16,
        /// How long it was given.
        within: Duration,
    },
}

impl ServerError {
    /// A `Setup` error of `server` from `source`.
    pub fn setup(server: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Self::Setup { server, source }
    }
}

/// A free port on 127.0.0.1 (free when asked: the server binds it next).
pub fn free_port(server: &'static str) -> Result<u16, ServerError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(ServerError::setup(server))
}

/// Runs `command`; `hint` says what installs the program.
pub fn spawn(command: &mut Command, hint: &'static str) -> Result<Child, ServerError> {
    command.spawn().map_err(|source| ServerError::Spawn {
        program: command.get_program().to_string_lossy().into_owned(),
        hint,
        source,
    })
}

/// `kill -9` of the server `child` holds, if it holds one, waited for.
pub fn kill(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Runs `command` to its end, a step of a server's preparation: its
/// failure to start or its failing exit is an error.
pub fn run(command: &mut Command, hint: &'static str) -> Result<(), ServerError> {
    let program = command.get_program().to_string_lossy().into_owned();
    match command.output() {
        Err(source) => Err(ServerError::Spawn {
            program,
            hint,
            source,
        }),
        Ok(out) if !out.status.success() => Err(ServerError::Failed {
            program,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }),
        Ok(_) => Ok(()),
    }
}

/// Writes `contents` to `path`, a file a server is started with.
pub fn write(
    server: &'static str,
    path: &std::path::Path,
    contents: impl AsRef<[u8]>,
) -> Result<(), ServerError> {
    std::fs::write(path, contents).map_err(ServerError::setup(server))
}

/// Waits up to `within` until `ready` holds, asking every `every`; else
/// [`ServerError::NotListening`] on `port`.
pub fn wait_until(
    server: &'static str,
    port: u16,
    within: Duration,
    every: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<(), ServerError> {
    let started = Instant::now();
    while !ready() {
        if started.elapsed() > within {
            return Err(ServerError::NotListening {
                server,
                port,
                within,
            });
        }
        std::thread::sleep(every);
    }
    Ok(())
}

/// Waits up to `within` until each of `ports` on 127.0.0.1 accepts a
/// connection.
pub fn wait_listening(
    server: &'static str,
    ports: &[u16],
    within: Duration,
) -> Result<(), ServerError> {
    let started = Instant::now();
    for &port in ports {
        let left = within.saturating_sub(started.elapsed());
        wait_until(server, port, left, Duration::from_millis(20), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        })?;
    }
    Ok(())
}

/// Waits up to `within` until `child`, the server, accepts connections on
/// `port` of 127.0.0.1; gives up at once should it exit.
pub fn wait_serving(
    server: &'static str,
    child: &mut Child,
    port: u16,
    within: Duration,
) -> Result<(), ServerError> {
    let mut exited = None;
    wait_until(server, port, within, Duration::from_millis(50), || {
        exited = child.try_wait().ok().flatten();
        exited.is_some() || TcpStream::connect(("127.0.0.1", port)).is_ok()
    })?;
    match exited {
        Some(status) => Err(ServerError::Exited {
            server,
            port,
            status,
        }),
        None => Ok(()),
    }
}
