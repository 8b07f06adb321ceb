//! Sockets and the server process, for the tests that play hostile clients: connections from
//! chosen loopback addresses, and the server's resident memory.

use std::net::SocketAddr;

use tokio::net::{TcpSocket, TcpStream};

/// The socket address of a base URL such as `http://127.0.0.1:1234`.
pub fn socket_addr(base: &str) -> SocketAddr {
    base.strip_prefix("http://")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("not an http://ip:port URL: {base}"))
}

/// A connection from the loopback address `from` (127.0.0.x: one client IP per test role),
/// with a small receive buffer when `rcvbuf` is set (a client that reads slowly).
pub async fn connect_from(to: SocketAddr, from: [u8; 4], rcvbuf: Option<u32>) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::from((from, 0)))
        .unwrap_or_else(|e| panic!("bind {from:?}: {e}"));
    if let Some(size) = rcvbuf {
        socket.set_recv_buffer_size(size).expect("SO_RCVBUF");
    }
    socket
        .connect(to)
        .await
        .unwrap_or_else(|e| panic!("connect to {to}: {e}"))
}

/// The resident memory (KiB) of process `pid`, from `/proc/PID/status`.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}
