//! `terrace mkfs`: formats a pool from one PM tier and any number of block tiers.

use crate::object_tier;
use crate::util::{self, CliError, CliResult};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use terrace_format::{TierHeader, TierKind, TierRecord, BLOCK_SIZE, MAX_TIERS, TIER_PATH_MAX};
use terrace_media::{PmFile, PmKind, PmMedia};

/// Smallest PM tier.
pub const MIN_PM: u64 = terrace_core::mkfs::MIN_PM_SIZE;
/// Smallest block tier.
pub const MIN_BLOCK: u64 = 16 << 20;
/// Bytes read from an existing target to recognise what it holds.
const HEAD: usize = 68 << 10;

/// One `--tier KIND:PATH[:SIZE]` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierSpec {
    /// Media kind.
    pub kind: TierKind,
    /// File or block device.
    pub path: PathBuf,
    /// Size; `None` = the size of the existing file or device.
    pub size: Option<u64>,
}

/// Parses `KIND:PATH:SIZE` (SIZE may be omitted for an existing file or device).
pub fn parse_tier(s: &str) -> Result<TierSpec, String> {
    parse_tier_with(s, &|p| p.exists())
}

/// [`parse_tier`], with `exists` telling whether a path exists. A path may
/// contain ':': the part after the last ':' is the size unless it contains a
/// '/' or the whole rest names an existing file (used at its own size).
fn parse_tier_with(s: &str, exists: &dyn Fn(&Path) -> bool) -> Result<TierSpec, String> {
    let (kind, rest) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected KIND:PATH:SIZE, e.g. pm:/dev/shm/pool:1G"))?;
    let kind = TierKind::parse(&kind.to_ascii_lowercase())
        .ok_or_else(|| format!("{s:?}: unknown tier kind {kind:?} (use pm, ssd, hdd or s3)"))?;
    if kind == TierKind::S3 {
        return parse_s3_tier(s, rest);
    }
    let empty_path = || format!("{s:?}: the path is empty (expected KIND:PATH:SIZE)");
    let (path, size) = match rest.rsplit_once(':') {
        None => (rest, None),
        Some((p, sz)) => match util::parse_size(sz) {
            Ok(_) | Err(_) if p.is_empty() && !exists(Path::new(rest)) => return Err(empty_path()),
            Ok(n) => (p, Some(n)),
            Err(_) if sz.contains('/') || exists(Path::new(rest)) => (rest, None),
            Err(e) => {
                let why = if sz.trim().is_empty() {
                    "nothing after the last ':' (leave out \":SIZE\" to use an existing file at its size)".to_string()
                } else if sz.trim_start().starts_with('-') {
                    "a size cannot be negative".to_string()
                } else {
                    let prefix = format!("size {sz:?} ");
                    e.strip_prefix(&prefix).unwrap_or(&e).to_string()
                };
                return Err(format!("{s:?}: bad size {sz:?}: {why}"));
            }
        },
    };
    if path.is_empty() {
        return Err(empty_path());
    }
    Ok(TierSpec {
        kind,
        path: PathBuf::from(path),
        size,
    })
}

