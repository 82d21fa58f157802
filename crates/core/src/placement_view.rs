//! Where a file's data lives: the read-only virtual xattrs
//! `user.terrace.tiers` (one line) and `user.terrace.extents` (one line per
//! extent, read by `terrace where`), and how it is accessed:
//! `user.terrace.access` (its HetFS access trace and class), and why
//! migration leaves it where it is: `user.terrace.moves` (read by `terrace
//! where` to explain a placement rule not met). They are
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
use crate::types::{FileType, FsResult, Ino};
use serde::{Deserialize, Serialize};
use terrace_format::BLOCK_SIZE;

/// One extent of a file as `terrace where` shows it (see [`Fs::extent_rows`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtentRow {
    /// Offset in the file (bytes).
    pub offset: u64,
    /// Length (bytes).
    pub length: u64,
    /// Tier name: `pm`, `ssd`, `hdd` (or the tier id), `<tier>-copy` for a
    /// clean copy, `dram` for cached data not yet written back.
    pub tier: String,
    /// First block on the tier; `None` for `dram`.
    pub block: Option<u64>,
    /// The write-size predictor's counter of the write it came from.
    pub counter: u8,
}

/// Prefix of Terrace's virtual xattrs.
pub const VIRTUAL_PREFIX: &[u8] = b"user.terrace.";
/// One-line summary: `OFFSET+LENGTH:TIER@BLOCK …`.
pub const XATTR_TIERS: &[u8] = b"user.terrace.tiers";
/// One extent per line: `offset length tier block counter`.
pub const XATTR_EXTENTS: &[u8] = b"user.terrace.extents";
/// The file's access trace and HetFS class, one line:
/// `class=C requests=N sequential=P% small=P% reads=N writes=N bytes=N`.
pub const XATTR_ACCESS: &[u8] = b"user.terrace.access";
/// Why migration does not move the file where its rule wants it:
/// [`MOVES_DAMAGED`] and a sentence when a move found blocks failing their
/// checksums and the file's data has not changed since (no move of it is
/// tried until it does); else [`MOVES_YIELDED`] and a sentence when data
/// its rule pins to PM left PM to keep room for metadata (`rules.rs`;
/// until its rule is met again); empty otherwise.
pub const XATTR_MOVES: &[u8] = b"user.terrace.moves";
/// The first word of [`XATTR_MOVES`] for a file whose damaged data stops
/// its moves.
pub const MOVES_DAMAGED: &str = "damaged";
/// The first word of [`XATTR_MOVES`] for a file whose data pinned to PM
/// was moved off PM to keep room for metadata.
pub const MOVES_YIELDED: &str = "yielded";
/// Largest value a virtual xattr returns (the kernel's xattr size limit).
const MAX_VALUE: usize = 65536;

