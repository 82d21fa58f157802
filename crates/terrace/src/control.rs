//! Control channel between the `terrace` command and a mount daemon.
//!
//! The daemon listens on a Unix socket named after the mount point
//! (`/run/terrace/<mount-point>.sock`). Protocol: the client sends one JSON
//! line, the daemon answers one JSON line and closes.
//!
//! - `{"cmd":"status"}` → `{"ok":true,"status":{…Status…,"pid":N,"mountpoint":"…","pool":"…"}}`
//! - `{"cmd":"umount","lazy":false}` → `{"ok":true,"pid":N,"clean":true}` once
//!   the pool is persisted and marked clean and the FUSE mount is gone (the
//!   daemon exits right after), or `{"ok":false,"error":"…"}`.
//! - anything else → `{"ok":false,"error":"unknown command"}`.

use serde_json::Value;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Why a request failed.
#[derive(Debug)]
pub enum ControlError {
    /// Nobody listens on the socket (no daemon, or a dead one).
    NoDaemon,
    /// The daemon answered badly or too late.
    Failed(String),
}

/// Sends one request and reads the one-line answer.
pub fn request(socket: &Path, req: &Value, timeout: Duration) -> Result<Value, ControlError> {
    let mut s = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) || e.raw_os_error() == Some(libc::ENOTSOCK) =>
        {
            return Err(ControlError::NoDaemon)
        }
        Err(e) => {
            return Err(ControlError::Failed(format!(
                "cannot reach the daemon at {}: {e}",
                socket.display()
            )))
        }
    };
    let fail = |e: io::Error| ControlError::Failed(format!("talking to the daemon: {e}"));
    s.set_read_timeout(Some(timeout)).map_err(fail)?;
    s.set_write_timeout(Some(Duration::from_secs(5)))
        .map_err(fail)?;
    let mut line = req.to_string();
    line.push('\n');
    s.write_all(line.as_bytes()).map_err(fail)?;
    let mut answer = String::new();
    BufReader::new(&s).read_line(&mut answer).map_err(|e| {
        if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            ControlError::Failed(format!(
                "the daemon did not answer within {} s",
                timeout.as_secs()
            ))
        } else {
            fail(e)
        }
    })?;
    if answer.trim().is_empty() {
        return Err(ControlError::Failed(
            "the daemon closed the connection without answering".into(),
        ));
    }
    serde_json::from_str(answer.trim())
        .map_err(|e| ControlError::Failed(format!("bad answer from the daemon: {e}")))
}

/// The error text of a `{"ok":false}` answer.
pub fn answer_error(v: &Value) -> Option<String> {
    if v.get("ok").and_then(Value::as_bool) == Some(true) {
        None
    } else {
        Some(
            v.get("error")
                .and_then(Value::as_str)
                .unwrap_or("the daemon refused")
                .to_string(),
        )
    }
}
