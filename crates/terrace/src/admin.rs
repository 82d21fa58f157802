//! `terrace status`, `terrace umount` and `terrace set`: the commands that
//! ask a mount's daemon over its control socket (the status text is
//! rendered in `status_text.rs`; `terrace fsck` is in `fsck_cmd.rs`).

use crate::control::protocol::{
    self, DaemonStatus, GetStatus, ListSettings, SetSetting, SyncPool, Unmount, UnmountReply,
};
use crate::control::{self, ControlError};
use crate::util::{self, CliError, CliResult};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long `terrace umount` waits for the mount to go and the daemon to exit.
const UMOUNT_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn no_daemon(mnt: &Path, shown: &Path) -> CliError {
    match util::mount_at(mnt) {
        Some(m) if m.fstype.starts_with("fuse") => CliError::at(
            shown,
            format!("mounted ({} from {}), but no terrace daemon answers; it may have died: run `terrace umount {}`", m.fstype, m.source, shown.display()),
        ),
        Some(m) => CliError::at(shown, format!("not a Terrace mount ({} from {})", m.fstype, m.source)),
        None => match util::fuse_mount_containing(mnt) {
            Some(m) => CliError::at(
                shown,
                format!(
                    "not a mount point: it is inside the mount {} (give that mount point instead)",
                    m.mount_point.display()
                ),
            ),
            None => match std::fs::symlink_metadata(mnt) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    CliError::at(shown, "no such file or directory")
                }
                Ok(md) if !md.is_dir() => CliError::at(
                    shown,
                    "not a mount point (a file; give the directory a pool is mounted on)",
                ),
                _ => CliError::at(shown, "not mounted (no terrace daemon serves it)"),
            },
        },
    }
}

/// The status of the daemon serving `mnt`, or the error to print (no
/// daemon, a failed or refused request). For `status` and `iostat`.
pub(crate) fn fetch_status(mnt: &Path) -> CliResult<DaemonStatus> {
    let abs = util::abs_path(mnt);
    match control::call(
        &util::control_socket(&abs),
        GetStatus {},
        Duration::from_secs(10),
    ) {
        Ok(r) => Ok(r.status),
        Err(ControlError::NoDaemon) => Err(no_daemon(&abs, mnt)),
        Err(ControlError::Failed(m)) => Err(CliError::at(mnt, m)),
        Err(ControlError::Refused(r)) => Err(CliError::at(mnt, r.error)),
    }
}

