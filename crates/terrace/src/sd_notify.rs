//! systemd's readiness protocol (`Type=notify`, sd_notify(3)) without
//! libsystemd: when the service manager set `NOTIFY_SOCKET`, one datagram
//! says the mount is in place (`READY=1`) and, later, that it is going away
//! (`STOPPING=1`). Without `NOTIFY_SOCKET` (not under systemd) nothing is
//! sent. Failures to send are ignored, as sd_notify's are: readiness is a
//! courtesy to the service manager, never a reason to fail a mount.

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (newline-separated `KEY=VALUE` assignments) to the socket
/// named by `NOTIFY_SOCKET`, if any; whether it was sent.
pub fn notify(state: &str) -> bool {
    match std::env::var_os("NOTIFY_SOCKET") {
        Some(path) => path.to_str().is_some_and(|p| notify_to(p, state)),
        None => false,
    }
}

/// Sends `state` to the notification socket `path` (`@NAME`: abstract).
fn notify_to(path: &str, state: &str) -> bool {
    let addr = if let Some(name) = path.strip_prefix('@') {
        // An abstract socket name (systemd's default for services).
        use std::os::linux::net::SocketAddrExt;
        SocketAddr::from_abstract_name(name.as_bytes())
    } else {
        SocketAddr::from_pathname(path)
    };
    let Ok(addr) = addr else {
        return false;
    };
    let Ok(sock) = UnixDatagram::unbound() else {
        return false;
    };
    sock.send_to_addr(state.as_bytes(), &addr).is_ok()
}

/// What `READY=1` sends: readiness and the process that serves.
fn ready_state() -> String {
    format!("READY=1\nMAINPID={}", std::process::id())
}

/// The mount is in place and serving.
pub fn ready() -> bool {
    notify(&ready_state())
}

/// The mount is being taken down.
pub fn stopping() -> bool {
    notify("STOPPING=1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_reaches_a_path_socket_and_an_abstract_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).unwrap();
        assert!(notify_to(path.to_str().unwrap(), &ready_state()));
        let mut buf = [0u8; 256];
        let n = server.recv(&mut buf).unwrap();
        let got = std::str::from_utf8(&buf[..n]).unwrap();
        assert_eq!(got, format!("READY=1\nMAINPID={}", std::process::id()));

        use std::os::linux::net::SocketAddrExt;
        let name = format!("terrace-test-notify-{}", std::process::id());
        let abs = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let server = UnixDatagram::bind_addr(&abs).unwrap();
        assert!(notify_to(&format!("@{name}"), "STOPPING=1"));
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
        // Nobody listening: not sent, no error.
        assert!(!notify_to(
            dir.path().join("none").to_str().unwrap(),
            "READY=1"
        ));
    }
}
