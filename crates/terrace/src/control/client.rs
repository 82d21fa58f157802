//! The client side: one request, one typed answer.

use super::protocol::{self, Call, Refusal};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Why a request got no reply.
#[derive(Debug)]
pub enum ControlError {
    /// Nobody listens on the socket (no daemon, or a dead one).
    NoDaemon,
    /// The daemon answered badly or too late.
    Failed(String),
    /// The daemon refused (`"ok": false`).
    Refused(Refusal),
}

/// Sends one request and reads the one-line answer as the request's reply.
pub fn call<C: Call>(socket: &Path, req: C, timeout: Duration) -> Result<C::Reply, ControlError> {
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
        Err(e)
            if e.kind() == io::ErrorKind::PermissionDenied
                || e.raw_os_error() == Some(libc::EPERM) =>
        {
            return Err(ControlError::Failed(format!(
                "permission denied: only root and the user who mounted it may ask its daemon \
                 (the control socket {} refuses this user)",
                socket.display()
            )))
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
    let mut line = protocol::encode_request(&req.into());
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
    protocol::decode_answer::<C::Reply>(answer.trim())
        .map_err(|e| ControlError::Failed(format!("bad answer from the daemon: {e}")))?
        .map_err(ControlError::Refused)
}
