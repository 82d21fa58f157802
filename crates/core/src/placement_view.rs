//! Where a file's data lives: the read-only virtual xattrs
//! `user.terrace.tiers` (one line) and `user.terrace.extents` (one line per
//! extent, read by `terrace where`), and how it is accessed:
//! `user.terrace.access` (its HetFS access trace and class). They are
//! computed from DRAM state, never stored, not listed by listxattr, and
//! cannot be set or removed (EPERM). The one stored, writable name under the
//! prefix is the placement rule, `user.terrace.rule` (see `rules`).
//!
//! Data written to the DRAM cache and not yet written back shows as extents on
//! tier `dram` with block `-`, after the committed extents; it shadows the
//! committed extents it overlaps until write-back. A clean copy of an extent
//! (NVMFS) shows as a second line for the same range on tier `<tier>-copy`.

use crate::fs::Fs;
use crate::inode::Inode;
use crate::types::FileType;
use terrace_format::BLOCK_SIZE;

/// Prefix of Terrace's virtual xattrs.
pub const VIRTUAL_PREFIX: &[u8] = b"user.terrace.";
/// One-line summary: `OFFSET+LENGTH:TIER@BLOCK …`.
pub const XATTR_TIERS: &[u8] = b"user.terrace.tiers";
/// One extent per line: `offset length tier block counter`.
pub const XATTR_EXTENTS: &[u8] = b"user.terrace.extents";
/// The file's access trace and HetFS class, one line:
/// `class=C requests=N sequential=P% small=P% reads=N writes=N bytes=N`.
pub const XATTR_ACCESS: &[u8] = b"user.terrace.access";
/// Largest value a virtual xattr returns (the kernel's xattr size limit).
const MAX_VALUE: usize = 65536;

impl Fs {
    /// Name of tier `id` (`pm`, `ssd`, `hdd`, or the number).
    pub(crate) fn tier_name(&self, id: u8) -> String {
        let sb = self.sb.lock();
        sb.tiers
            .iter()
            .find(|t| t.id == id)
            .map(|t| t.kind.name().to_string())
            .unwrap_or_else(|| id.to_string())
    }

    /// The value of a virtual xattr, `None` when `name` is not one.
    pub(crate) fn virtual_xattr(&self, i: &Inode, name: &[u8]) -> Option<Vec<u8>> {
        if name == XATTR_ACCESS {
            let a = &i.access;
            return Some(
                format!(
                    "class={} requests={} sequential={}% small={}% reads={} writes={} bytes={}",
                    a.class(),
                    a.requests,
                    a.sequential_percent(),
                    a.small_percent(),
                    a.reads,
                    a.writes,
                    a.bytes
                )
                .into_bytes(),
            );
        }
        if name != XATTR_TIERS && name != XATTR_EXTENTS {
            return None;
        }
        if !matches!(i.kind, FileType::Regular | FileType::Symlink) {
            return Some(Vec::new());
        }
        let mut out = String::new();
        let mut runs: Vec<(u64, u64, String, String, u8)> = Vec::new();
        for (fb, e) in i.extents.iter() {
            runs.push((
                fb,
                e.blocks,
                self.tier_name(e.tier),
                e.block.to_string(),
                e.counter,
            ));
            if let Some((t, b)) = e.copy {
                // A clean copy (NVMFS): same data, second location.
                runs.push((
                    fb,
                    e.blocks,
                    format!("{}-copy", self.tier_name(t)),
                    b.to_string(),
                    e.counter,
                ));
            }
        }
        let mut dirty: Vec<(u64, u64, String, String, u8)> = Vec::new();
        for (&fb, p) in &i.dirty {
            match dirty.last_mut() {
                Some(r) if r.0 + r.1 == fb => r.1 += 1,
                _ => dirty.push((fb, 1, "dram".into(), "-".into(), p.counter)),
            }
        }
        runs.extend(dirty);
        for (fb, blocks, tier, block, counter) in runs {
            let e = (blocks, block, counter);
            let line = if name == XATTR_TIERS {
                format!(
                    "{}{}+{}:{}@{}",
                    if out.is_empty() { "" } else { " " },
                    fb * BLOCK_SIZE,
                    e.0 * BLOCK_SIZE,
                    tier,
                    e.1
                )
            } else {
                format!(
                    "{} {} {} {} {}\n",
                    fb * BLOCK_SIZE,
                    e.0 * BLOCK_SIZE,
                    tier,
                    e.1,
                    e.2
                )
            };
            if out.len() + line.len() > MAX_VALUE - 4 {
                out.push_str(" ...");
                break;
            }
            out.push_str(&line);
        }
        Some(out.into_bytes())
    }
}
