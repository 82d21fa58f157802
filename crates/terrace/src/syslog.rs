//! Copies of the daemon's log lines to the system log (journald or a syslog
//! daemon), so what happened to a pool outlives its log file and shows in
//! `journalctl -t terrace` or /var/log/syslog.
//!
//! Every line the daemon logs goes to its stderr (the log file of a
//! detached daemon, the terminal of a foreground one) and, when there is a
//! system log, as one datagram to its socket `/dev/log` in the local syslog
//! format (`<PRI>terrace[PID]: MESSAGE`, facility daemon; the receiver adds
//! the time; journald files it with PRIORITY, SYSLOG_IDENTIFIER and
//! SYSLOG_PID). Not when stderr already goes to the journal — a daemon run
//! by systemd, whose `JOURNAL_STREAM` names the stream stderr is — or each
//! line would be there twice: there each stderr line starts with its
//! priority instead (`<5>mounted …`, the prefix journald reads on streams,
//! sd-daemon(3)). `TERRACE_SYSLOG` overrides the socket's path, or turns
//! the copies off with `off`.
//!
//! A system log that is missing, full or gone costs nothing: the line is
//! dropped there (the log file has it). One that comes (back) later — a
//! journald started or restarted after the daemon — gets the next line:
//! the socket is connected again when a send finds it gone.

use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// syslog's `daemon` facility.
const FACILITY_DAEMON: u8 = 3;
/// Severities used (syslog's numbers).
pub const ERR: u8 = 3;
/// A condition to look at.
pub const WARNING: u8 = 4;
/// A normal but significant event (mount, unmount, settings).
pub const NOTICE: u8 = 5;
/// Longest message sent (longer ones are cut).
const MAX_MESSAGE: usize = 4096;

/// The datagram for one message.
pub fn line(severity: u8, pid: u32, msg: &str) -> String {
    let pri = u16::from(FACILITY_DAEMON) * 8 + u16::from(severity.min(7));
    let mut text: String = msg
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.len() > MAX_MESSAGE {
        let cut = (0..=MAX_MESSAGE)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
    }
    format!("<{pri}>terrace[{pid}]: {text}")
}

/// How serious a log line is, from its words: failures and damage are
/// errors; warnings, a full pool or device and stalls are warnings; the
/// rest (mount, unmount, settings, recovery) notices.
pub fn severity(msg: &str) -> u8 {
    let m = msg.to_ascii_lowercase();
    if [
        "failed",
        "checksum mismatch",
        "damaged",
        "device error",
        "unrepairable",
    ]
    .iter()
    .any(|w| m.contains(w))
    {
        ERR
    } else if m.starts_with("warning")
        || ["enospc", "stalled", " is full", "not cleanly unmounted"]
            .iter()
            .any(|w| m.contains(w))
    {
        WARNING
    } else {
        NOTICE
    }
}

/// Whether stderr is the journal stream systemd gave this process
/// (`JOURNAL_STREAM=DEV:INODE`).
fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let Ok(md) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    dev.parse() == Ok(md.dev()) && ino.parse() == Ok(md.ino())
}

/// Whether stderr is the journal; asked once.
fn to_journal() -> bool {
    static TO_JOURNAL: OnceLock<bool> = OnceLock::new();
    *TO_JOURNAL.get_or_init(stderr_is_journal)
}

/// The line written to stderr for `msg`: with its priority for the
/// journal, with the name and pid for a log file or terminal.
pub fn stderr_line(pid: u32, msg: &str) -> String {
    stderr_line_for(to_journal(), pid, msg)
}

fn stderr_line_for(journal: bool, pid: u32, msg: &str) -> String {
    if journal {
        format!("<{}>{msg}", severity(msg))
    } else {
        format!("terrace[{pid}]: {msg}")
    }
}