/// `s3:URL[:SIZE]`: the URL has colons of its own (scheme, port), so a
/// trailing `:SIZE` counts only after the path started (the first '/' past
/// `://`); without it the tier is [`object_tier::DEFAULT_SIZE`]. The URL may
/// end in options, `?region=…&path_style=…&credentials_file=…&profile=…
/// &ca_file=…` (terrace_media::UrlOptions), stored with it; `:SIZE` then goes at the
/// very end or before the `?`.
fn parse_s3_tier(s: &str, url: &str) -> Result<TierSpec, String> {
    let path_start = url
        .find("://")
        .and_then(|i| url[i + 3..].find('/').map(|j| i + 3 + j))
        .ok_or_else(|| {
            format!("{s:?}: expected s3:http(s)://HOST[:PORT]/BUCKET[/PREFIX][:SIZE][?OPTIONS]")
        })?;
    let (addr, opts) = match url[path_start..].find('?') {
        Some(i) => url.split_at(path_start + i),
        None => (url, ""),
    };
    let size_of =
        |sz: &str| util::parse_size(sz).map_err(|e| format!("{s:?}: bad size {sz:?}: {e}"));
    let (addr, size_before) = match addr.rfind(':') {
        Some(i) if i > path_start => (&addr[..i], Some(size_of(&addr[i + 1..])?)),
        _ => (addr, None),
    };
    // After the options, a ':' whose tail could be no option value.
    let (opts, size_after) = match opts.rfind(':') {
        Some(i) if !opts[i + 1..].contains(['=', '&', '/']) => {
            (&opts[..i], Some(size_of(&opts[i + 1..])?))
        }
        _ => (opts, None),
    };
    let size = match (size_before, size_after) {
        (Some(_), Some(_)) => return Err(format!("{s:?}: the size is given twice")),
        (a, b) => a.or(b).unwrap_or(object_tier::DEFAULT_SIZE),
    };
    let url = format!("{addr}{opts}");
    terrace_media::ObjectConfig::from_url(&url).map_err(|e| format!("{s:?}: {e}"))?;
    Ok(TierSpec {
        kind: TierKind::S3,
        path: PathBuf::from(url),
        size: Some(size),
    })
}

/// Everything `mkfs` needs.
#[derive(Debug, Clone)]
pub struct MkfsConfig {
    /// Tiers in command-line order.
    pub tiers: Vec<TierSpec>,
    /// Inode slots (0 = default: from the pool's size, see
    /// [`terrace_core::mkfs::default_pool_inode_count`]).
    pub inodes: u64,
    /// Extent size of block tiers.
    pub extent_size: u64,
    /// Overwrite existing pools and file systems.
    pub force: bool,
}

/// A tier after checking: where, how big, what is there now.
/// A tier file or device examined for formatting (also by `tier add`).
pub(crate) struct Target {
    spec: TierSpec,
    pub(crate) path: PathBuf,
    pub(crate) size: u64,
    exists: bool,
    is_blockdev: bool,
    current_len: u64,
    /// The target's lock, held until the pool is written (existing targets).
    pub(crate) lock: Option<File>,
}

fn device_len(f: &File) -> io::Result<u64> {
    use std::io::Seek;
    let mut f = f;
    f.seek(io::SeekFrom::End(0))
}

