//! `terrace mount`: checks the pool and the mount point, then serves the pool
//! through FUSE — in the foreground, or as a detached daemon (`--daemon`).
//!
//! The serving process (foreground or daemon) holds the pool's advisory lock,
//! listens on the control socket (see [`crate::control`]; run files and
//! `--daemon` in [`crate::daemon`]), and stops cleanly on
//! `terrace umount`, SIGTERM, SIGINT or SIGHUP, or when someone unmounts the
//! mount point: the FUSE session ends first, then [`Fs::unmount`] persists
//! everything and marks the pool clean. A second signal exits at once.
//!
//! With `-o metrics=ADDR` it also serves Prometheus metrics
//! ([`crate::metrics`]): the address is bound before anything else is
//! claimed (a port in use fails the mount), serving starts once the pool is
//! mounted, and stops when the FUSE session has ended, before the pool is
//! persisted.
//!
//! This file checks the pool and serves it; what the command was asked is
//! in `mount/config.rs`, the read-only PM guard in `mount/read_only_pm.rs`.

mod config;
mod read_only_pm;

pub use config::MountConfig;
use read_only_pm::ReadOnlyPm;

use crate::control::protocol::{Refusal, Unmount, UnmountReply};
use crate::control::server::{Responder, Server};
use crate::daemon::{self, remove_run_files};
use crate::util::{self, CliError, CliResult};
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;
use terrace_core::Fs;
use terrace_format::{Superblock, TierKind};
use terrace_media::{PmFile, PmKind};

/// A pool and mount point that passed every check.
struct Prepared {
    pool: PathBuf,
    mnt: PathBuf,
    pm: PmFile,
    lock: File,
    /// Locks of the block tiers (by path), held as long as `lock`.
    tier_locks: Vec<(String, File)>,
    sb: Superblock,
}

