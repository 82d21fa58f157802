//! `terrace tier add TARGET KIND:PATH[:SIZE]` and `terrace tier remove
//! TARGET`: growing and shrinking a pool's tier list (issue 19, design.md
//! §3, "Adding and removing tiers"). TARGET is a mount point (or the PM
//! tier of a mounted pool), whose daemon makes the change
//! ([`attach`], [`detach`]: control requests `tier_add`, `tier_remove`), or
//! an unmounted pool, which this process changes.
//!
//! Invariants:
//! - An unmounted pool is changed only with the pool's lock held
//!   throughout (a daemon, fsck or mkfs holding it makes the command
//!   refuse), and no mount of it may be listed in the mount table. A
//!   mounted pool is changed by its daemon only.
//! - Tiers stay ordered from fastest to slowest (pm, ssd, hdd, s3), at most
//!   one s3 tier and always last, after a block tier: a tier is appended
//!   only when that order still holds (its id one above the last tier's),
//!   and removing any tier keeps it.
//! - The superblock is the commit point. `add` writes the new tier's header
//!   (or creates the object tier) first and the superblock (both copies, a
//!   higher generation) last, so a crash in between leaves the pool as it
//!   was plus a formatted tier file that nothing names. `remove` (of any
//!   tier but pm; the others keep their ids) goes through
//!   `Fs::detach_tier`, which retires the tier (nothing lands there any
//!   more), moves the files' data off it (`Fs::evacuate_tier`: to the next
//!   tier below, the last tier's to the nearest one above), drops its clean
//!   copies, proves that nothing else (logs, open deleted files) is stored
//!   there and commits the superblock without it — in the daemon of a mounted pool,
//!   or in this process for an unmounted one (mounted here, no FUSE, then
//!   unmounted cleanly). The tier header is wiped after the commit, a
//!   daemon's lock on the tier's file released last.
//! - The daemon holds the lock of every block tier file of its pool, those
//!   it mounted with and those attached since ([`hold_tier_locks`]), until
//!   the unmount or the tier's removal.
//! - While a removal runs (its data moving off, for as long as that takes)
//!   `add` on the mounted pool is refused at once, before the new tier's
//!   file is formatted (`Fs::refuse_while_removing`), rather than queued
//!   behind the removal. A freeze or an unmount stops the removal
//!   (refused, the tier kept: `Fs::evacuate_tier`); a `remove` whose daemon
//!   went away with its pool unmounted says so.

use crate::mkfs::{self, TierSpec};
use crate::util::{self, CliError, CliResult};
use std::path::Path;
use std::sync::Arc;
use terrace_format::{Superblock, TierKind, TierRecord, BLOCK_SIZE};
use terrace_media::{BlockMedia, PmFile, PmMedia};

/// The pool opened for a change of its tiers: lock held, superblock read.
struct Opened {
    _lock: std::fs::File,
    path: std::path::PathBuf,
    pm: PmFile,
    sb: Superblock,
}

fn open_unmounted(pool: &Path) -> CliResult<Opened> {
    if let Err(e) = std::fs::metadata(pool) {
        return Err(CliError::at(pool, util::os_reason(&e)));
    }
    let path = util::abs_path(pool);
    let head = util::read_head(&path, 8192).map_err(|e| CliError::at(pool, util::os_reason(&e)))?;
    if util::detect_content(&head) != Some("a Terrace pool") {
        return Err(CliError::at(
            pool,
            "not a Terrace pool (no Terrace superblock); name the pool by its pm tier",
        ));
    }
    let lock = util::lock_unmounted_pool(pool, &path, "tiers change only while it is unmounted")?;
    let pm = PmFile::open(&path).map_err(|e| CliError::new(e.to_string()))?;
    let sb = terrace_core::recovery::read_superblock(&pm).map_err(|e| CliError::at(pool, e))?;
    Ok(Opened {
        _lock: lock,
        path,
        pm,
        sb,
    })
}

