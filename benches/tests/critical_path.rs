//! `scripts/critical-path.awk` (run by the device bundle's `run.sh`) on a
//! `perf script` text made by hand: two connections, one answered by
//! `writev` on the thread that read it, the other read on one thread and
//! answered by `sendto` on another; a read that found nothing (EAGAIN)
//! between a request and its response, the end of a stream, and a write
//! with no request before it, none of which may count.

use std::io::Write as _;
use std::process::{Command, Stdio};

/// One event line as `perf script --ns -F tid,time,event,trace` prints it.
fn line(tid: u32, us: f64, event: &str, trace: &str) -> String {
    format!(
        "{tid:>7} {:.9}: {:>28}: {trace}\n",
        us / 1e6,
        format!("syscalls:{event}")
    )
}

fn enter_recv(tid: u32, us: f64, fd: u32) -> String {
    line(
        tid,
        us,
        "sys_enter_recvfrom",
        &format!(
            "fd: 0x{fd:08x}, ubuf: 0x7f0000001000, size: 0x00002000, flags: 0x00000000, addr: 0x00000000, addr_len: 0x00000000"
        ),
    )
}

fn exit_recv(tid: u32, us: f64, ret: &str) -> String {
    line(tid, us, "sys_exit_recvfrom", ret)
}

fn enter_writev(tid: u32, us: f64, fd: u32) -> String {
    line(
        tid,
        us,
        "sys_enter_writev",
        &format!("fd: 0x{fd:08x}, vec: 0x7f00000020c8, vlen: 0x00000005"),
    )
}

fn exit_writev(tid: u32, us: f64) -> String {
    line(tid, us, "sys_exit_writev", "0x95")
}

fn enter_sendto(tid: u32, us: f64, fd: u32) -> String {
    line(
        tid,
        us,
        "sys_enter_sendto",
        &format!(
            "fd: 0x{fd:08x}, buff: 0x7f0000003000, len: 0x00000095, flags: 0x00004000, addr: 0x00000000, addr_len: 0x00000000"
        ),
    )
}

fn exit_sendto(tid: u32, us: f64) -> String {
    line(tid, us, "sys_exit_sendto", "0x95")
}

#[test]
fn the_cycle_is_taken_apart_per_connection() {
    let base = 52_644_000_000.0; // µs: perf's clock is seconds since boot
    let mut text = String::new();
    // Connection 0x16 on thread 10: three requests, each read 10 µs
    // before its response is written, each write taking 4 µs, a response
    // every 50 µs. Between a request's read and its response, a second
    // read finds nothing (EAGAIN): the request was read at the first.
    for i in 0..3 {
        let t = base + 50.0 * f64::from(i);
        text += &enter_recv(10, t, 0x16);
        text += &exit_recv(10, t + 1.0, "0x2e");
        text += &enter_recv(10, t + 4.0, 0x16);
        text += &exit_recv(10, t + 5.0, "0xfffffffffffffff5");
        text += &enter_writev(10, t + 11.0, 0x16);
        text += &exit_writev(10, t + 15.0);
    }
    // Connection 0x17, read on thread 11 and answered on thread 12 with
    // sendto (as `wasmtime serve` answers): one request, 30 µs in the
    // server, an 8 µs write; then the client leaves (a read of 0 bytes)
    // and a write to it has no request before it.
    let t = base + 20.0;
    text += &enter_recv(11, t, 0x17);
    text += &exit_recv(11, t + 2.0, "0x2e");
    text += &enter_sendto(12, t + 32.0, 0x17);
    text += &exit_sendto(12, t + 40.0);
    text += &enter_recv(11, t + 41.0, 0x17);
    text += &exit_recv(11, t + 42.0, "0x0");
    text += &enter_writev(12, t + 200.0, 0x17);
    text += &exit_writev(12, t + 300.0);
    // perf prints events in time order.
    let mut lines: Vec<&str> = text.lines().collect();
    let time = |l: &str| -> f64 {
        l.split_whitespace()
            .nth(1)
            .unwrap()
            .trim_end_matches(':')
            .parse()
            .unwrap()
    };
    lines.sort_by(|a, b| time(a).total_cmp(&time(b)));

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/critical-path.awk");
    let mut awk = Command::new("awk")
        .args(["-f", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("awk runs");
    awk.stdin
        .take()
        .unwrap()
        .write_all((lines.join("\n") + "\n").as_bytes())
        .unwrap();
    let out = awk.wait_with_output().unwrap();
    assert!(out.status.success());
    let out = String::from_utf8(out.stdout).unwrap();
    let row = |part: &str| -> Vec<f64> {
        out.lines()
            .find(|l| l.starts_with(part))
            .unwrap_or_else(|| panic!("no {part} row in:\n{out}"))
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap())
            .collect()
    };
    // Four requests answered: three of 10 µs and one of 30 (p90 falls on
    // the 30), four writes of 4, 4, 4 and 8 µs; two cycles of 50 µs on the
    // first connection, none on the second (one request).
    assert_eq!(row("server"), [4.0, 10.0, 30.0], "{out}");
    assert_eq!(row("send"), [4.0, 4.0, 8.0], "{out}");
    assert_eq!(row("cycle"), [2.0, 50.0, 50.0], "{out}");
    assert!(
        out.contains("(cycle p50 - server p50 - send p50): 36.0 µs"),
        "{out}"
    );
}