/// Checks every block tier against the superblock — present, its header
/// naming this pool, tier id, kind, size and extent size, and the file or
/// device at least as long as the tier — and takes its lock (held for the
/// daemon's life, like the PM file's: `mkfs` refuses a locked file).
fn check_tiers(pool: &Path, sb: &Superblock) -> CliResult<Vec<(String, File)>> {
    let mut locks = Vec::new();
    // An object tier is no file: it is checked when it is opened (`serve`).
    for t in sb
        .tiers
        .iter()
        .filter(|t| t.id != 0 && t.kind != TierKind::S3)
    {
        let what = format!("tier {} ({}) {}", t.id, t.kind.name(), t.path);
        let p = Path::new(&t.path);
        match util::lock_tier(p) {
            Ok(Some(l)) => locks.push((t.path.clone(), l)),
            Ok(None) => {
                return Err(CliError::at(
                    pool,
                    format!("{what} is in use by another terrace process (a mount, fsck or mkfs holds its lock)"),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(CliError::at(pool, format!("{what} is missing")))
            }
            Err(e) => {
                return Err(CliError::at(
                    pool,
                    format!("{what}: {}", util::os_reason(&e)),
                ))
            }
        }
        crate::tier_check::check_tier(t, sb).map_err(|e| CliError::at(pool, e))?;
    }
    Ok(locks)
}

/// How long a mount waits for a pool, or a mount point, that another
/// daemon still holds (it may be finishing an unmount) before saying it is
/// busy.
const BUSY_WAIT: Duration = Duration::from_secs(3);

/// Every check that must pass before anything is written.
fn precheck(cfg: &MountConfig) -> CliResult<Prepared> {
    let raw = &cfg.pool;
    match std::fs::metadata(raw) {
        Ok(m) => {
            use std::os::unix::fs::FileTypeExt;
            if !(m.is_file() || m.file_type().is_block_device()) {
                return Err(CliError::at(
                    raw,
                    "not a Terrace pool (not a regular file or block device)",
                ));
            }
        }
        Err(e) => return Err(CliError::at(raw, util::os_reason(&e))),
    }
    let pool = util::abs_path(raw);
    let head = util::read_head(&pool, 8192).map_err(|e| CliError::at(raw, util::os_reason(&e)))?;
    match util::detect_content(&head) {
        Some("a Terrace pool") => {}
        Some("a block tier of a Terrace pool") => {
            return Err(CliError::at(
                raw,
                "this is a block tier of a Terrace pool; mount the pool by the path of its pm tier",
            ))
        }
        _ => {
            return Err(CliError::at(
                raw,
                "not a Terrace pool (no Terrace superblock)",
            ))
        }
    }
    // A pool being unmounted stays locked until its daemon has persisted
    // it and exited: a mount right after `umount` (a script, xfstests
    // generic/604) waits for that instead of failing.
    let deadline = std::time::Instant::now() + BUSY_WAIT;
    let lock = loop {
        match util::lock_pool(&pool) {
            Ok(Some(l)) => break l,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Ok(None) => return Err(CliError::at(raw, util::busy_reason(&pool))),
            Err(e) => return Err(CliError::at(raw, util::os_reason(&e))),
        }
    };
    // A read-only mount writes nothing: it opens the pool read-only, so it
    // also serves a read-only file system, snapshot or immutable file.
    let opened = if cfg.options.read_only {
        PmFile::open_read_only(&pool)
    } else {
        PmFile::open(&pool)
    };
    let pm = opened.map_err(|e| match crate::tier_check::read_only_refusal(&pool, &e) {
        Some(line) if !cfg.options.read_only => CliError::new(format!("{} {line}", raw.display())),
        _ => CliError::new(e.to_string()),
    })?;
    let sb = terrace_core::recovery::read_superblock(&pm).map_err(|e| CliError::at(raw, e))?;
    if !cfg.options.read_only {
        back_pm_fully(&pm, raw)?;
    }
    let tier_locks = check_tiers(raw, &sb)?;

    let m = &cfg.mountpoint;
    match std::fs::metadata(m) {
        Ok(md) if md.is_dir() => {}
        Ok(_) => return Err(CliError::at(m, "mount point is not a directory")),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            return Err(CliError::at(
                m,
                format!("a dead FUSE mount is still attached (its daemon is gone); run `terrace umount {}` first", m.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(CliError::at(m, "mount point does not exist")),
        Err(e) => return Err(CliError::at(m, util::os_reason(&e))),
    }
    let mnt = util::abs_path(m);
    if let Some(e) = util::mount_at(&mnt) {
        return Err(CliError::at(
            m,
            format!(
                "already a mount point ({} from {}); unmount it or choose another directory",
                e.fstype, e.source
            ),
        ));
    }
    if !cfg.child && pm.kind() == PmKind::File && !cfg.options.read_only {
        util::warn(format!(
            "{} is not on a DAX file system or tmpfs: every persist needs msync and will be slow",
            pool.display()
        ));
    }
    Ok(Prepared {
        pool,
        mnt,
        pm,
        lock,
        tier_locks,
        sb,
    })
}

/// Has the file system under a PM file allocate all of it before the pool
/// is served. mkfs creates the file sparse; a store into a page its file
/// system can no longer back (the tmpfs or the disk filled up since) faults
/// with SIGBUS, which would kill the daemon. So the mount takes the space
/// now, once (on tmpfs: the memory), or refuses with how much is missing.
/// A file system that cannot preallocate gets a warning.
fn back_pm_fully(pm: &PmFile, raw: &Path) -> CliResult {
    let need = pm
        .unbacked_bytes()
        .map_err(|e| CliError::at(raw, util::os_reason(&e)))?;
    if need == 0 {
        return Ok(());
    }
    let why = "a store into a page it cannot back would kill the daemon";
    if pm.kind() == PmKind::Tmpfs {
        if let Some(available) = util::memory_available() {
            if need > available {
                return Err(CliError::at(
                    raw,
                    format!(
                        "the pm tier needs {} more memory to be fully backed, and {} is available (RAM and swap): tmpfs keeps PM in memory, and {why}; free memory or use a smaller pool",
                        util::human_bytes(need),
                        util::human_bytes(available)
                    ),
                ));
            }
        }
    }
    match pm.back_fully() {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
            let free = util::free_space(raw)
                .map(util::human_bytes)
                .unwrap_or_else(|_| "less".into());
            Err(CliError::at(
                raw,
                format!(
                    "its file system cannot back the whole pm tier: {} of it is not allocated yet and {free} is free there, and {why}; free space on that file system first",
                    util::human_bytes(need)
                ),
            ))
        }
        Err(e) => {
            util::warn(format!(
                "{}: could not preallocate the pm tier ({}): if its file system fills up, a store into the pool may kill the daemon",
                raw.display(),
                util::os_reason(&e)
            ));
            Ok(())
        }
    }
}

/// Runs `terrace mount`.
pub fn run(cfg: &MountConfig) -> CliResult {
    // Settings first: a bad one fails before the pool is even opened.
    let settings = cfg.finished_settings()?;
    let p = precheck(cfg)?;
    if cfg.daemon && !cfg.child {
        let (pool, mnt) = (p.pool.clone(), p.mnt.clone());
        drop(p); // the daemon takes the lock itself
        return daemon::spawn(&cfg.raw_options, &pool, &mnt);
    }
    serve(cfg, p, settings)
}

enum Event {
    Signal(i32),
    SessionEnded(io::Result<()>),
    Umount {
        lazy: bool,
        reply: Responder<Unmount>,
    },
}

/// One line of the daemon's log: on stderr (the log file of a detached
/// daemon) and, when there is one, in the system log ([`crate::syslog`]).
fn log(msg: impl std::fmt::Display) {
    let msg = msg.to_string();
    eprintln!("{}", crate::syslog::stderr_line(std::process::id(), &msg));
    crate::syslog::send(&msg);
}

fn serve(cfg: &MountConfig, p: Prepared, settings: terrace_policy::Settings) -> CliResult {
    let Prepared {
        pool,
        mnt,
        pm,
        lock,
        tier_locks,
        sb,
    } = p;
    // First, so that a port in use fails the mount before anything is claimed.
    let metrics_endpoint = match cfg.metrics {
        Some(addr) => Some(crate::metrics::http::Endpoint::bind(addr).map_err(|e| {
            let hint = match e.kind() {
                io::ErrorKind::AddrInUse => " (another process listens there: choose another port)",
                io::ErrorKind::AddrNotAvailable => " (not an address of this machine)",
                _ => "",
            };
            CliError::new(format!(
                "metrics={addr}: cannot serve metrics there: {}{hint}",
                util::os_reason(&e)
            ))
        })?),
        None => None,
    };
    let files = util::run_files(&mnt);
    let listener = daemon::claim_run_files(&files, &cfg.mountpoint, BUSY_WAIT)?;
    let read_only = cfg.options.read_only;
    let mut devices: Vec<(u8, Arc<dyn terrace_media::BlockMedia>)> = Vec::new();
    for t in sb.tiers.iter().filter(|t| t.id != 0) {
        if t.kind == TierKind::S3 {
            let net = terrace_core::fs::object_network(&settings);
            match crate::object_tier::open(t, &sb, Some(net)) {
                Ok(m) => devices.push((t.id, Arc::new(m))),
                Err(e) => {
                    remove_run_files(&files);
                    return Err(CliError::at(&cfg.pool, e));
                }
            }
            continue;
        }
        // Read-only mounts open block tiers O_RDONLY: no write can reach them.
        let opened = if read_only {
            terrace_media::BlockFile::open_read_only(&t.path)
        } else {
            terrace_media::BlockFile::open(&t.path)
        };
        match opened {
            Ok(f) => {
                if let Some(why) = f.fallback_reason() {
                    log(format!("warning: tier {} ({}): {why}", t.id, t.path));
                }
                devices.push((t.id, Arc::new(f)));
            }
            Err(e) => {
                remove_run_files(&files);
                let why = crate::tier_check::read_only_refusal(Path::new(&t.path), &e)
                    .map_or_else(|| format!(": {e}"), |l| format!(" {l}"));
                return Err(CliError::at(
                    &cfg.pool,
                    format!("tier {} ({}){why}", t.id, t.path),
                ));
            }
        }
    }
    let opening = std::time::Instant::now();
    let mounted = if read_only {
        Fs::mount_read_only(Arc::new(ReadOnlyPm::new(pm)), devices)
    } else {
        Fs::mount_with_tiers(Arc::new(pm), devices)
    };
    let fs = match mounted {
        Ok(f) => Arc::new(f),
        Err(e) => {
            remove_run_files(&files);
            return Err(CliError::at(&cfg.pool, e));
        }
    };
    // Validated before the pool was opened; this only installs them.
    if let Err(e) = fs.apply_settings(settings) {
        remove_run_files(&files);
        let _ = fs.unmount();
        return Err(CliError::new(format!("invalid settings: {e}")));
    }
    // A read-only mount has nothing to write back and must move nothing.
    if !read_only {
        fs.start_writeback();
        fs.start_migration();
    }
    spawn_notice_logger(&fs);
    // Reads write no access times on read-only and noatime mounts.
    fs.set_atime_mode(match cfg.options.atime {
        _ if cfg.options.read_only => terrace_core::AtimeMode::Never,
        terrace_fuse::AtimeOption::Never => terrace_core::AtimeMode::Never,
        terrace_fuse::AtimeOption::Strict => terrace_core::AtimeMode::Strict,
        terrace_fuse::AtimeOption::Relative => terrace_core::AtimeMode::Relative,
    });
    let rep = fs.mount_report().clone();
    if rep.recovered_in_memory {
        log(format!(
            "{} was not cleanly unmounted: served read-only as recovery leaves it ({} transactions rolled back in memory only, nothing written); the next read-write mount recovers it on media",
            pool.display(),
            rep.rolled_back
        ));
    } else if !rep.was_clean {
        log(recovery_summary(&pool, &rep, opening.elapsed()));
    }
    if rep.object_orphans > 0 {
        log(format!(
            "deleted {} orphan parts ({}) of the object tier: uploads whose commit never happened",
            rep.object_orphans,
            util::human_bytes(rep.object_orphan_bytes)
        ));
    }
    for e in &rep.object_sweep_errors {
        log(format!(
            "warning: {e}: orphan parts stay until the next mount"
        ));
    }
    if !rep.damaged.is_empty() {
        log(format!(
            "warning: the pool is damaged; mounted read-only serving around {} problems (the damaged files' data returns EIO). Copy what you need off, unmount, then run `terrace fsck --repair {}`:",
            rep.damaged.len(),
            pool.display()
        ));
        for d in rep.damaged.iter().take(20) {
            log(format!("  {d}"));
        }
        if rep.damaged.len() > 20 {
            log(format!(
                "  ... and {} more (`terrace fsck` lists them all)",
                rep.damaged.len() - 20
            ));
        }
    }
    if rep.link_count_warnings > 0 {
        log(format!(
            "warning: {} link-count mismatches found; run `terrace fsck --repair {}` after unmounting",
            rep.link_count_warnings,
            pool.display()
        ));
    }

    let (tx, rx) = mpsc::channel::<Event>();
    let mut signals =
        signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT, libc::SIGHUP]).map_err(
            |e| {
                remove_run_files(&files);
                let _ = fs.unmount();
                CliError::new(format!("cannot install signal handlers: {e}"))
            },
        )?;
    {
        let tx = tx.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for s in signals.forever() {
                    if tx.send(Event::Signal(s)).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| CliError::new(format!("cannot start a thread: {e}")))?;
    }
    // From here on the daemon holds them where a tier's removal finds them.
    crate::tier_cmd::hold_tier_locks(tier_locks);
    {
        let server = Server {
            fs: fs.clone(),
            pool: pool.clone(),
            mnt: mnt.clone(),
            metrics: metrics_endpoint
                .as_ref()
                .and_then(|ep| ep.local_addr().ok())
                .map(|a| format!("http://{a}/metrics")),
        };
        let tx = tx.clone();
        server
            .spawn(listener, move |u, reply| {
                tx.send(Event::Umount {
                    lazy: u.lazy,
                    reply,
                })
                .is_ok()
            })
            .map_err(|e| CliError::new(format!("cannot start a thread: {e}")))?;
    }
    let mut opts = cfg.options.clone();
    opts.fsname = pool.to_string_lossy().into_owned();
    let ended = tx.clone();
    // Requests are timed only when someone can read the times.
    let latency = metrics_endpoint
        .as_ref()
        .map(|_| Arc::new(terrace_fuse::latency::RequestLatency::default()));
    let mounted = match terrace_fuse::mount(fs.clone(), &mnt, &opts, latency.clone(), move |r| {
        let _ = ended.send(Event::SessionEnded(r));
    }) {
        Ok(m) => m,
        Err(e) => {
            let _ = fs.unmount();
            remove_run_files(&files);
            return Err(CliError::at(
                &cfg.mountpoint,
                format!(
                    "cannot mount: {}{}",
                    e.to_string().trim_end(),
                    dev_fuse_hint(&e)
                ),
            ));
        }
    };
    drop(tx);
    // A read-only remount freezes the pool (FUSE does not tell the daemon).
    if !read_only {
        crate::remount_watch::spawn(&fs, mnt.clone(), |m: String| log(m));
    }
    let metrics = match (metrics_endpoint, latency) {
        (Some(ep), Some(latency)) => serve_metrics(ep, &fs, latency, read_only),
        _ => None,
    };
    let tiers = sb.tiers.len();
    log(format!(
        "mounted {} on {} ({} tier{}, {}); stop with `terrace umount {}` or Ctrl-C",
        pool.display(),
        mnt.display(),
        tiers,
        if tiers == 1 { "" } else { "s" },
        fs.media().describe(),
        mnt.display()
    ));
    // Under systemd (Type=notify): the mount is in place.
    crate::sd_notify::ready();

    let mut waiting: Vec<Responder<Unmount>> = Vec::new();
    let mut signals_seen = 0;
    let mut forced = false;
    while let Ok(ev) = rx.recv() {
        match ev {
            Event::SessionEnded(r) => {
                if let Err(e) = r {
                    log(format!("FUSE session ended with an error: {e}"));
                }
                break;
            }
            Event::Umount { lazy, reply } => {
                match persist_before_detach(&fs).and_then(|()| mounted.unmount(lazy)) {
                    Ok(()) if lazy => {
                        log("detached lazily; finishing when the last open file closes");
                        reply.answer(&Ok(UnmountReply::Detached {
                            pid: std::process::id(),
                            detached: true,
                        }));
                    }
                    Ok(()) => waiting.push(reply),
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => waiting.push(reply), // already detached
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => reply.refuse(format!(
                        "{}: target is busy (open files or a working directory inside); close them, or use `terrace umount --lazy`",
                        mnt.display()
                    )),
                    Err(e) if e.kind() == io::ErrorKind::Other => {
                        reply.refuse(format!("{}: {e}", mnt.display()))
                    }
                    Err(e) => {
                        reply.refuse(format!("{}: {}", mnt.display(), util::os_reason(&e)))
                    }
                }
            }
            Event::Signal(s) => {
                signals_seen += 1;
                if signals_seen > 1 {
                    log("second signal: exiting now");
                    forced = true;
                    break;
                }
                log(format!("signal {s}: unmounting"));
                if persist_before_detach(&fs).is_err() {
                    // Said in the log already; the pool stays mounted.
                    log("signal again to exit anyway");
                    continue;
                }
                match mounted.unmount(false) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        log("mount point busy: detaching lazily; the pool is closed when the last open file closes (signal again to exit now)");
                        if let Err(e) = mounted.unmount(true) {
                            log(format!("lazy unmount failed: {e}"));
                        }
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                    Err(e) => log(format!("unmount failed: {e}")),
                }
            }
        }
    }
    crate::sd_notify::stopping();
    if !forced {
        mounted.join();
    }
    // No scrape may look at the pool while it is being persisted.
    if let Some(m) = metrics {
        m.stop();
    }
    // What the core said since the logger's last round, and while it
    // persists: nothing is lost at the unmount.
    log_notices(&fs);
    let r = fs.unmount();
    log_notices(&fs);
    crate::tier_cmd::release_tier_locks();
    drop(lock);
    remove_run_files(&files);
    match &r {
        Ok(()) => {
            log(format!(
                "unmounted {}; {}",
                mnt.display(),
                if read_only {
                    format!("{} was read-only: nothing was written", pool.display())
                } else {
                    format!("{} persisted and marked clean", pool.display())
                }
            ));
            for w in &waiting {
                w.answer(&Ok(UnmountReply::Done {
                    pid: std::process::id(),
                    clean: true,
                    read_only,
                }));
            }
        }
        Err(e) => {
            log(format!("persisting {} failed: {e}", pool.display()));
            let why = Refusal::new(format!("persisting {} failed: {e}", pool.display()));
            for w in &waiting {
                w.answer(&Err(why.clone()));
            }
        }
    }
    if forced {
        // Session threads may still be inside the core; leave without waiting.
        let _ = io::stderr().flush();
        std::process::exit(if r.is_ok() { 0 } else { 1 });
    }
    r.map_err(|e| CliError::at(&cfg.pool, format!("persisting failed: {e}")))
}

/// Starts answering scrapes on `ep` with the status of `fs` and the request
/// latencies; logs where. A thread that cannot start leaves the mount
/// without metrics (it is in place already), said in the log.
fn serve_metrics(
    ep: crate::metrics::http::Endpoint,
    fs: &Arc<Fs>,
    latency: Arc<terrace_fuse::latency::RequestLatency>,
    read_only: bool,
) -> Option<crate::metrics::http::Serving> {
    let addr = ep.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let fs = fs.clone();
    let page = move || {
        crate::metrics::collect::render(crate::metrics::collect::Sample {
            status: fs.status(),
            latency: latency.snapshot(),
            read_only,
        })
        .map_err(|_| "the page could not be encoded".to_string())
    };
    match ep.serve(page) {
        Ok(s) => {
            log(format!("serving metrics on http://{addr}/metrics"));
            Some(s)
        }
        Err(e) => {
            log(format!(
                "not serving metrics on {addr}: cannot start a thread: {e}"
            ));
            None
        }
    }
}

/// The log line of a mount that found the pool not cleanly unmounted: how
/// long opening it took and what recovery replayed and reclaimed. Not
/// logged after a clean unmount: the same replay then recovers nothing.
fn recovery_summary(pool: &Path, rep: &terrace_core::MountReport, took: Duration) -> String {
    let n = |count: u64, one: &str, many: &str| {
        format!("{count} {}", if count == 1 { one } else { many })
    };
    format!(
        "{} was not cleanly unmounted: recovered in {:.2} s: replayed {} ({}), rolled back {}, freed {} ({})",
        pool.display(),
        took.as_secs_f64(),
        n(rep.replayed.logs, "inode log", "inode logs"),
        n(rep.replayed.entries, "entry", "entries"),
        n(rep.rolled_back as u64, "journal transaction", "journal transactions"),
        n(rep.orphans_freed as u64, "orphan inode", "orphan inodes"),
        util::human_bytes(rep.orphan_bytes)
    )
}

/// Writes back every cached write before the mount point is detached, so a
/// pool whose cached data cannot be persisted stays mounted (its data kept
/// and readable) instead of disappearing with acknowledged writes unwritten.
fn persist_before_detach(fs: &Fs) -> io::Result<()> {
    fs.persist_cached().map_err(|e| {
        let msg = format!(
            "not unmounting: cached writes could not be persisted ({}); the pool stays mounted with them, free space or fix the device and unmount again",
            util::os_reason(&e)
        );
        log(msg.clone());
        io::Error::other(msg)
    })
}

/// Logs what the core has to say on its own (a migration that stalls and
/// why, once; operations that waited for PM room and gave up), once a second
/// while the pool is mounted.
fn spawn_notice_logger(fs: &Arc<Fs>) {
    let weak = Arc::downgrade(fs);
    let _ = std::thread::Builder::new()
        .name("terrace-notices".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let Some(fs) = weak.upgrade() else { return };
            log_notices(&fs);
        });
}

/// Logs the core's notices not logged yet.
fn log_notices(fs: &Fs) {
    for n in fs.take_notices() {
        log(n);
    }
}

/// What to do when the FUSE device refused the user: "Permission denied"
/// alone does not name /dev/fuse, nor what to change.
fn dev_fuse_hint(e: &std::io::Error) -> String {
    use std::os::unix::fs::PermissionsExt;
    if e.kind() != std::io::ErrorKind::PermissionDenied {
        return String::new();
    }
    match std::fs::metadata("/dev/fuse") {
        Ok(m) if m.permissions().mode() & 0o006 != 0o006 => format!(
            " (opening /dev/fuse: it has mode {:04o} here, so only root can mount FUSE file \
             systems; most systems give it 0666: `chmod 0666 /dev/fuse` as root, or mount as \
             root with -o allow_other)",
            m.permissions().mode() & 0o7777
        ),
        _ => String::new(),
    }
}