/// The system log's socket, if copies go there.
fn target() -> Option<&'static PathBuf> {
    static TARGET: OnceLock<Option<PathBuf>> = OnceLock::new();
    TARGET
        .get_or_init(|| match std::env::var_os("TERRACE_SYSLOG") {
            Some(v) if v == "off" => None,
            Some(v) => Some(PathBuf::from(v)),
            None if to_journal() => None,
            None => Some(PathBuf::from("/dev/log")),
        })
        .as_ref()
}

fn connect(path: &Path) -> Option<UnixDatagram> {
    let s = UnixDatagram::unbound().ok()?;
    s.connect(path).ok()?;
    s.set_nonblocking(true).ok()?;
    Some(s)
}

/// Sends `msg` to the system log, if there is one.
pub fn send(msg: &str) {
    static SOCKET: Mutex<Option<UnixDatagram>> = Mutex::new(None);
    let Some(path) = target() else { return };
    let Ok(mut socket) = SOCKET.lock() else {
        return;
    };
    let datagram = line(severity(msg), std::process::id(), msg);
    // A socket connected earlier may have lost its receiver (a restarted
    // journald binds a new one): one more try on a new connection.
    for _ in 0..2 {
        if socket.is_none() {
            *socket = connect(path);
        }
        let Some(s) = socket.as_ref() else { return };
        match s.send(datagram.as_bytes()) {
            Ok(_) => return,
            // Full (the receiver is behind): this line is dropped there.
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.raw_os_error() == Some(libc::ENOBUFS) =>
            {
                return
            }
            Err(_) => *socket = None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_carry_facility_severity_tag_and_pid() {
        assert_eq!(
            line(
                NOTICE,
                42,
                "unmounted /mnt/t; /dev/shm/p persisted and marked clean"
            ),
            "<29>terrace[42]: unmounted /mnt/t; /dev/shm/p persisted and marked clean"
        );
        assert_eq!(line(ERR, 7, "x"), "<27>terrace[7]: x");
        assert_eq!(
            line(WARNING, 7, "two\nlines\ttab"),
            "<28>terrace[7]: two lines tab"
        );
        let long = "é".repeat(MAX_MESSAGE);
        let l = line(NOTICE, 1, &long);
        assert!(l.len() <= MAX_MESSAGE + "<29>terrace[1]: ".len());
    }

    #[test]
    fn stderr_lines_carry_the_priority_for_the_journal_and_the_pid_otherwise() {
        let msg = "the pool is full: writes are refused with ENOSPC (…)";
        assert_eq!(stderr_line_for(true, 9, msg), format!("<4>{msg}"));
        assert_eq!(stderr_line_for(false, 9, msg), format!("terrace[9]: {msg}"));
        assert_eq!(
            stderr_line_for(true, 9, "mounted /p on /m"),
            "<5>mounted /p on /m"
        );
    }

    #[test]
    fn severity_follows_what_the_line_says() {
        assert_eq!(severity("mounted /p on /m (2 tiers, file)"), NOTICE);
        assert_eq!(
            severity("setting sync_threshold_bytes changed from 1M to 4M"),
            NOTICE
        );
        assert_eq!(
            severity("the pool is full: writes are refused with ENOSPC (…)"),
            WARNING
        );
        assert_eq!(
            severity("migration stalled: nothing on tier 0 can move"),
            WARNING
        );
        assert_eq!(severity("warning: 3 link-count mismatches found"), WARNING);
        assert_eq!(severity("checksum mismatch on tier 1, block 7"), ERR);
        assert_eq!(severity("persisting /p failed: EIO"), ERR);
        assert_eq!(severity("tier 1: device error: Input/output error"), ERR);
    }

    #[test]
    fn lines_reach_a_listening_socket() {
        let dir = std::env::temp_dir().join(format!("terrace-syslog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        let rx = UnixDatagram::bind(&path).unwrap();
        let tx = UnixDatagram::unbound().unwrap();
        tx.connect(&path).unwrap();
        tx.send(line(severity("scrub finished"), 9, "scrub finished").as_bytes())
            .unwrap();
        let mut buf = [0u8; 256];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"<29>terrace[9]: scrub finished");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