/// Why `spec` cannot follow the pool's current last tier, if it cannot:
/// the core's rule ([`terrace_core::tier_attach::attach_problem`], the same
/// check a mounted pool makes), then a path the pool already uses.
fn order_problem(tiers: &[TierRecord], spec: &TierSpec) -> Option<String> {
    let probe = TierRecord {
        id: terrace_core::tier_attach::next_tier_id(tiers),
        kind: spec.kind,
        size: 0,
        extent_size: 0,
        path: String::new(),
        epoch: 0,
    };
    if let Some(why) = terrace_core::tier_attach::attach_problem(tiers, &probe) {
        return Some(why);
    }
    let named = spec.path.to_string_lossy();
    let abs = if spec.kind == TierKind::S3 {
        named.into_owned()
    } else {
        util::abs_path(&spec.path).to_string_lossy().into_owned()
    };
    if let Some(t) = tiers.iter().find(|t| t.path == abs) {
        return Some(format!("tier {} of this pool is already {abs}", t.id));
    }
    None
}

fn write_superblock(o: &Opened, sb: &Superblock) -> CliResult {
    terrace_core::mkfs::write_superblock(&o.pm, sb);
    o.pm.sync_all().map_err(|e| {
        CliError::at(
            &o.path,
            format!("cannot persist the superblock: {}", util::os_reason(&e)),
        )
    })
}

/// Checks that `spec` may follow the tiers of `sb` and formats it: writes
/// a block tier's header (synced), or creates an object tier's marker.
/// Returns the tier's record for the superblock and, for a file, its lock
/// (to hold while the tier is in use). Nothing names the tier yet: a crash
/// after this leaves a formatted file the pool does not use.
fn prepare(
    sb: &Superblock,
    spec: &TierSpec,
    force: bool,
) -> CliResult<(TierRecord, Option<std::fs::File>)> {
    if let Some(why) = order_problem(&sb.tiers, spec) {
        return Err(CliError::at(&spec.path, why).code(2));
    }
    let id = terrace_core::tier_attach::next_tier_id(&sb.tiers);
    // Block tiers keep the pool's extent size (the first block tier's; 512K
    // when the pool had none).
    let extent_size = sb
        .tiers
        .iter()
        .find(|t| t.id != 0 && t.kind != TierKind::S3)
        .map(|t| t.extent_size)
        .unwrap_or(terrace_format::DEFAULT_EXTENT_SIZE);
    if spec.kind == TierKind::S3 {
        let r = mkfs::object_tier_record(spec, id)?;
        mkfs::create_object_tier(&r, sb.uuid)?;
        return Ok((r, None));
    }
    let mut t = mkfs::examine(spec, force)?;
    if t.size < u64::from(extent_size) * 2 {
        return Err(CliError::at(
            &spec.path,
            format!(
                "too small for two extents of {}",
                util::human_bytes(u64::from(extent_size))
            ),
        )
        .code(2));
    }
    mkfs::check_free_space(std::slice::from_ref(&t), force)?;
    let r = TierRecord {
        id,
        kind: spec.kind,
        size: t.size,
        extent_size,
        path: t.path.to_string_lossy().into_owned(),
        epoch: terrace_core::tier_epoch::new_epoch(),
    };
    mkfs::write_tier_header(&t, &mkfs::tier_header(&r, sb.uuid)).map_err(|e| {
        CliError::at(
            &spec.path,
            format!("cannot write the tier header: {}", util::os_reason(&e)),
        )
    })?;
    let lock = match t.lock.take() {
        Some(l) => Some(l),
        // A file mkfs made: lock it now.
        None => util::lock_tier(&t.path).ok().flatten(),
    };
    Ok((r, lock))
}

fn added_line(record: &TierRecord, pool: &str) -> String {
    format!(
        "Added tier {}  {}  {}  {} to the pool {pool}",
        record.id,
        record.kind.name(),
        util::human_bytes(record.size),
        record.path,
    )
}