/// `terrace status MOUNTPOINT [--json]`.
pub fn status(mnt: &Path, as_json: bool) -> CliResult {
    let st = fetch_status(mnt)?;
    if as_json {
        // Through a JSON value, whose objects keep their keys sorted: the
        // output lists the fields in the same order as always.
        let v = serde_json::to_value(&st).unwrap_or_default();
        util::out(&serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        util::out(&crate::status_text::render_status(&st));
    }
    Ok(())
}

fn wait_gone(mnt: &Path, pid: Option<i32>, timeout: Duration) -> bool {
    let start = Instant::now();
    loop {
        let mounted = util::mount_at(mnt).is_some_and(|m| m.fstype.starts_with("fuse"));
        let alive = pid.is_some_and(util::process_alive);
        if !mounted && !alive {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `terrace umount MOUNTPOINT [--lazy]`.
pub fn umount(mnt: &Path, lazy: bool) -> CliResult {
    let abs = util::abs_path(mnt);
    let files = util::RunFiles {
        socket: util::control_socket(&abs),
        ..util::run_files(&abs)
    };
    match control::call(&files.socket, Unmount { lazy }, Duration::from_secs(120)) {
        Ok(UnmountReply::Detached { pid, .. }) => {
            util::out(&format!(
                "terrace: detached {}; the daemon (pid {pid}) closes the pool when the last open file closes",
                mnt.display(),
            ));
            Ok(())
        }
        Ok(UnmountReply::Done { pid, read_only, .. }) => {
            if !wait_gone(&abs, Some(pid as i32), UMOUNT_TIMEOUT) {
                return Err(CliError::at(
                    mnt,
                    format!(
                        "the daemon did not finish within {} s",
                        UMOUNT_TIMEOUT.as_secs()
                    ),
                ));
            }
            if read_only {
                util::out(&format!(
                    "terrace: unmounted {}; the mount was read-only: nothing was written",
                    mnt.display()
                ));
            } else {
                util::out(&format!(
                    "terrace: unmounted {}; the pool is persisted and marked clean",
                    mnt.display()
                ));
            }
            Ok(())
        }
        Err(ControlError::Refused(r)) => Err(CliError::new(r.error)),
        Err(ControlError::Failed(m)) => Err(CliError::at(mnt, m)),
        Err(ControlError::NoDaemon) => {
            let Some(m) = util::mount_at(&abs) else {
                return Err(no_daemon(&abs, mnt));
            };
            if !m.fstype.starts_with("fuse") {
                return Err(CliError::at(
                    mnt,
                    format!("not a Terrace mount ({} from {})", m.fstype, m.source),
                ));
            }
            let r = match terrace_fuse::unmount(&abs, lazy) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && !lazy => {
                    return Err(CliError::at(mnt, "target is busy (open files or a working directory inside); close them, or use --lazy"));
                }
                // umount2 failed for another reason: try detaching. A
                // failed fusermount (not privileged) fails the same way
                // lazily; its message is reported once, below.
                Err(e) if e.raw_os_error().is_some() && !lazy => terrace_fuse::unmount(&abs, true),
                ok => ok,
            };
            r.map_err(|e| CliError::at(mnt, format!("cannot unmount: {}", util::os_reason(&e))))?;
            let _ = std::fs::remove_file(&files.socket);
            let _ = std::fs::remove_file(&files.pid);
            util::warn(format!(
                "no terrace daemon answered for {}: unmounted it without marking the pool clean (the next mount recovers it)",
                mnt.display()
            ));
            Ok(())
        }
    }
}

/// Maps a failed control call to the command's error, naming `shown` (the
/// path as given): no daemon serves `mnt`, the call failed, or the daemon
/// refused the request (a refusal with EINVAL, a bad argument such as an
/// unknown setting or value, is a usage error: exit status 2).
pub fn control_failed<'a>(
    mnt: &'a Path,
    shown: &'a Path,
) -> impl Fn(ControlError) -> CliError + 'a {
    move |e| match e {
        ControlError::NoDaemon => no_daemon(mnt, shown),
        ControlError::Failed(m) => CliError::at(shown, m),
        ControlError::Refused(r) if r.errno == Some(libc::EINVAL) => {
            CliError::at(shown, r.error).code(2)
        }
        ControlError::Refused(r) => CliError::at(shown, r.error),
    }
}

/// `terrace set MOUNTPOINT [KEY [VALUE]]`: list, show or change settings of a
/// mounted pool at run time.
/// `terrace sync`: every cached write of the pool written back and synced.
pub fn sync(mnt: &Path) -> CliResult {
    let abs = util::abs_path(mnt);
    let socket = util::control_socket(&abs);
    let failed = control_failed(&abs, mnt);
    // A write-back of a whole cache on a slow disk takes minutes, not hours.
    let r = control::call(&socket, SyncPool {}, Duration::from_secs(3600)).map_err(failed)?;
    util::out(&format!(
        "terrace: {}: every write is durable ({} of cached data written back)",
        mnt.display(),
        util::human_bytes(r.dirty_bytes)
    ));
    Ok(())
}

pub fn set(mnt: &Path, key: Option<&str>, value: Option<&str>) -> CliResult {
    let abs = util::abs_path(mnt);
    let files = util::RunFiles {
        socket: util::control_socket(&abs),
        ..util::run_files(&abs)
    };
    let failed = control_failed(&abs, mnt);
    let timeout = Duration::from_secs(10);
    if let (Some(k), Some(v)) = (key, value) {
        let req = SetSetting {
            key: k.into(),
            value: v.into(),
        };
        let now = control::call(&files.socket, req, timeout).map_err(failed)?;
        util::out(&format!("{k} = {}", now.value));
        return Ok(());
    }
    let rows = control::call(&files.socket, ListSettings {}, timeout)
        .map_err(failed)?
        .settings;
    let mut found = false;
    for r in &rows {
        // The same names as `set MOUNTPOINT KEY VALUE` accepts (`policy`),
        // shown as typed.
        if key.is_some_and(|want| protocol::setting_name(want) != r.key) {
            continue;
        }
        found = true;
        util::out(&format!("{} = {}", key.unwrap_or(&r.key), r.value));
        if key.is_none() {
            util::out(&format!("    {}", r.help));
        }
    }
    if let (Some(k), false) = (key, found) {
        let known: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
        return Err(CliError::usage(format!(
            "unknown setting {k:?}; known: {}",
            known.join(", ")
        )));
    }
    Ok(())
}
