//! A tier file or device examined before it is formatted (by `mkfs` and
//! `tier add`): its size, whether a mounted pool or another file system
//! holds it, what it holds now, whether its file system has room, and the
//! tier header written at its start.

use crate::util::{self, CliError, CliResult};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use terrace_format::{TierHeader, TierKind, BLOCK_SIZE, TIER_PATH_MAX};

use super::TierSpec;

/// Smallest PM tier.
pub const MIN_PM: u64 = terrace_core::mkfs::MIN_PM_SIZE;
/// Smallest block tier.
pub const MIN_BLOCK: u64 = 16 << 20;
/// Bytes read from an existing target to recognise what it holds.
const HEAD: usize = 68 << 10;

/// A tier after checking: where, how big, what is there now.
/// A tier file or device examined for formatting (also by `tier add`).
pub(crate) struct Target {
    pub(super) spec: TierSpec,
    pub(crate) path: PathBuf,
    pub(crate) size: u64,
    pub(super) exists: bool,
    pub(super) is_blockdev: bool,
    pub(super) current_len: u64,
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
    if let Some(m) = util::terrace_mount_holding(raw) {
        return Err(CliError::at(
            raw,
            format!(
                "lies on the Terrace mount {} (pool {}): a tier must be on a device or file system of its own, or the pool could not mount without that mount",
                m.mount_point.display(),
                m.source
            ),
        )
        .code(2));
    }
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
        // A size taken from the file is its length in whole blocks.
        let got = match spec.size {
            Some(_) => format!("got {}", util::human_bytes(size)),
            None => format!("the file holds {}", util::human_bytes(current_len)),
        };
        return Err(CliError::at(
            raw,
            format!(
                "a {kind} tier needs at least {} ({got})",
                util::human_bytes(min)
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
