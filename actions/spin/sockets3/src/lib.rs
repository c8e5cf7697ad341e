//! A WASI 0.3 `wasi:cli` command on `wasi:sockets@0.3.0`, for `luge run`'s
//! network grants. Its arguments say what it does:
//!
//! - `loop`: a TCP listener on 127.0.0.1, a connection to it, `ping`
//!   echoed back through the accepted socket; then a UDP datagram between
//!   two sockets on 127.0.0.1. Prints `tcp ping` and `udp ping`.
//! - `connect IP:PORT`: sends `ping\n` to a TCP server and prints what
//!   came back before it closed.
//! - `udp IP:PORT`: sends `ping` from a UDP socket bound to 127.0.0.1 (not
//!   connected: it may hear from anyone) to the peer, and prints the first
//!   datagram it receives and its sender (`pong from 127.0.0.1:PORT`).
//! - `resolve NAME`: prints the addresses `ip-name-lookup` gives.
//! - `listen`: prints the address of a TCP listener on 127.0.0.1 (as a
//!   line, at once), answers one connection with `pong`, and ends.
//!
//! A refusal ends it with `run`'s error result, the step and the error
//! code on stderr (`error: listen: access-denied`).

use wasip3::sockets::ip_name_lookup::resolve_addresses;
use wasip3::sockets::types::{
    IpAddress, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress, TcpSocket, UdpSocket,
};

wasip3::cli::command::export!(Command);

struct Command;

impl wasip3::exports::cli::run::Guest for Command {
    async fn run() -> Result<(), ()> {
        let args = wasip3::cli::environment::get_arguments();
        let args: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
        let result = match args.as_slice() {
            ["loop"] => round_trips().await,
            ["connect", addr] => connect(addr).await,
            ["udp", addr] => udp(addr).await,
            ["resolve", name] => resolve(name).await,
            ["listen"] => listen().await,
            _ => Err(Failure("usage", "invalid-argument".into())),
        };
        match result {
            Ok(out) => {
                print(&out).await;
                Ok(())
            }
            Err(Failure(step, code)) => {
                eprint(&format!("error: {step}: {code}\n")).await;
                Err(())
            }
        }
    }
}

