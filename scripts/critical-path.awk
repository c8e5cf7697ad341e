# Splits a one-connection server's request cycle into its parts, from the
# kernel's own timestamps of the server's system calls: a closed-loop
# client's p50 is the server's time plus the send plus everything outside
# the server (the loopback, the client's wake-up and turnaround), and only
# the first of those is the server's code. Input: `perf script --ns -F
# tid,time,event,trace` of the events syscalls:sys_enter_recvfrom,
# sys_exit_recvfrom, and the enter and exit of writev and sendto (Luge's
# hyper writes a response with writev, `wasmtime serve`'s with sendto),
# the server's threads only (perf script --comms). Per connection (file
# descriptor):
#
#   server  from the last read that returned bytes to the write of the
#           response (hyper reads, Luge routes, runs and answers);
#   send    the response's write (on loopback it also delivers the bytes
#           to the client's socket and wakes the client);
#   cycle   from one response's write to the next one's on the same
#           connection: the whole round trip a closed-loop client sees.
#
# Prints the count, p50 and p90 of each in microseconds, and the p50 of
# the cycle less the p50s of the server and the send: the time outside
# the server. POSIX awk (mawk and busybox run it; a lent machine may
# have no gawk): percentiles from 0.1 µs buckets. Used by
# scripts/bench-bundle.sh's run.sh; checked by
# benches/tests/critical_path.rs.
function bucket(kind, us) {
    if (us < 0) return
    b = int(us * 10)
    count[kind, b]++
    n[kind]++
    if (b > top[kind]) top[kind] = b
}
function pct(kind, p,    want, seen, b) {
    if (n[kind] == 0) return -1
    want = p * n[kind]
    seen = 0
    for (b = 0; b <= top[kind]; b++) {
        seen += count[kind, b]
        if (seen >= want) return b / 10
    }
    return top[kind] / 10
}
{
    tid = $1
    t = $2
    sub(/:$/, "", t)
    event = $3
    sub(/:$/, "", event)
    us = t * 1000000
}
event ~ /sys_enter_(recvfrom|writev|sendto)$/ {
    fd = $5
    sub(/,$/, "", fd)
    if (event ~ /recvfrom$/) {
        reading[tid] = fd
    } else if (fd in received) {
        sending[tid] = us
        bucket("server", us - received[fd])
        delete received[fd]
        if (fd in wrote) bucket("cycle", us - wrote[fd])
        wrote[fd] = us
    }
    next
}
event ~ /sys_exit_recvfrom$/ {
    # A request's bytes: a positive count (errors such as EAGAIN print as
    # 0xffff..., the end of the stream as 0x0).
    ret = $4
    if ((tid in reading) && ret != "0x0" && ret !~ /^0xffffffff/) received[reading[tid]] = us
    delete reading[tid]
    next
}
event ~ /sys_exit_(writev|sendto)$/ {
    if (tid in sending) bucket("send", us - sending[tid])
    delete sending[tid]
    next
}
END {
    printf "%-7s %8s %9s %9s\n", "part", "count", "p50 µs", "p90 µs"
    split("server send cycle", kinds, " ")
    for (i = 1; i <= 3; i++) {
        k = kinds[i]
        printf "%-7s %8d %9.1f %9.1f\n", k, n[k], pct(k, 0.5), pct(k, 0.9)
    }
    if (n["cycle"] > 0)
        printf "outside the server (cycle p50 - server p50 - send p50): %.1f µs\n",
            pct("cycle", 0.5) - pct("server", 0.5) - pct("send", 0.5)
}