pub(crate) fn examine(spec: &TierSpec, force: bool) -> CliResult<Target> {
    let raw = &spec.path;
    let (exists, is_blockdev, current_len) = match std::fs::metadata(raw) {
        Ok(m) => {
            let ft = m.file_type();
            if ft.is_block_device() {
                let f = File::open(raw).map_err(|e| CliError::at(raw, util::os_reason(&e)))?;
                (
                    true,
                    true,
                    device_len(&f).map_err(|e| CliError::at(raw, util::os_reason(&e)))?,
                )
            } else if ft.is_file() {
                (true, false, m.len())
            } else {
                return Err(CliError::at(raw, "not a regular file or block device"));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let parent = raw
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !parent.is_dir() {
                return Err(CliError::at(
                    raw,
                    format!("directory {} does not exist", parent.display()),
                ));
            }
            (false, false, 0)
        }
        Err(e) => return Err(CliError::at(raw, util::os_reason(&e))),
    };
    let path = util::abs_path(raw);
    // First, before any other check (and whatever --force says): a tier of a
    // mounted pool is never touched. Its daemon holds the lock of every tier
    // file; the mount table and the tier header catch a pool whose daemon
    // holds no lock on this file (another name for the same file, an older
    // daemon).
    let mut lock = None;
    let mut head = Vec::new();
    if exists {
        head = util::read_head(&path, HEAD).map_err(|e| CliError::at(raw, util::os_reason(&e)))?;
        match util::lock_tier(&path) {
            Ok(Some(l)) => lock = Some(l),
            Ok(None) => return Err(CliError::at(raw, util::tier_in_use_reason(&path, &head))),
            Err(e) => return Err(CliError::at(raw, util::os_reason(&e))),
        }
        if util::mounted_owner(&path, &head).is_some() {
            return Err(CliError::at(raw, util::tier_in_use_reason(&path, &head)));
        }
    }
    let kind = spec.kind.name();
    let size = match spec.size {
        Some(s) => s,
        None if current_len > 0 => current_len - current_len % BLOCK_SIZE,
        None => {
            return Err(CliError::at(
                raw,
                format!(
                    "does not exist, so it needs a size: --tier {kind}:{}:SIZE (e.g. 1G)",
                    raw.display()
                ),
            )
            .code(2));
        }
    };
    if size % BLOCK_SIZE != 0 {
        return Err(CliError::at(
            raw,
            format!("size {size} is not a multiple of {BLOCK_SIZE} bytes"),
        )
        .code(2));
    }
    let min = if spec.kind == TierKind::Pm {
        MIN_PM
    } else {
        MIN_BLOCK
    };
    if size < min {
        return Err(CliError::at(
            raw,
            format!(
                "a {kind} tier needs at least {} (got {})",
                util::human_bytes(min),
                util::human_bytes(size)
            ),
        )
        .code(2));
    }
    if is_blockdev && size > current_len {
        return Err(CliError::at(
            raw,
            format!(
                "the device holds {} but the tier asks for {}",
                util::human_bytes(current_len),
                util::human_bytes(size)
            ),
        ));
    }
    if exists && !is_blockdev && current_len != 0 && current_len != size && !force {
        return Err(CliError::at(
            raw,
            format!(
                "exists with {current_len} bytes, not {size}; omit the size to use the file as it is, or add --force to resize it"
            ),
        ));
    }
    if path.as_os_str().len() > TIER_PATH_MAX {
        return Err(CliError::at(
            raw,
            format!("path longer than {TIER_PATH_MAX} bytes cannot be recorded in the superblock"),
        ));
    }
    let p = path.to_string_lossy();
    if let Some(m) = util::mounts()
        .into_iter()
        .find(|m| m.source == p && !m.fstype.starts_with("fuse"))
    {
        return Err(CliError::at(
            raw,
            format!(
                "is mounted on {} ({}); refusing to format it",
                m.mount_point.display(),
                m.fstype
            ),
        ));
    }
    if exists && !force {
        if let Some(what) = describe_content(&head) {
            return Err(CliError::at(
                raw,
                format!("holds {what}; add --force to overwrite it"),
            ));
        }
    }
    Ok(Target {
        spec: spec.clone(),
        path,
        size,
        exists,
        is_blockdev,
        current_len,
        lock,
    })
}

/// Refuses tier files larger than the free space of the file systems that
/// hold them (counting what each file already has, and every tier on the
/// same file system). A PM tier is always refused: a write to a page its
/// file system cannot back kills the daemon (SIGBUS). A block tier is
/// refused unless `force`: its writes would fail with ENOSPC once the file
/// system fills.
pub(crate) fn check_free_space(targets: &[Target], force: bool) -> CliResult {
    use std::os::unix::fs::MetadataExt;
    let mut wanted: Vec<(u64, u64)> = Vec::new(); // (device, bytes still to allocate)
    for t in targets.iter().filter(|t| !t.is_blockdev) {
        let (dev, allocated) = match std::fs::metadata(&t.path) {
            Ok(m) => (m.dev(), m.blocks() * 512),
            Err(_) => {
                let parent = t.path.parent().unwrap_or(Path::new("/"));
                let m = std::fs::metadata(parent)
                    .map_err(|e| CliError::at(parent, util::os_reason(&e)))?;
                (m.dev(), 0)
            }
        };
        let free = util::free_space(&t.path)
            .map_err(|e| CliError::at(&t.spec.path, util::os_reason(&e)))?;
        let need = t.size.saturating_sub(allocated);
        let before: u64 = wanted.iter().filter(|w| w.0 == dev).map(|w| w.1).sum();
        wanted.push((dev, need));
        if before + need <= free {
            if t.spec.kind == TierKind::Pm {
                warn_if_more_than_memory(t, need);
            }
            continue;
        }
        let others = if before > 0 {
            format!(
                " (after {} for the other tiers there)",
                util::human_bytes(before)
            )
        } else {
            String::new()
        };
        let short = format!(
            "a {} tier of {} does not fit: its file system has {} free{others}",
            t.spec.kind.name(),
            util::human_bytes(t.size),
            util::human_bytes(free)
        );
        if t.spec.kind == TierKind::Pm {
            return Err(CliError::at(
                &t.spec.path,
                format!("{short}; PM must be fully backed (a write to a page that cannot be backed kills the daemon), so use a smaller size"),
            ));
        }
        if !force {
            return Err(CliError::at(
                &t.spec.path,
                format!("{short}; use a smaller size, or add --force to create it sparse anyway (writes fail with ENOSPC once that file system fills)"),
            ));
        }
        util::warn(format!(
            "{}: {short}; created sparse anyway (--force): writes to it fail with ENOSPC once that file system fills",
            t.spec.path.display()
        ));
    }
    Ok(())
}

/// Warns when a PM tier on tmpfs needs more than the memory the machine has
/// available (RAM and swap): tmpfs keeps every page in memory, so a tmpfs
/// larger than that (its size may exceed RAM) fills memory as the pool
/// fills, and the machine runs out of memory before the pool is full. Not
/// refused: the file is sparse, and memory may be freed later.
fn warn_if_more_than_memory(t: &Target, need: u64) {
    let Some(available) = util::memory_available() else {
        return;
    };
    if need > available && util::on_tmpfs(&t.path) {
        util::warn(format!(
            "{}: a pm tier of {} on tmpfs is more than the memory available ({}, RAM and swap): tmpfs holds its pages in memory, so the machine runs out of memory before the pool is full",
            t.spec.path.display(),
            util::human_bytes(t.size),
            util::human_bytes(available)
        ));
    }
}

/// What an existing target holds, naming the pool when it is a Terrace tier.
fn describe_content(head: &[u8]) -> Option<String> {
    let bs = BLOCK_SIZE as usize;
    if let Ok(h) = TierHeader::decode(head) {
        return Some(format!(
            "tier {} ({}) of the Terrace pool {}, which is not mounted",
            h.id,
            h.kind.name(),
            util::fmt_uuid(&h.pool_uuid)
        ));
    }
    if head.len() >= 2 * bs {
        if let Ok(sb) = terrace_format::Superblock::choose(&head[..bs], &head[bs..2 * bs]) {
            let state = if sb.clean {
                "not mounted"
            } else {
                "not mounted, and not cleanly unmounted last time"
            };
            return Some(format!(
                "the Terrace pool {} ({state})",
                util::fmt_uuid(&sb.uuid)
            ));
        }
    }
    util::detect_content(head).map(str::to_string)
}

fn new_uuid() -> [u8; 16] {
    let mut b = [0u8; 16];
    let from_urandom = File::open("/dev/urandom").and_then(|f| {
        use std::io::Read;
        let mut f = f;
        f.read_exact(&mut b)
    });
    if from_urandom.is_err() {
        use rand::RngCore;
        rand::rngs::OsRng.fill_bytes(&mut b);
    }
    b[6] = (b[6] & 0x0f) | 0x40; // version 4
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    b
}

/// Segment (part size and extent) of an object tier: 16 MiB.
const OBJECT_SEGMENT: u64 = terrace_media::object::DEFAULT_SEGMENT_BLOCKS * BLOCK_SIZE;

pub(crate) fn tier_header(r: &TierRecord, pool_uuid: [u8; 16]) -> TierHeader {
    TierHeader {
        pool_uuid,
        id: r.id,
        kind: r.kind,
        size: r.size,
        extent_size: r.extent_size,
    }
}

/// The `s3` tier of the command line, if any: at most one, last, after at
/// least one other block tier (which takes large writes and log blobs: the
/// object tier gets data only by migration), its URL fitting the record.
fn check_object_tier(cfg: &MkfsConfig, file_tiers: usize) -> CliResult<Option<&TierSpec>> {
    let objects: Vec<usize> = (0..cfg.tiers.len())
        .filter(|&i| cfg.tiers[i].kind == TierKind::S3)
        .collect();
    let Some(&i) = objects.first() else {
        return Ok(None);
    };
    let spec = &cfg.tiers[i];
    if objects.len() > 1 || i + 1 != cfg.tiers.len() {
        return Err(CliError::usage(
            "an s3 tier must be the last tier given, and a pool has at most one",
        ));
    }
    if file_tiers < 2 {
        return Err(CliError::usage(
            "an s3 tier needs an ssd or hdd tier before it (the object tier only takes data that migration moves down)",
        ));
    }
    object_tier_record(spec, 0)?;
    Ok(Some(spec))
}

/// The record of object tier `spec` as tier `id`: its URL fits the record
/// and its size is whole segments, at least two.
pub(crate) fn object_tier_record(spec: &TierSpec, id: u8) -> CliResult<TierRecord> {
    let url = spec.path.to_string_lossy();
    if url.len() > TIER_PATH_MAX {
        return Err(CliError::at(
            &spec.path,
            format!("URL longer than {TIER_PATH_MAX} bytes cannot be recorded in the superblock"),
        )
        .code(2));
    }
    let size = spec.size.unwrap_or(object_tier::DEFAULT_SIZE);
    if size % OBJECT_SEGMENT != 0 || size < 2 * OBJECT_SEGMENT {
        return Err(CliError::at(
            &spec.path,
            format!(
                "an s3 tier's size must be a multiple of its {} segments, at least two",
                util::human_bytes(OBJECT_SEGMENT)
            ),
        )
        .code(2));
    }
    Ok(TierRecord {
        id,
        kind: TierKind::S3,
        size,
        extent_size: OBJECT_SEGMENT as u32,
        path: url.into_owned(),
    })
}

/// Creates the object tier of record `r` (refused on a prefix that holds a
/// tier or parts already) and writes its tier header as block 0.
pub(crate) fn create_object_tier(r: &TierRecord, uuid: [u8; 16]) -> CliResult {
    let at = |e: String| CliError::at(Path::new(&r.path), e);
    let cfg = object_tier::config(&r.path, true, None).map_err(at)?;
    let media = terrace_media::ObjectMedia::create(
        &cfg,
        uuid,
        r.size,
        u64::from(r.extent_size) / BLOCK_SIZE,
    )
    .map_err(|e| {
        // The media's own messages name the tier (`s3 tier URL: …`).
        let e = e.to_string();
        if e.starts_with("s3 tier ") {
            CliError::new(e)
        } else {
            at(e)
        }
    })?;
    use terrace_media::BlockMedia;
    media
        .write_blocks(0, &tier_header(r, uuid).encode())
        .and_then(|()| media.sync())
        .map_err(|e| at(format!("cannot write the tier header: {e}")))
}

pub(crate) fn write_tier_header(t: &Target, h: &TierHeader) -> io::Result<()> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(!t.is_blockdev)
        .truncate(false)
        .open(&t.path)?;
    if !t.is_blockdev && f.metadata()?.len() != t.size {
        f.set_len(t.size)?; // sparse
    }
    f.write_all_at(&h.encode(), 0)?;
    f.sync_data()
}

