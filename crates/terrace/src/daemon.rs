//! Daemonising `terrace mount --daemon`, and the run-time files of a serving
//! process (control socket and pid file; the log of a detached daemon).
//!
//! `--daemon` starts this same executable again as
//! `terrace mount POOL MNT --foreground-child -o …` (named `terrace` even
//! when the executable is a copy named as a mount helper), in a new session
//! (setsid), its output in the log file, and returns once the mount and its
//! control socket are there — or with the child's own error if it exits
//! first.

use crate::util::{self, CliError, CliResult, RunFiles};
use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// After this long without the mount, `mount --daemon` says the daemon is
/// still mounting (a pool of half a million files replays as many logs)...
const DAEMON_START_NOTE: Duration = Duration::from_secs(10);
/// ...and after this long it gives up and stops the daemon. Until then it
/// waits as long as the daemon runs: it ends the wait itself if it fails.
const DAEMON_START_TIMEOUT: Duration = Duration::from_secs(600);

/// A detached daemon's log is kept across mounts and unmounts (what
/// happened to a pool stays readable after it is unmounted); when it passed
/// this size at a mount, it is renamed to `.old` (replacing the previous one)
/// and a new one is started.
const LOG_ROTATE_BYTES: u64 = 1 << 20;

/// Opens the log of a detached daemon for appending (rotating a large one);
/// with the offset this run's lines start at.
fn open_log(path: &Path) -> CliResult<(File, u64)> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() > LOG_ROTATE_BYTES) {
        let mut old = path.as_os_str().to_owned();
        old.push(".old");
        let _ = std::fs::rename(path, old);
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| CliError::at(path, util::os_reason(&e)))?;
    let start = log.metadata().map(|m| m.len()).unwrap_or(0);
    Ok((log, start))
}

/// What the log holds from byte `start` on (this run's lines).
fn read_log_from(path: &Path, start: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        if f.seek(SeekFrom::Start(start)).is_ok() {
            let _ = f.read_to_string(&mut text);
        }
    }
    text
}

/// Starts the detached daemon serving `pool` on `mnt` (both absolute) with
/// the `-o` arguments `raw_options`, and waits until it serves.
pub fn spawn(raw_options: &[String], pool: &Path, mnt: &Path) -> CliResult {
    let files = util::run_files(mnt);
    let dir = util::runtime_dir();
    std::fs::create_dir_all(&dir).map_err(|e| CliError::at(&dir, util::os_reason(&e)))?;
    let (log, log_start) = open_log(&files.log)?;
    let log2 = log
        .try_clone()
        .map_err(|e| CliError::at(&files.log, util::os_reason(&e)))?;
    let exe = std::env::current_exe()
        .map_err(|e| CliError::new(format!("cannot find the terrace executable: {e}")))?;
    let mut cmd = Command::new(&exe);
    // Under a mount helper's name (a copy of this binary installed as
    // /sbin/mount.fuse.terrace), the child would be taken for a helper call.
    cmd.arg0(crate::mount_helper::cli_argv0(&exe))
        .arg("mount")
        .arg(pool)
        .arg(mnt)
        .arg("--foreground-child");
    for o in raw_options {
        cmd.arg("-o").arg(o);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2))
        .current_dir("/");
    // Safety: setsid is async-signal-safe; it detaches the daemon from our
    // terminal and process group.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| CliError::new(format!("cannot start the daemon: {e}")))?;
    let start = Instant::now();
    let mut noted = false;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                let text = read_log_from(&files.log, log_start);
                let text = text.trim();
                if text.is_empty() {
                    return Err(CliError::new(format!(
                        "the daemon exited ({st}) before mounting"
                    )));
                }
                // The daemon's own one-line errors, as it wrote them.
                eprintln!("{text}");
                return Err(CliError::new("").code(st.code().filter(|&c| c != 0).unwrap_or(1)));
            }
            Ok(None) => {}
            Err(e) => return Err(CliError::new(format!("waiting for the daemon: {e}"))),
        }
        if util::mount_at(mnt).is_some_and(|m| m.fstype.starts_with("fuse"))
            && files.socket.exists()
        {
            util::out(&format!(
                "terrace: mounted {} on {} (daemon pid {}, log {})",
                pool.display(),
                mnt.display(),
                child.id(),
                files.log.display()
            ));
            return Ok(());
        }
        if !noted && start.elapsed() > DAEMON_START_NOTE {
            noted = true;
            util::out(&format!(
                "terrace: the daemon (pid {}) is still mounting {} (a pool with many files \
                 takes a while); waiting up to {} min, see {}",
                child.id(),
                pool.display(),
                DAEMON_START_TIMEOUT.as_secs() / 60,
                files.log.display()
            ));
        }
        if start.elapsed() > DAEMON_START_TIMEOUT {
            // Safety: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            return Err(CliError::at(
                mnt,
                format!(
                    "the mount did not appear within {} s; see {}",
                    DAEMON_START_TIMEOUT.as_secs(),
                    files.log.display()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Takes the run-time files of the mount point `mnt` (as given, for
/// messages) for this process: binds the control socket (replacing a stale
/// one) and writes the pid file. Returns the socket's listener.
///
/// Another daemon that still answers on the socket is one finishing an
/// unmount (`umount` returns before the daemon has persisted the pool), or
/// one a lazy unmount left serving open files: the claim waits up to `wait`
/// for it to exit (a script's `umount M; terrace mount P M` then works),
/// then refuses.
pub fn claim_run_files(files: &RunFiles, mnt: &Path, wait: Duration) -> CliResult<UnixListener> {
    let dir = util::runtime_dir();
    std::fs::create_dir_all(&dir).map_err(|e| CliError::at(&dir, util::os_reason(&e)))?;
    let deadline = Instant::now() + wait;
    while files.socket.exists() {
        match UnixStream::connect(&files.socket) {
            Ok(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(_) => {
                let pid = std::fs::read_to_string(&files.pid).unwrap_or_default();
                return Err(CliError::at(
                    mnt,
                    format!(
                        "another terrace daemon (pid {}) still serves this mount point",
                        pid.trim()
                    ),
                ));
            }
            Err(_) => {
                let _ = std::fs::remove_file(&files.socket); // stale
            }
        }
    }
    let l = UnixListener::bind(&files.socket)
        .map_err(|e| CliError::at(&files.socket, util::os_reason(&e)))?;
    // Anyone may ask for the status; the control server checks the peer's
    // uid for the rest.
    let _ = std::fs::set_permissions(&files.socket, std::fs::Permissions::from_mode(0o666));
    std::fs::write(&files.pid, format!("{}\n", std::process::id()))
        .map_err(|e| CliError::at(&files.pid, util::os_reason(&e)))?;
    Ok(l)
}

/// Removes the socket and pid file if they are still this process's.
pub fn remove_run_files(files: &RunFiles) {
    let mine = std::fs::read_to_string(&files.pid)
        .map(|s| s.trim() == std::process::id().to_string())
        .unwrap_or(false);
    if mine {
        let _ = std::fs::remove_file(&files.socket);
        let _ = std::fs::remove_file(&files.pid);
    }
}
