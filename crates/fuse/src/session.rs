//! Running a session: [`mount`] starts fuser's session for a
//! [`FuseAdapter`] on its own threads, [`Mounted`] is the handle on it, and
//! [`unmount`] detaches a mount point (ours or a stale one).
//!
//! Invariants: the notifier and the poller's device are handed to the
//! adapter before the first request is served; dropping a [`Mounted`] does
//! not unmount, and `on_end` runs exactly once, when the session ends.

use crate::latency::RequestLatency;
use crate::{FuseAdapter, MountOptions};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use terrace_core::Fs;

/// A running FUSE session. Dropping it does not unmount: call [`unmount`] (or
/// [`Mounted::unmount`]) and wait for the session's end callback.
pub struct Mounted {
    mountpoint: PathBuf,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Mounted {
    /// The mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts (`lazy`: detach now, finish when the last user goes). The
    /// session then ends and the end callback runs.
    pub fn unmount(&self, lazy: bool) -> io::Result<()> {
        unmount(&self.mountpoint, lazy)
    }

    /// True once the session threads have finished.
    pub fn finished(&self) -> bool {
        self.thread
            .as_ref()
            .map(|t| t.is_finished())
            .unwrap_or(true)
    }

    /// Waits for the session threads.
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Mounts `fs` on `mountpoint` and serves it on background threads. When the
/// session ends (unmounted by anyone, or the connection aborted), `on_end` runs
/// with the session's result. The caller then calls [`Fs::unmount`]. With
/// `latency`, every request's duration is recorded there.
pub fn mount(
    fs: Arc<Fs>,
    mountpoint: &Path,
    opts: &MountOptions,
    latency: Option<Arc<RequestLatency>>,
    on_end: impl FnOnce(io::Result<()>) + Send + 'static,
) -> io::Result<Mounted> {
    let config = opts.to_config();
    let mut adapter = FuseAdapter::with_poll_window(fs, Duration::from_micros(opts.poll_us))
        .with_writeback_cache(opts.writeback_cache)
        .with_posix_acl(opts.acl)
        .with_selinux_labels(opts.selinux_labels)
        .with_fill_after_write(opts.fill_after_write);
    if let Some(l) = latency {
        adapter = adapter.with_latency(l);
    }
    let notifier = adapter.notifier.clone();
    let poller = adapter.poller.clone();
    let session = fuser::Session::new(adapter, mountpoint, &config)?;
    let _ = notifier.set(session.notifier());
    if !poller.window().is_zero() {
        use std::os::fd::AsFd;
        poller.set_device(session.as_fd().try_clone_to_owned()?);
    }
    let thread = std::thread::Builder::new()
        .name("fuse-session".into())
        .spawn(move || {
            let r = session.run();
            on_end(r);
        })?;
    Ok(Mounted {
        mountpoint: mountpoint.to_path_buf(),
        thread: Some(thread),
    })
}

/// Unmounts a FUSE mount point: `umount2(2)` (with `MNT_DETACH` when `lazy`),
/// falling back to `fusermount3 -u`/`fusermount -u` when not privileged.
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    let c = CString::new(mountpoint.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "mount point contains a NUL byte",
        )
    })?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // Safety: `c` is a valid NUL-terminated path for the duration of the call.
    let r = unsafe { libc::umount2(c.as_ptr(), flags) };
    if r == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EPERM) {
        return Err(err);
    }
    for prog in ["fusermount3", "fusermount"] {
        let mut cmd = std::process::Command::new(prog);
        cmd.arg(if lazy { "-uz" } else { "-u" }).arg(mountpoint);
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        // Its message goes into the error (printed once, by the caller), not
        // straight to our stderr.
        if let Ok(out) = cmd.output() {
            if out.status.success() {
                return Ok(());
            }
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.lines().map(str::trim).find(|l| !l.is_empty());
            return Err(io::Error::other(match said {
                Some(l) => l.to_string(),
                None => format!("{prog} -u {} failed", mountpoint.display()),
            }));
        }
    }
    Err(err)
}