impl Fs {
    /// The value of a virtual xattr, `None` when `name` is not one.
    pub(crate) fn virtual_xattr(&self, i: &Inode, name: &[u8]) -> Option<Vec<u8>> {
        if name == XATTR_ACCESS {
            let none = terrace_policy::AccessTrace::default();
            let a = i.io.as_ref().map_or(&none, |h| &h.access);
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
        if name == XATTR_MOVES {
            let damaged = self
                .migrator
                .found_damaged(i.ino, (i.generation, i.data_seq));
            return Some(if damaged {
                format!(
                    "{MOVES_DAMAGED}: a move found data failing its checksums; \
                     no move is tried until the file's data changes"
                )
                .into_bytes()
            } else if self.pin_yielded(i) {
                format!(
                    "{MOVES_YIELDED}: data pinned to pm was moved off pm to keep room for \
                     metadata (pm full of pinned data); it returns when pm has room"
                )
                .into_bytes()
            } else {
                Vec::new()
            });
        }
        if name != XATTR_TIERS && name != XATTR_EXTENTS {
            return None;
        }
        if !matches!(i.kind, FileType::Regular | FileType::Symlink) {
            return Some(Vec::new());
        }
        let mut out = String::new();
        for r in self.rows_of(i) {
            let block = r.block.map_or_else(|| "-".to_string(), |b| b.to_string());
            let line = if name == XATTR_TIERS {
                format!(
                    "{}{}+{}:{}@{}",
                    if out.is_empty() { "" } else { " " },
                    r.offset,
                    r.length,
                    r.tier,
                    block
                )
            } else {
                format!(
                    "{} {} {} {} {}\n",
                    r.offset, r.length, r.tier, block, r.counter
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

    /// Every extent of inode `ino`, as `terrace where` lists it: the
    /// committed extents in file order (each clean copy right after its
    /// extent, on tier `<tier>-copy`), then the data cached in DRAM and not
    /// yet written back (tier `dram`, no block), which shadows the committed
    /// extents it overlaps. Complete however many extents there are (the
    /// xattr `user.terrace.extents` stops at 64 KiB). Empty for a file that
    /// is neither regular nor a symbolic link.
    pub fn extent_rows(&self, ino: Ino) -> FsResult<Vec<ExtentRow>> {
        let g = self.lock(ino)?;
        let i = g.as_ref().expect("live");
        if !matches!(i.kind, FileType::Regular | FileType::Symlink) {
            return Ok(Vec::new());
        }
        Ok(self.rows_of(i))
    }

    fn rows_of(&self, i: &Inode) -> Vec<ExtentRow> {
        let names: Vec<(u8, String)> = {
            let sb = self.sb.lock();
            sb.tiers
                .iter()
                .map(|t| (t.id, t.kind.name().to_string()))
                .collect()
        };
        let name = |id: u8| {
            names
                .iter()
                .find(|(t, _)| *t == id)
                .map(|(_, n)| n.clone())
                .unwrap_or_else(|| id.to_string())
        };
        let mut rows = Vec::new();
        for (fb, e) in i.extents.iter() {
            rows.push(ExtentRow {
                offset: fb.byte_offset(),
                length: e.blocks * BLOCK_SIZE,
                tier: name(e.tier.get()),
                block: Some(e.block.get()),
                counter: e.counter,
            });
            if let Some((t, b)) = e.copy {
                // A clean copy (NVMFS): same data, second location.
                rows.push(ExtentRow {
                    offset: fb.byte_offset(),
                    length: e.blocks * BLOCK_SIZE,
                    tier: format!("{}-copy", name(t.get())),
                    block: Some(b.get()),
                    counter: e.counter,
                });
            }
        }
        let mut dirty: Vec<ExtentRow> = Vec::new();
        for (&fb, p) in &i.dirty {
            match dirty.last_mut() {
                Some(r) if r.offset + r.length == fb.byte_offset() => r.length += BLOCK_SIZE,
                _ => dirty.push(ExtentRow {
                    offset: fb.byte_offset(),
                    length: BLOCK_SIZE,
                    tier: "dram".into(),
                    block: None,
                    counter: p.counter,
                }),
            }
        }
        rows.extend(dirty);
        rows
    }
}

#[cfg(test)]
mod tests {
    use crate::Ctx;
    use std::sync::Arc;
    use terrace_media::{MemMedia, PmMedia};

    #[test]
    fn extent_rows_list_every_extent_past_the_xattr_limit() {
        let pm = Arc::new(MemMedia::new(64 << 20));
        let params = crate::FormatParams {
            uuid: [3; 16],
            inode_count: 64,
            tiers: vec![terrace_format::TierRecord {
                id: 0,
                kind: terrace_format::TierKind::Pm,
                size: pm.len(),
                extent_size: 0,
                path: "/dev/shm/p".into(),
                epoch: 0,
            }],
            root_uid: 0,
            root_gid: 0,
        };
        crate::format(&*pm, &params).unwrap();
        let fs = crate::Fs::mount(pm).unwrap();
        let f = fs
            .mknod(
                1,
                b"f",
                libc::S_IFREG | 0o644,
                0,
                Ctx {
                    uid: 0,
                    gid: 0,
                    umask: 0,
                },
            )
            .unwrap();
        // Every other block: 4,000 extents, far more than 64 KiB of xattr text.
        for k in 0..4000u64 {
            fs.write(f.ino, k * 8192, &[1u8; 4096]).unwrap();
        }
        fs.fsync(f.ino, false).unwrap();
        let rows = fs.extent_rows(f.ino).unwrap();
        assert_eq!(rows.len(), 4000);
        assert!(rows.iter().all(|r| r.tier == "pm" && r.length == 4096));
        assert_eq!(rows[3999].offset, 3999 * 8192);
        let x = fs.getxattr(f.ino, super::XATTR_EXTENTS).unwrap();
        assert!(x.ends_with(b" ..."), "the xattr is cut");
        assert!(fs.extent_rows(1).unwrap().is_empty(), "a directory");
        fs.unmount().unwrap();
    }
}
