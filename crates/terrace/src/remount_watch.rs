//! Read-only remounts reach the daemon through the mount table: FUSE sends
//! nothing when `mount -o remount,ro MNT` (or `,rw`) changes a mount, so a
//! thread watches `/proc/self/mountinfo` (the kernel wakes `poll` with
//! POLLPRI on every change of the mount table; a one-second timeout covers
//! anything missed) and freezes or thaws the pool (core `freeze.rs`).

use std::io::{Read, Seek};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;
use terrace_core::Fs;

/// Whether the (topmost) mount on `mnt` in `mountinfo` is read-only;
/// `None` when nothing is mounted there.
pub fn mount_is_read_only(mountinfo: &str, mnt: &Path) -> Option<bool> {
    crate::util::parse_mountinfo(mountinfo)
        .into_iter()
        .rev()
        .find(|m| m.mount_point == mnt)
        .map(|m| m.read_only)
}

/// Starts the watcher of the mount on `mnt`; it ends with the file system
/// (it holds a weak reference) or when the mount is gone.
pub fn spawn(fs: &Arc<Fs>, mnt: PathBuf, log: fn(String)) {
    let weak: Weak<Fs> = Arc::downgrade(fs);
    let _ = std::thread::Builder::new()
        .name("terrace-remount".into())
        .spawn(move || watch(weak, &mnt, log));
}

fn watch(weak: Weak<Fs>, mnt: &Path, log: fn(String)) {
    let Ok(mut f) = std::fs::File::open("/proc/self/mountinfo") else {
        log(
            "cannot watch /proc/self/mountinfo: a read-only remount will not freeze the pool"
                .into(),
        );
        return;
    };
    let mut seen_mounted = false;
    let mut text = String::new();
    loop {
        text.clear();
        if f.rewind().is_err() || f.read_to_string(&mut text).is_err() {
            return;
        }
        let Some(fs) = weak.upgrade() else { return };
        match mount_is_read_only(&text, mnt) {
            None if seen_mounted => return, // unmounted
            None => {}
            Some(ro) => {
                seen_mounted = true;
                if ro && !fs.is_frozen() && !fs.is_read_only() {
                    match fs.freeze() {
                        Ok(()) => log(format!(
                            "{} remounted read-only: cached data written back, pool marked clean; nothing is written until it is remounted read-write",
                            mnt.display()
                        )),
                        Err(e) => log(format!(
                            "{} remounted read-only, but the pool could not be made clean: {e}",
                            mnt.display()
                        )),
                    }
                } else if !ro && fs.is_frozen() {
                    match fs.thaw() {
                        Ok(()) => log(format!("{} remounted read-write", mnt.display())),
                        Err(e) => log(format!(
                            "{} remounted read-write; marking the pool in use failed: {e}",
                            mnt.display()
                        )),
                    }
                }
            }
        }
        drop(fs);
        let mut p = libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // Safety: `p` is one valid pollfd for the duration of the call, and
        // the descriptor stays open (owned by `f`) until after it.
        unsafe { libc::poll(&mut p, 1, Duration::from_secs(1).as_millis() as i32) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
97 22 0:52 / /mnt/a\\040b rw,nosuid,nodev,relatime shared:60 - fuse.terrace /dev/shm/p.pm rw,user_id=0,group_id=0
98 22 0:53 / /mnt/c ro,nosuid,relatime shared:61 - fuse.terrace /dev/shm/q.pm ro,user_id=0
99 22 0:54 / /mnt/d rw,relatime shared:62 - fuse.terrace /dev/shm/r.pm ro,user_id=0
";

    #[test]
    fn read_only_is_read_from_the_mount_or_its_super_options() {
        assert_eq!(mount_is_read_only(INFO, Path::new("/mnt/a b")), Some(false));
        assert_eq!(mount_is_read_only(INFO, Path::new("/mnt/c")), Some(true));
        assert_eq!(mount_is_read_only(INFO, Path::new("/mnt/d")), Some(true));
        assert_eq!(mount_is_read_only(INFO, Path::new("/mnt/e")), None);
    }
}