/// Which step failed, and the error code's WIT name.
struct Failure(&'static str, String);

/// Tags an error code (of `wasi:sockets/types` or `ip-name-lookup`) with
/// its step.
fn at<E: std::fmt::Debug>(step: &'static str) -> impl FnOnce(E) -> Failure {
    move |code| Failure(step, name(&code))
}

/// An error code's WIT name (`AccessDenied` is `access-denied`).
fn name(code: &impl std::fmt::Debug) -> String {
    // `ErrorCode::AccessDenied`, `ErrorCode::Other(...)`.
    let debug = format!("{code:?}");
    let word = debug.split('(').next().unwrap_or_default();
    let word = word.rsplit("::").next().unwrap_or_default();
    let mut out = String::new();
    for (i, c) in word.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// 127.0.0.1, `port`.
fn loopback(port: u16) -> IpSocketAddress {
    IpSocketAddress::Ipv4(Ipv4SocketAddress {
        port,
        address: (127, 0, 0, 1),
    })
}

/// Sends `data` on `socket`, then ends its sending side.
async fn send(socket: &TcpSocket, data: Vec<u8>) -> Result<(), Failure> {
    let (mut tx, rx) = wasip3::wit_stream::new();
    let sent = socket.send(rx);
    let left = tx.write_all(data).await;
    drop(tx);
    sent.await.map_err(at("send"))?;
    if left.is_empty() {
        Ok(())
    } else {
        Err(Failure("send", "connection-broken".into()))
    }
}

/// What `socket` receives until its peer ends the stream.
async fn receive(socket: &TcpSocket) -> Result<Vec<u8>, Failure> {
    let (rx, done) = socket.receive();
    let data = rx.collect().await;
    done.await.map_err(at("receive"))?;
    Ok(data)
}

async fn round_trips() -> Result<String, Failure> {
    // TCP: listen, connect (the kernel completes it from the backlog),
    // accept, echo.
    let listener = TcpSocket::create(IpAddressFamily::Ipv4).map_err(at("create"))?;
    listener.bind(loopback(0)).map_err(at("bind"))?;
    let mut accepted = listener.listen().map_err(at("listen"))?;
    let local = listener.get_local_address().map_err(at("address"))?;
    let client = TcpSocket::create(IpAddressFamily::Ipv4).map_err(at("create"))?;
    client.connect(local).await.map_err(at("connect"))?;
    let server = accepted
        .next()
        .await
        .ok_or_else(|| Failure("accept", "connection-aborted".into()))?;
    send(&client, b"ping".to_vec()).await?;
    let got = receive(&server).await?;
    send(&server, got).await?;
    let echoed = receive(&client).await?;
    let mut out = format!("tcp {}\n", String::from_utf8_lossy(&echoed));

    // UDP: one datagram from a to b.
    let a = UdpSocket::create(IpAddressFamily::Ipv4).map_err(at("udp create"))?;
    let b = UdpSocket::create(IpAddressFamily::Ipv4).map_err(at("udp create"))?;
    a.bind(loopback(0)).map_err(at("udp bind"))?;
    b.bind(loopback(0)).map_err(at("udp bind"))?;
    let to = b.get_local_address().map_err(at("udp address"))?;
    a.send(b"ping".to_vec(), Some(to))
        .await
        .map_err(at("udp send"))?;
    let (datagram, _from) = b.receive().await.map_err(at("udp receive"))?;
    out.push_str(&format!("udp {}\n", String::from_utf8_lossy(&datagram)));
    Ok(out)
}

/// `IP:PORT` (IPv4) as a socket address.
fn parse(addr: &str) -> Result<IpSocketAddress, Failure> {
    let bad = || Failure("address", "invalid-argument".into());
    let (ip, port) = addr.split_once(':').ok_or_else(bad)?;
    let octets: Vec<u8> = ip.split('.').filter_map(|o| o.parse().ok()).collect();
    let [a, b, c, d] = octets[..] else {
        return Err(bad());
    };
    let port = port.parse().map_err(|_| bad())?;
    Ok(IpSocketAddress::Ipv4(Ipv4SocketAddress {
        port,
        address: (a, b, c, d),
    }))
}

async fn udp(addr: &str) -> Result<String, Failure> {
    let peer = parse(addr)?;
    let socket = UdpSocket::create(IpAddressFamily::Ipv4).map_err(at("udp create"))?;
    socket.bind(loopback(0)).map_err(at("udp bind"))?;
    socket
        .send(b"ping".to_vec(), Some(peer))
        .await
        .map_err(at("udp send"))?;
    let (datagram, from) = socket.receive().await.map_err(at("udp receive"))?;
    let from = match from {
        IpSocketAddress::Ipv4(Ipv4SocketAddress {
            port,
            address: (a, b, c, d),
        }) => format!("{a}.{b}.{c}.{d}:{port}"),
        IpSocketAddress::Ipv6(v6) => format!("{v6:?}"),
    };
    Ok(format!("{} from {from}", String::from_utf8_lossy(&datagram)))
}

async fn connect(addr: &str) -> Result<String, Failure> {
    let peer = parse(addr)?;
    let socket = TcpSocket::create(IpAddressFamily::Ipv4).map_err(at("create"))?;
    socket.connect(peer).await.map_err(at("connect"))?;
    send(&socket, b"ping\n".to_vec()).await?;
    let reply = receive(&socket).await?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

async fn listen() -> Result<String, Failure> {
    let listener = TcpSocket::create(IpAddressFamily::Ipv4).map_err(at("create"))?;
    listener.bind(loopback(0)).map_err(at("bind"))?;
    let mut accepted = listener.listen().map_err(at("listen"))?;
    let Ok(IpSocketAddress::Ipv4(local)) = listener.get_local_address() else {
        return Err(Failure("address", "invalid-state".into()));
    };
    print(&format!("127.0.0.1:{}\n", local.port)).await;
    let peer = accepted
        .next()
        .await
        .ok_or_else(|| Failure("accept", "connection-aborted".into()))?;
    send(&peer, b"pong".to_vec()).await?;
    Ok(String::new())
}

async fn resolve(name: &str) -> Result<String, Failure> {
    let addresses = resolve_addresses(name.to_owned())
        .await
        .map_err(at("resolve"))?;
    let mut out = String::new();
    for address in addresses {
        match address {
            IpAddress::Ipv4((a, b, c, d)) => out.push_str(&format!("{a}.{b}.{c}.{d}\n")),
            IpAddress::Ipv6(s) => out.push_str(&format!("{s:x?}\n")),
        }
    }
    Ok(out)
}

/// Writes `text` to stdout.
async fn print(text: &str) {
    let (tx, rx) = wasip3::wit_stream::new();
    write(tx, wasip3::cli::stdout::write_via_stream(rx), text).await;
}

/// Writes `text` to stderr.
async fn eprint(text: &str) {
    let (tx, rx) = wasip3::wit_stream::new();
    write(tx, wasip3::cli::stderr::write_via_stream(rx), text).await;
}

/// Writes `text` into a stream of stdout or stderr and waits until the
/// host took it (`written`).
async fn write<E>(
    mut tx: wasip3::wit_bindgen::StreamWriter<u8>,
    written: impl std::future::IntoFuture<Output = Result<(), E>>,
    text: &str,
) {
    tx.write_all(text.as_bytes().to_vec()).await;
    drop(tx);
    let _ = written.await;
}