/// A tier argument: parsed, and as written (an object tier's URL goes to
/// the daemon as written; a file's path goes absolute, as the daemon's
/// working directory is not the caller's).
#[derive(Debug, Clone)]
pub struct TierArg {
    /// The parsed tier.
    pub spec: TierSpec,
    raw: String,
}

impl TierArg {
    /// Parses a `KIND:PATH[:SIZE]` argument (clap's value parser).
    pub fn parse(s: &str) -> Result<TierArg, String> {
        Ok(TierArg {
            spec: mkfs::parse_tier(s)?,
            raw: s.to_string(),
        })
    }

    /// The argument as the daemon must read it.
    fn for_daemon(&self) -> String {
        if self.spec.kind == TierKind::S3 {
            return self.raw.clone();
        }
        let path = util::abs_path(&self.spec.path);
        match self.spec.size {
            Some(n) => format!("{}:{}:{n}", self.spec.kind.name(), path.display()),
            None => format!("{}:{}", self.spec.kind.name(), path.display()),
        }
    }
}

/// The mount point `target` names: itself when it is a FUSE mount, or
/// where the pool whose PM tier it is is mounted; `None` for an unmounted
/// pool.
fn mount_of(target: &Path) -> Option<std::path::PathBuf> {
    let abs = util::abs_path(target);
    if util::mount_at(&abs).is_some_and(|m| m.fstype.starts_with("fuse")) {
        Some(abs)
    } else {
        util::mounts_of_pool(&abs)
            .first()
            .map(|m| m.mount_point.clone())
    }
}

/// Runs `terrace tier add TARGET SPEC`: TARGET is a mount point (or the
/// PM tier of a mounted pool), whose daemon attaches the tier at once, or
/// an unmounted pool, whose superblock this process changes.
pub fn add(target: &Path, tier: &TierArg, force: bool) -> CliResult {
    match mount_of(target) {
        Some(mnt) => add_mounted(target, &mnt, &tier.for_daemon(), force),
        None => add_unmounted(target, &tier.spec, force),
    }
}

fn add_unmounted(pool: &Path, spec: &TierSpec, force: bool) -> CliResult {
    let o = open_unmounted(pool)?;
    let (record, _tier_lock) = prepare(&o.sb, spec, force)?;
    let mut sb = o.sb.clone();
    sb.tiers.push(record.clone());
    sb.generation += 1;
    write_superblock(&o, &sb)?;
    util::out(&added_line(&record, &o.path.to_string_lossy()));
    Ok(())
}

/// Asks the daemon serving `mnt` to attach the tier.
fn add_mounted(shown: &Path, mnt: &Path, spec: &str, force: bool) -> CliResult {
    use crate::control::{self, protocol::AddTier};
    let req = AddTier {
        spec: spec.to_string(),
        force,
    };
    let got = control::call(
        &util::control_socket(mnt),
        req,
        std::time::Duration::from_secs(120),
    )
    .map_err(crate::admin::control_failed(mnt, shown))?;
    util::out(&format!(
        "Added tier {}  {}  {}  {} to the pool mounted on {}; it takes data now",
        got.id,
        got.kind,
        util::human_bytes(got.size),
        got.path,
        mnt.display()
    ));
    Ok(())
}

/// The locks of the block tier files of the mounted pool, by path: those
/// it was mounted with and those attached since (held by the daemon until
/// the unmount, then released before the pool's lock, or until the tier is
/// removed).
static TIER_LOCKS: std::sync::Mutex<Vec<(String, std::fs::File)>> =
    std::sync::Mutex::new(Vec::new());

fn tier_locks() -> std::sync::MutexGuard<'static, Vec<(String, std::fs::File)>> {
    TIER_LOCKS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Holds the locks of tier files (path, lock) for the daemon.
pub(crate) fn hold_tier_locks(locks: impl IntoIterator<Item = (String, std::fs::File)>) {
    tier_locks().extend(locks);
}