/// Runs `mkfs`.
pub fn run(cfg: &MkfsConfig) -> CliResult {
    let pms = cfg.tiers.iter().filter(|t| t.kind == TierKind::Pm).count();
    if pms != 1 {
        return Err(CliError::usage(format!(
            "a pool needs exactly one pm tier (got {pms}); e.g. terrace mkfs --tier pm:/dev/shm/pool:1G"
        )));
    }
    if cfg.tiers.len() > MAX_TIERS {
        return Err(CliError::usage(format!(
            "at most {MAX_TIERS} tiers (got {})",
            cfg.tiers.len()
        )));
    }
    let es = cfg.extent_size;
    if es < BLOCK_SIZE || !es.is_power_of_two() || es > (1 << 30) {
        return Err(CliError::usage(format!(
            "--extent-size {es}: must be a power of two from 4K to 1G (default 512K)"
        )));
    }
    if cfg.inodes != 0 && cfg.inodes < 16 {
        return Err(CliError::usage(format!(
            "--inodes {}: at least 16",
            cfg.inodes
        )));
    }
    // PM first: it is tier 0.
    let mut specs: Vec<&TierSpec> = cfg
        .tiers
        .iter()
        .filter(|t| t.kind == TierKind::Pm)
        .collect();
    specs.extend(
        cfg.tiers
            .iter()
            .filter(|t| !matches!(t.kind, TierKind::Pm | TierKind::S3)),
    );
    let object = check_object_tier(cfg, specs.len())?;
    let mut targets = Vec::new();
    for s in specs {
        // Before examine, which locks the target (a second lock on the same
        // file would fail as "in use").
        if targets
            .iter()
            .any(|o: &Target| o.path == util::abs_path(&s.path))
        {
            return Err(CliError::at(&s.path, "named by two tiers").code(2));
        }
        let t = examine(s, cfg.force)?;
        if t.spec.kind != TierKind::Pm && t.size < es * 2 {
            return Err(
                CliError::at(&s.path, "too small for two extents; lower --extent-size").code(2),
            );
        }
        targets.push(t);
    }
    check_free_space(&targets, cfg.force)?;
    let pm_size = targets[0].size;
    let inodes = match cfg.inodes {
        0 => {
            // The object tier's virtual size is no measure of files.
            let block: u64 = targets[1..].iter().map(|t| t.size).sum();
            terrace_core::mkfs::default_pool_inode_count(pm_size, block)
        }
        n => n,
    };
    if terrace_format::pool_start_block(inodes) + 16 > pm_size / BLOCK_SIZE {
        return Err(CliError::usage(format!(
            "--inodes {inodes}: the inode table ({} bytes a slot) leaves no room for data in a pm tier of {}",
            terrace_format::INODE_SIZE,
            util::human_bytes(pm_size)
        )));
    }
    // Every existing target's lock (taken by `examine`) is held until the
    // pool is written.
    let mut locks: Vec<File> = targets.iter_mut().filter_map(|t| t.lock.take()).collect();
    let uuid = new_uuid();
    let mut records = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        records.push(TierRecord {
            id: i as u8,
            kind: t.spec.kind,
            size: t.size,
            extent_size: if t.spec.kind == TierKind::Pm {
                0
            } else {
                es as u32
            },
            path: t.path.to_string_lossy().into_owned(),
        });
    }
    // The object tier first (its create refuses a prefix in use, before
    // anything else is written), then the block tiers: the pool exists only
    // once the PM superblock is written last.
    if let Some(spec) = object {
        let r = object_tier_record(spec, records.len() as u8)?;
        create_object_tier(&r, uuid)?;
        records.push(r);
    }
    for (t, r) in targets.iter().zip(&records).skip(1) {
        let h = tier_header(r, uuid);
        write_tier_header(t, &h).map_err(|e| {
            CliError::at(
                &t.spec.path,
                format!("cannot write the tier header: {}", util::os_reason(&e)),
            )
        })?;
    }
    let pm_t = &targets[0];
    if pm_t.exists && !pm_t.is_blockdev && pm_t.current_len != 0 && pm_t.current_len != pm_t.size {
        // Only reached with --force (examine refused otherwise).
        OpenOptions::new()
            .write(true)
            .open(&pm_t.path)
            .and_then(|f| f.set_len(pm_t.size))
            .map_err(|e| {
                CliError::at(
                    &pm_t.spec.path,
                    format!("cannot resize: {}", util::os_reason(&e)),
                )
            })?;
    }
    let pm = PmFile::create(&pm_t.path, pm_t.size).map_err(|e| CliError::new(e.to_string()))?;
    if !pm_t.exists {
        if let Ok(Some(l)) = util::lock_pool(&pm_t.path) {
            locks.push(l);
        }
    }
    if pm.kind() == PmKind::File {
        util::warn(format!(
            "{} is not on a DAX file system or tmpfs: every persist needs msync and will be slow",
            pm_t.path.display()
        ));
    }
    let params = terrace_core::FormatParams {
        uuid,
        inode_count: inodes,
        tiers: records.clone(),
        // Safety: geteuid/getegid cannot fail.
        root_uid: unsafe { libc::geteuid() },
        root_gid: unsafe { libc::getegid() },
    };
    let sb = terrace_core::format(&pm, &params).map_err(|e| CliError::at(&pm_t.spec.path, e))?;
    pm.sync_all()
        .map_err(|e| CliError::at(&pm_t.spec.path, util::os_reason(&e)))?;
    drop(pm);
    drop(locks);

    util::out(&format!("Formatted Terrace pool {}", util::fmt_uuid(&uuid)));
    for r in &sb.tiers {
        let extra = if r.kind == TierKind::Pm {
            format!(
                "data pool {}",
                util::human_bytes(sb.pool_blocks * BLOCK_SIZE)
            )
        } else {
            format!("extent {}", util::human_bytes(u64::from(r.extent_size)))
        };
        util::out(&format!(
            "  tier {}  {:<3}  {:>10}  {}  ({extra})",
            r.id,
            r.kind.name(),
            util::human_bytes(r.size),
            r.path
        ));
    }
    util::out(&format!("  inodes: {}", sb.inode_count - 1));
    util::out(&format!(
        "Mount it with: terrace mount {} MOUNTPOINT",
        pm_t.path.display()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tier_specs_parse() {
        let t = parse_tier("pm:/dev/shm/pool:1G").unwrap();
        assert_eq!(
            t,
            TierSpec {
                kind: TierKind::Pm,
                path: "/dev/shm/pool".into(),
                size: Some(1 << 30)
            }
        );
        let t = parse_tier("ssd:/dev/sdb").unwrap();
        assert_eq!(t.size, None);
        let t = parse_tier("hdd:/data/a:b.img:64M").unwrap();
        assert_eq!(t.path, PathBuf::from("/data/a:b.img"));
        assert!(parse_tier("tape:/x:1G").is_err());
        assert!(parse_tier("pm").is_err());
        assert!(parse_tier("pm:").is_err());
        assert!(parse_tier("pm:/x:1Q").is_err());
    }

    #[test]
    fn an_s3_size_counts_only_after_the_path_started() {
        let t = parse_tier("s3:http://127.0.0.1:9000/bkt").unwrap();
        assert_eq!(t.kind, TierKind::S3);
        assert_eq!(t.path, PathBuf::from("http://127.0.0.1:9000/bkt"));
        assert_eq!(t.size, Some(object_tier::DEFAULT_SIZE));
        let t = parse_tier("s3:http://127.0.0.1:9000/bkt/p:2T").unwrap();
        assert_eq!(t.path, PathBuf::from("http://127.0.0.1:9000/bkt/p"));
        assert_eq!(t.size, Some(2 << 40));
        assert_eq!(
            parse_tier("S3:https://s3.example.com/bucket/a/b")
                .unwrap()
                .path,
            PathBuf::from("https://s3.example.com/bucket/a/b")
        );
        // Options: stored with the URL; the size before them or at the end.
        for spec in [
            "s3:http://127.0.0.1:9000/bkt/p?region=eu-west-1&credentials_file=/etc/t/s3.cred:2T",
            "s3:http://127.0.0.1:9000/bkt/p:2T?region=eu-west-1&credentials_file=/etc/t/s3.cred",
        ] {
            let t = parse_tier(spec).unwrap();
            assert_eq!(
                t.path,
                PathBuf::from(
                    "http://127.0.0.1:9000/bkt/p?region=eu-west-1&credentials_file=/etc/t/s3.cred"
                ),
                "{spec}"
            );
            assert_eq!(t.size, Some(2 << 40), "{spec}");
        }
        let t = parse_tier("s3:http://h:9000/bkt?path_style=true&profile=p").unwrap();
        assert_eq!(
            t.path,
            PathBuf::from("http://h:9000/bkt?path_style=true&profile=p")
        );
        assert_eq!(t.size, Some(object_tier::DEFAULT_SIZE));
        let e = parse_tier("s3:http://h/bkt:1T?region=x:2T").unwrap_err();
        assert!(e.contains("given twice"), "{e}");
        let e = parse_tier("s3:http://h/bkt?secret_key=x").unwrap_err();
        assert!(e.contains("never stored in the pool"), "{e}");
        let e = parse_tier("s3:http://h/bkt?region=x:lots").unwrap_err();
        assert!(e.contains("bad size \"lots\""), "{e}");
        for bad in [
            "s3:127.0.0.1:9000/bkt",
            "s3:http://127.0.0.1:9000",
            "s3:ftp://h/bkt",
            "s3:http://h/bkt:lots",
            "s3:http://h/B_ad",
        ] {
            assert!(parse_tier(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn bad_tier_specs_name_the_bad_part() {
        let none = |_: &Path| false;
        let err = |s: &str| parse_tier_with(s, &none).unwrap_err();
        let e = err("pm:/path:abc");
        assert!(e.contains("bad size \"abc\""), "{e}");
        let e = err("pm:/path:-5M");
        assert!(
            e.contains("bad size \"-5M\"") && e.contains("negative"),
            "{e}"
        );
        let e = err("pm::1M");
        assert!(e.contains("the path is empty"), "{e}");
        let e = err("pm:/path:");
        assert!(e.contains("bad size \"\""), "{e}");
        let e = err("pm:/path:1Q");
        assert!(
            e.contains("bad size \"1Q\"") && e.contains("unknown size unit"),
            "{e}"
        );
        for e in [err("pm:/path:abc"), err("pm:/path:-5M"), err("pm::1M")] {
            assert!(!e.contains("needs a size"), "{e}");
        }
    }

    #[test]
    fn a_path_with_a_colon_is_taken_whole_when_it_exists_or_ends_in_a_directory() {
        let exists = |p: &Path| p == Path::new("/data/a:b.img");
        let t = parse_tier_with("hdd:/data/a:b.img", &exists).unwrap();
        assert_eq!((t.path, t.size), (PathBuf::from("/data/a:b.img"), None));
        let t = parse_tier_with("ssd:/mnt/x:y/img", &|_| false).unwrap();
        assert_eq!((t.path, t.size), (PathBuf::from("/mnt/x:y/img"), None));
        let t = parse_tier_with("hdd:/data/a:b.img:64M", &exists).unwrap();
        assert_eq!(t.size, Some(64 << 20));
    }

    #[test]
    fn default_inodes_count_the_whole_pool_with_the_table_bounded_on_pm() {
        use terrace_core::mkfs::{default_inode_count, default_pool_inode_count};
        let (m, g) = (1u64 << 20, 1u64 << 30);
        // PM only: as before, one per 16 KiB of PM.
        assert_eq!(default_pool_inode_count(256 * m, 0), 16384);
        assert_eq!(default_inode_count(256 * m), 16384);
        // 256M PM + 4G SSD: the SSD adds one per 64 KiB.
        assert_eq!(default_pool_inode_count(256 * m, 4 * g), 16384 + 65536);
        // A huge HDD: the table stays within 1/16 of PM.
        let n = default_pool_inode_count(256 * m, 1 << 40);
        assert_eq!(n, 256 * m / 2048);
        assert!(n * terrace_format::INODE_SIZE as u64 <= 256 * m / 16);
        assert_eq!(default_pool_inode_count(m, 0), 64);
    }
}