/// Releases every tier lock the daemon holds: called at the unmount,
/// before the pool's lock is released.
pub(crate) fn release_tier_locks() {
    tier_locks().clear();
}

/// Releases the lock of the tier file `path` (removed from the pool).
fn release_tier_lock(path: &str) {
    tier_locks().retain(|(p, _)| p != path);
}

/// The daemon's side of `tier add MOUNTPOINT`: formats the tier, opens it
/// and attaches it to the mounted pool (the superblock is the commit point,
/// `Fs::attach_tier`). A file tier's lock is held until the unmount, like
/// the locks of the tiers it mounted with.
pub(crate) fn attach(
    fs: &terrace_core::Fs,
    a: &crate::control::protocol::AddTier,
) -> crate::control::protocol::Answer<crate::control::protocol::TierAdded> {
    use crate::control::protocol::{Refusal, TierAdded};
    let refuse = |e: CliError| Refusal::new(e.msg);
    // Before the tier's file is formatted: a removal under way holds the
    // tier change for as long as its data takes to move.
    fs.refuse_while_removing()
        .map_err(|e| Refusal::new(format!("cannot add a tier now: {e}")))?;
    let spec = mkfs::parse_tier(&a.spec).map_err(Refusal::new)?;
    if spec.kind != TierKind::S3 && spec.path.is_relative() {
        return Err(Refusal::new(format!(
            "{}: the daemon takes absolute paths only",
            spec.path.display()
        )));
    }
    let sb = fs.superblock();
    let (record, lock) = prepare(&sb, &spec, a.force).map_err(refuse)?;
    let media: Arc<dyn BlockMedia> = if record.kind == TierKind::S3 {
        let net = terrace_core::fs::object_network(&fs.settings());
        Arc::new(crate::object_tier::open(&record, &sb, Some(net)).map_err(Refusal::new)?)
    } else {
        Arc::new(
            terrace_media::BlockFile::open(&record.path)
                .map_err(|e| Refusal::new(format!("tier {} ({}): {e}", record.id, record.path)))?,
        )
    };
    fs.attach_tier(record.clone(), media)
        .map_err(|e| Refusal::new(format!("cannot attach the tier: {e}")))?;
    // Held until the pool is unmounted, like the mounted tiers' locks.
    if let Some(l) = lock {
        hold_tier_locks([(record.path.clone(), l)]);
    }
    Ok(TierAdded {
        id: record.id,
        kind: record.kind.name().to_string(),
        size: record.size,
        path: record.path,
    })
}

/// Opens every block tier of `sb` as a mount would.
fn open_tiers(sb: &Superblock) -> CliResult<Vec<(u8, Arc<dyn BlockMedia>)>> {
    let mut out: Vec<(u8, Arc<dyn BlockMedia>)> = Vec::new();
    for t in sb.tiers.iter().filter(|t| t.id != 0) {
        if t.kind == TierKind::S3 {
            let m = crate::object_tier::open(t, sb, None).map_err(CliError::new)?;
            out.push((t.id, Arc::new(m)));
            continue;
        }
        crate::tier_check::check_tier(t, sb).map_err(CliError::new)?;
        let f = terrace_media::BlockFile::open(&t.path)
            .map_err(|e| CliError::new(format!("tier {} ({}): {e}", t.id, t.path)))?;
        out.push((t.id, Arc::new(f)));
    }
    Ok(out)
}

/// Runs `terrace tier remove TARGET [TIER]`: removes the tier named (an id
/// or a kind; by default the last tier), moving its data to the other
/// tiers first. TARGET is a mount point (or the PM tier of a mounted
/// pool), whose daemon removes it at once, or an unmounted pool.
pub fn remove(target: &Path, tier: Option<&str>) -> CliResult {
    match mount_of(target) {
        Some(mnt) => remove_mounted(target, &mnt, tier),
        None => remove_unmounted(target, tier),
    }
}

/// How long `tier remove` waits for the daemon's answer: a removal moves
/// the tier's data first, which takes as long as the data takes to copy,
/// so no fixed limit fits; the daemon's status is polled meanwhile
/// ([`STATUS_SILENCE`]) and a dead daemon closes the connection.
const REMOVE_ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// How long the daemon may leave status requests unanswered while a
/// removal runs before the command gives up waiting (the removal goes on).
const STATUS_SILENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// The tier of `tiers` (the daemon's status) that `tier` names, as the
/// daemon resolves it: an id, a kind one tier has, or the last tier.
fn named_in_status<'a>(
    tiers: &'a [terrace_core::status::TierStatus],
    tier: Option<&str>,
) -> Option<&'a terrace_core::status::TierStatus> {
    match tier {
        None => tiers.iter().filter(|t| t.id != 0).max_by_key(|t| t.id),
        Some(t) => {
            if let Ok(id) = t.parse::<u8>() {
                return tiers.iter().find(|s| s.id == id);
            }
            let mut of_kind = tiers.iter().filter(|s| s.kind == t);
            match (of_kind.next(), of_kind.next()) {
                (Some(one), None) => Some(one),
                _ => None,
            }
        }
    }
}

/// The progress of a removal's evacuation: a bar over the bytes the tier
/// held (on stderr, only on a terminal), advanced as its use falls.
fn evacuation_bar(total: u64) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if total == 0 || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "moving off [{bar:40}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, {eta}) {msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Asks the daemon serving `mnt` to remove the tier. The daemon moves the
/// tier's data off first (`Fs::evacuate_tier`): the command says so, shows
/// a progress bar on a terminal (from the tier's use in the daemon's
/// status) and waits for the answer however long the move takes, as long
/// as the daemon answers status requests.
fn remove_mounted(shown: &Path, mnt: &Path, tier: Option<&str>) -> CliResult {
    use crate::control::{
        self,
        protocol::{GetStatus, RemoveTier},
        ControlError,
    };
    use std::time::{Duration, Instant};
    let socket = util::control_socket(mnt);
    let status = |wait: u64| control::call(&socket, GetStatus {}, Duration::from_secs(wait));
    let held = status(10).ok().and_then(|r| {
        named_in_status(&r.status.core.tiers, tier)
            .filter(|t| t.id != 0 && t.used > 0)
            .map(|t| (t.id, t.kind.to_string(), t.used))
    });
    if let Some((id, kind, used)) = &held {
        util::out(&format!(
            "Removing tier {id} ({kind}, {} on it): its data moves to the other tiers first",
            util::human_bytes(*used)
        ));
    }
    let bar = evacuation_bar(held.as_ref().map_or(0, |h| h.2));
    let req = RemoveTier {
        tier: tier.map(str::to_string),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let sock = socket.clone();
    std::thread::spawn(move || {
        let _ = tx.send(control::call(&sock, req, REMOVE_ANSWER_WAIT));
    });
    let mut answered_at = Instant::now();
    let got = loop {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(r) => break r,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                break Err(ControlError::Failed("the request was lost".into()))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        match status(5) {
            Ok(r) => {
                answered_at = Instant::now();
                if let Some((id, _, used)) = &held {
                    let now = r.status.core.tiers.iter().find(|t| t.id == *id);
                    bar.set_position(used.saturating_sub(now.map_or(0, |t| t.used)));
                }
            }
            Err(ControlError::NoDaemon) => {}
            Err(_) if answered_at.elapsed() < STATUS_SILENCE => {}
            Err(_) => {
                bar.finish_and_clear();
                return Err(CliError::at(
                    shown,
                    format!(
                        "the daemon of {} has not answered for {} s while removing {}: it may still finish (`terrace status` shows the tiers)",
                        mnt.display(),
                        STATUS_SILENCE.as_secs(),
                        removal_target(tier)
                    ),
                ));
            }
        }
    };
    bar.finish_and_clear();
    let got = got.map_err(|e| match e {
        // The daemon went without an answer: an unmount stopped the
        // removal (the evacuation commits nothing once the unmount began).
        ControlError::Failed(_) | ControlError::NoDaemon if !still_mounted(mnt) => {
            CliError::at(shown, unmounted_while_removing(mnt, tier))
        }
        e => crate::admin::control_failed(mnt, shown)(e),
    })?;
    util::out(&format!(
        "Removed tier {} ({} {}) from the pool mounted on {}{}",
        got.id,
        got.kind,
        got.path,
        mnt.display(),
        got.leftover
    ));
    Ok(())
}

/// Whether `mnt` is still a FUSE mount (of the pool being changed).
fn still_mounted(mnt: &Path) -> bool {
    util::mount_at(mnt).is_some_and(|m| m.fstype.starts_with("fuse"))
}

/// Why `tier remove` got no answer from a daemon whose pool was unmounted
/// while the removal ran.
fn unmounted_while_removing(mnt: &Path, tier: Option<&str>) -> String {
    format!(
        "the pool on {} was unmounted while removing {}: a removal that had not ended stops \
         there and the pool keeps the tier (data moved off it so far stays moved); mount it \
         again, check its tiers (`terrace status`) and run the removal again if the tier is \
         still there",
        mnt.display(),
        removal_target(tier)
    )
}

/// "the last tier" or "tier ssd".
fn removal_target(tier: Option<&str>) -> String {
    tier.map_or_else(|| "the last tier".to_string(), |t| format!("tier {t}"))
}

/// What is left of a removed tier, for the message: a file that may be
/// deleted, or an object prefix that keeps its marker.
fn leftover_of(r: &TierRecord, wiped: Result<(), String>) -> String {
    if r.kind == TierKind::S3 {
        format!(
            "; its prefix still holds the tier's marker and header objects ({}), which you may delete",
            r.path
        )
    } else {
        match wiped {
            Ok(()) if is_block_device(&r.path) => {
                format!("; the pool no longer uses the device {}", r.path)
            }
            Ok(()) => format!("; {} may be deleted", r.path),
            Err(e) => format!("; {e}, but the pool no longer names it"),
        }
    }
}

/// Whether `path` names a block device (a device is not deleted, only no
/// longer used).
fn is_block_device(path: &str) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

/// The daemon's side of `tier remove MOUNTPOINT [TIER]`: the core removes
/// the tier (`Fs::detach_tier`: retired, its clean copies dropped, proved
/// empty, superblock committed, unpublished, media closed); then a file
/// tier's header is wiped and its lock released. An object tier's prefix
/// keeps its marker.
pub(crate) fn detach(
    fs: &terrace_core::Fs,
    tier: Option<&str>,
) -> crate::control::protocol::Answer<crate::control::protocol::TierRemoved> {
    use crate::control::protocol::{Refusal, TierRemoved};
    let refuse = |e: String| Refusal::new(format!("cannot remove {}: {e}", removal_target(tier)));
    let id = match tier {
        None => None,
        // A tier the pool does not have: a usage error (exit code 2).
        Some(t) => Some(
            terrace_core::tier_detach::resolve_tier(&fs.superblock().tiers, t).map_err(|e| {
                Refusal::invalid(format!("cannot remove {}: {e}", removal_target(tier)))
            })?,
        ),
    };
    let d = fs.detach_tier(id).map_err(refuse)?;
    let r = &d.record;
    let wiped = (r.kind != TierKind::S3).then(|| {
        let w = wipe_header(Path::new(&r.path));
        release_tier_lock(&r.path);
        w
    });
    let mut leftover = leftover_of(r, wiped.unwrap_or(Ok(())));
    for n in &d.notes {
        leftover.push_str("; ");
        leftover.push_str(n);
    }
    Ok(TierRemoved {
        id: r.id,
        kind: r.kind.name().to_string(),
        size: r.size,
        path: r.path.clone(),
        leftover,
    })
}

/// Removes a tier of an unmounted pool: the pool is mounted in this
/// process (recovery included, no FUSE, no background threads), the core
/// removes the tier as it does for a daemon (`Fs::detach_tier`: clean
/// copies dropped, proved empty, the superblock without the tier committed)
/// and the pool is unmounted cleanly; then a file tier's header is wiped.
fn remove_unmounted(pool: &Path, tier: Option<&str>) -> CliResult {
    let o = open_unmounted(pool)?;
    let refused = |e: String| {
        CliError::at(pool, format!("cannot remove {}: {e}", removal_target(tier))).code(2)
    };
    let id = match tier {
        None => None,
        Some(t) => Some(terrace_core::tier_detach::resolve_tier(&o.sb.tiers, t).map_err(refused)?),
    };
    // Refused before the pool is mounted: no tier but pm, or pm named.
    if id.map_or(o.sb.tiers.len() == 1, |i| i.get() == 0) {
        let why = if id.is_none() {
            "the pool has only its pm tier, which cannot be removed"
        } else {
            "tier 0 is the pool's pm tier, which cannot be removed"
        };
        return Err(CliError::at(pool, why).code(2));
    }
    let tiers = open_tiers(&o.sb)?;
    let media: Arc<dyn PmMedia> =
        Arc::new(PmFile::open(&o.path).map_err(|e| CliError::new(e.to_string()))?);
    let fs = terrace_core::Fs::mount_with_tiers(media, tiers).map_err(|e| CliError::at(pool, e))?;
    // The removal moves the tier's data off first: what it says of that
    // (the daemon's log lines) goes to stderr here, as it goes.
    let done = std::sync::atomic::AtomicBool::new(false);
    let detached = std::thread::scope(|sc| {
        sc.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(200));
                print_removal_notices(&fs);
            }
        });
        let d = fs.detach_tier(id);
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        d
    });
    print_removal_notices(&fs);
    let unmounted = fs.unmount();
    drop(fs);
    let d = detached
        .map_err(|e| CliError::at(pool, format!("cannot remove {}: {e}", removal_target(tier))))?;
    unmounted.map_err(|e| CliError::at(pool, format!("cannot unmount cleanly: {e}")))?;
    let r = &d.record;
    let leftover = if r.kind == TierKind::S3 {
        leftover_of(r, Ok(()))
    } else {
        match wipe_header(Path::new(&r.path)) {
            Ok(()) => leftover_of(r, Ok(())),
            Err(e) => {
                util::warn(e);
                String::new()
            }
        }
    };
    let mut leftover = leftover;
    for n in &d.notes {
        leftover.push_str("; ");
        leftover.push_str(n);
    }
    util::out(&format!(
        "Removed tier {} ({} {}) from the pool {}{leftover}",
        r.id,
        r.kind.name(),
        r.path,
        o.path.display()
    ));
    Ok(())
}

/// Prints the core's notices about a removal in progress ("removing tier
/// 1 (…): 120.0 MiB of 330.2 MiB moved") on stdout, for the offline form
/// (others, about the pool mounted here for the change, are left out).
fn print_removal_notices(fs: &terrace_core::Fs) {
    for n in fs.take_notices() {
        if n.starts_with("removing tier") {
            util::out(&n);
        }
    }
}

/// Zeroes a removed tier's header, so nothing takes the file for a tier of
/// the pool any more (best effort: the superblock no longer names it).
/// A file that is gone needs nothing; the error says what failed.
fn wipe_header(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let f = match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(format!(
                "could not wipe the tier header of {}: {}",
                path.display(),
                util::os_reason(&e)
            ))
        }
    };
    let zero = vec![0u8; BLOCK_SIZE as usize];
    f.write_all_at(&zero, 0)
        .and_then(|()| f.sync_data())
        .map_err(|e| {
            format!(
                "could not wipe the tier header of {}: {}",
                path.display(),
                util::os_reason(&e)
            )
        })
}
