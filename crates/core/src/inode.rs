//! DRAM state of an inode: attributes, extent map (`extent_map.rs`),
//! directory index (`dir_index.rs`), xattrs, and the dirty pages of cached
//! writes ([`DirtyPage`]).
//!
//! Everything but the dirty pages is rebuilt at mount by replaying the
//! inode's log ([`Inode::apply`]); operations change it only after their
//! commit point, so the DRAM state always equals "replay of the committed
//! log" (plus, for the data, the dirty pages not yet written back).

use crate::dir_index::DirIndex;
use crate::extent_map::{Extent, ExtentMap, Released};
use crate::log::Log;
use crate::types::{Attr, FileType, Ino};
use std::collections::BTreeMap;
use std::sync::Arc;
use terrace_format::{AttrEntry, Entry, FileBlock, InodeSlot, WriteEntry, BLOCK_SIZE};

/// The entries that set xattr `name` to `value`: one XattrSet with the first
/// [`terrace_format::XATTR_CHUNK`] bytes, then XattrAppend entries with the
/// rest (they commit together).
pub fn xattr_entries(name: &[u8], value: &[u8]) -> Vec<Entry> {
    let mut chunks = value.chunks(terrace_format::XATTR_CHUNK);
    let mut v = vec![Entry::XattrSet {
        name: name.to_vec(),
        value: chunks.next().unwrap_or(&[]).to_vec(),
    }];
    v.extend(chunks.map(|c| Entry::XattrAppend {
        name: name.to_vec(),
        value: c.to_vec(),
    }));
    v
}

/// One dirty page of a file: a cached write's newest content of one file
/// page, not yet in the log ([`Inode::dirty`]; the DRAM cache, `cache.rs`,
/// counts its bytes).
#[derive(Clone)]
pub struct DirtyPage {
    /// The page's bytes (`BLOCK_SIZE`); replaced, never changed in place.
    pub data: Arc<[u8]>,
    /// Global sequence number of the write that produced this content.
    pub seq: u64,
    /// Sequence number of the oldest write whose bytes this page holds (the
    /// page absorbed every cached write to it from `first_seq` to `seq`).
    pub first_seq: u64,
    /// End offset (bytes) of the furthest-reaching write this page absorbed:
    /// the file size those writes imply.
    pub end: u64,
    /// Time of the newest write this page absorbed.
    pub mtime: i64,
    /// Write-size predictor counter of that write.
    pub counter: u8,
}

impl std::fmt::Debug for DirtyPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DirtyPage(seq {}, counter {})", self.seq, self.counter)
    }
}

/// An inode in DRAM.
#[derive(Debug, Clone)]
pub struct Inode {
    /// Inode number.
    pub ino: Ino,
    /// Slot generation.
    pub generation: u32,
    /// Type (never changes).
    pub kind: FileType,
    /// Device number.
    pub rdev: u64,
    /// Creation time.
    pub btime: i64,
    /// Mutable attributes.
    pub attr: AttrEntry,
    /// The log.
    pub log: Log,
    /// Data mapping (regular files and symlinks).
    pub extents: ExtentMap,
    /// Names (directories; boxed, so a file's inode does not carry an
    /// empty index).
    pub dir: Option<Box<DirIndex>>,
    /// Extended attributes.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The mount scan could not read the inode's whole log (DRAM only;
    /// only a read-only mount keeps such an inode, `Problem::quarantined`):
    /// its attributes, names and xattrs are what was read, its data is
    /// refused with EIO, since what was read may be incomplete.
    pub damaged: bool,
    /// Open file handles.
    pub open_count: u32,
    /// References the kernel holds (FUSE lookup count).
    pub lookups: u64,
    /// The slot was freed on media (nlink 0, not open); DRAM waits for the kernel to forget it.
    pub zombie: bool,
    /// What the file's I/O since mount taught the predictors (DRAM only),
    /// made at its first read, write or fsync ([`Inode::io_mut`]).
    pub io: Option<Box<IoHistory>>,
    /// Pages written to the DRAM cache and not yet in the log, by file page
    /// (see `cache`). Their content is newer than the extent map's.
    pub dirty: BTreeMap<FileBlock, DirtyPage>,
    /// At least the number of runs of consecutive pages in `dirty` (each
    /// cached write adds at most one; reset when `dirty` empties): bounds
    /// the entries the file's write-back commits (`space.rs`).
    pub dirty_runs: u64,
    /// The dirty pages a write-back has taken and not yet committed or
    /// given up (file page → the page's `seq` then). A cached write to one
    /// of them needs a block of its own — the write-back's block will hold
    /// the page's older content — so it claims room as a new page does
    /// (`cache_write.rs`), counted in `dirty_extra`.
    pub wb_in_flight: BTreeMap<FileBlock, u64>,
    /// Pages counted dirty in the cache beyond `dirty.len()`: in-flight
    /// pages rewritten since their write-back took them (each is one more
    /// block until that write-back ends: committed, its older content holds
    /// a block; given up, the page needs one block again).
    pub dirty_extra: u64,
    /// File size including the dirty pages (meaningful while `dirty` is not
    /// empty; `attr.size` is the committed size).
    pub cached_size: u64,
    /// Time of the last cached write (meaningful while `dirty` is not empty).
    pub cached_mtime: i64,
    /// Average modification time over the file's blocks (Ziggurat §5.1).
    pub amtime: terrace_policy::Amtime,
    /// The key under which the file is in the block tiers' cold lists (its
    /// amtime when it was last listed), `None` when not listed.
    pub cold_key: Option<u64>,
    /// The block tiers whose cold lists hold the file under `cold_key`
    /// (bit per tier id: the tiers its data was on when last listed).
    pub cold_tiers: u8,
    /// Keys in the two PM cold lists (PM data without a copy; with a clean
    /// copy), where listed.
    pub pm_cold_keys: [Option<u64>; 2],
    /// Blocks of this file read from block tiers (reverse-migration heat).
    pub block_reads: u64,
    /// Counts write entries applied (see [`Extent::seq`]).
    pub data_seq: u64,
    /// Counts every entry applied since the inode was loaded (DRAM only,
    /// never reset): what a log move checks to know the state it captured
    /// is still the inode's, since the log's head and tail positions can
    /// come back after a change (pages are reused first-fit).
    pub applied: u64,
    /// `attr.atime` was set by a read while the log is on a block tier and
    /// is not in the log yet (lazytime: written with the inode's next
    /// commit, its next log move, or at unmount; see `log_migrate`).
    pub lazy_atime: bool,
    /// Created by [`Fs::tmpfile`](crate::Fs::tmpfile) without `O_EXCL` and
    /// never linked since: `link` may give it its first name although its
    /// link count is 0 (DRAM only: after a crash such a file is an orphan).
    pub linkable: bool,
}

/// A file's I/O since mount as the placement predictors see it: 176 bytes
/// that most inodes of a large pool never need (they are not read or
/// written in a mount), so an inode gets them at its first read, write or
/// fsync (design.md §8).
#[derive(Debug, Clone, Default)]
pub struct IoHistory {
    /// Ziggurat's synchronicity predictor.
    pub sync: terrace_policy::SyncPredictor,
    /// HetFS access trace (empty at mount).
    pub access: terrace_policy::AccessTrace,
}

impl Inode {
    /// The file's I/O history, made on first use.
    pub fn io_mut(&mut self) -> &mut IoHistory {
        self.io.get_or_insert_with(Box::default)
    }

    /// The file's HetFS access class (that of an empty trace when it had
    /// no I/O since mount).
    pub fn access_class(&self) -> terrace_policy::AccessClass {
        match &self.io {
            Some(h) => h.access.class(),
            None => terrace_policy::AccessTrace::default().class(),
        }
    }

    /// The inode as its slot describes it, before any log entry.
    pub fn from_slot(ino: Ino, slot: &InodeSlot) -> Option<Inode> {
        let kind = FileType::from_mode(slot.mode)?;
        let dir = (kind == FileType::Directory).then(Box::<DirIndex>::default);
        Some(Inode {
            ino,
            generation: slot.generation,
            kind,
            rdev: slot.rdev,
            btime: slot.btime_ns,
            attr: AttrEntry {
                mode: slot.mode,
                uid: slot.uid,
                gid: slot.gid,
                nlink: if kind == FileType::Directory { 2 } else { 1 },
                size: 0,
                atime: slot.btime_ns,
                mtime: slot.btime_ns,
                ctime: slot.btime_ns,
                flags: 0,
            },
            log: Log::default(),
            extents: ExtentMap::default(),
            dir,
            xattrs: BTreeMap::new(),
            damaged: false,
            open_count: 0,
            lookups: 0,
            zombie: false,
            io: None,
            dirty: BTreeMap::new(),
            dirty_runs: 0,
            wb_in_flight: BTreeMap::new(),
            dirty_extra: 0,
            cached_size: 0,
            cached_mtime: 0,
            amtime: terrace_policy::Amtime::new(),
            cold_key: None,
            cold_tiers: 0,
            pm_cold_keys: [None, None],
            block_reads: 0,
            data_seq: 0,
            applied: 0,
            lazy_atime: false,
            linkable: false,
        })
    }

    /// Applies one committed entry; returns the physical runs it released.
    pub fn apply(&mut self, e: &Entry) -> Vec<Released> {
        self.applied += 1;
        match e {
            Entry::PageEnd => Vec::new(),
            Entry::Attr(a) => {
                // The type bits of an inode never change.
                let mode = (self.attr.mode & libc::S_IFMT) | (a.mode & !libc::S_IFMT);
                self.attr = AttrEntry { mode, ..*a };
                Vec::new()
            }
            Entry::Write(w) => self.apply_write(w),
            Entry::Punch { file_block, blocks } => {
                self.forget_amtime(*file_block, *blocks);
                self.extents.unmap(*file_block, *blocks)
            }
            Entry::DentryAdd {
                ino,
                file_type,
                name,
            } => {
                if let Some(d) = self.dir.as_mut() {
                    d.insert(name.clone(), *ino, *file_type);
                }
                Vec::new()
            }
            Entry::DentryDel { name } => {
                if let Some(d) = self.dir.as_mut() {
                    d.remove(name);
                }
                Vec::new()
            }
            Entry::XattrSet { name, value } => {
                self.xattrs.insert(name.clone(), value.clone());
                Vec::new()
            }
            Entry::XattrDel { name } => {
                self.xattrs.remove(name);
                Vec::new()
            }
            Entry::XattrAppend { name, value } => {
                self.xattrs
                    .entry(name.clone())
                    .or_default()
                    .extend_from_slice(value);
                Vec::new()
            }
            Entry::Copy(c) => {
                self.data_seq += 1;
                self.extents.apply_copy(c, self.data_seq)
            }
            Entry::Shift {
                file_block,
                blocks,
                op,
            } => {
                if *op == terrace_format::ShiftOp::Collapse {
                    self.forget_amtime(*file_block, *blocks);
                }
                self.data_seq += 1;
                self.extents.shift(*file_block, *blocks, *op, self.data_seq)
            }
            // Checksums live in the tiers' tables (sums.rs); replay at mount
            // reads them from the log itself.
            Entry::Sums { .. } => Vec::new(),
        }
    }

    /// Takes the mapped blocks of a range out of the amtime.
    fn forget_amtime(&mut self, start: FileBlock, n: u64) {
        let old: Vec<(u64, u64)> = self
            .extents
            .overlaps(start, n)
            .into_iter()
            .map(|(_, e)| (e.blocks, e.mtime.max(0) as u64))
            .collect();
        self.amtime.remove(&old);
    }

    fn apply_write(&mut self, w: &WriteEntry) -> Vec<Released> {
        if w.wflags & terrace_format::WRITE_FLAG_MOVED == 0 {
            self.attr.size = w.size_after;
            self.attr.mtime = w.mtime;
            // Never back: a cached write is written back (with its own
            // time) after later changes of the inode that did not write
            // the cache back first (a chmod, a link, an xattr).
            self.attr.ctime = self.attr.ctime.max(w.mtime);
        }
        if w.blocks == 0 {
            return Vec::new();
        }
        self.forget_amtime(w.file_block, w.blocks as u64);
        if w.wflags & terrace_format::WRITE_FLAG_ZERO != 0 {
            return self.extents.unmap(w.file_block, w.blocks as u64);
        }
        self.amtime
            .on_write(&[], w.blocks as u64, w.mtime.max(0) as u64);
        self.data_seq += 1;
        let prior = self.extents.find(w.file_block).map_or(0, |(_, e)| e.writes);
        let writes = if w.wflags & terrace_format::WRITE_FLAG_MOVED == 0 {
            prior.saturating_add(1)
        } else {
            prior
        };
        self.extents.map(
            w.file_block,
            Extent {
                blocks: w.blocks as u64,
                tier: w.tier,
                block: w.block,
                counter: w.size_counter,
                mtime: w.mtime,
                seq: self.data_seq,
                copy: None,
                writes,
                shared: w.wflags & terrace_format::WRITE_FLAG_SHARED != 0,
            },
        )
    }

    /// The size applications see: the committed size, or the size after the
    /// cached writes not yet written back.
    pub fn size(&self) -> u64 {
        if self.dirty.is_empty() {
            self.attr.size
        } else {
            self.attr.size.max(self.cached_size)
        }
    }

    /// `stat` view.
    pub fn stat(&self) -> Attr {
        let data_blocks = self.extents.mapped_blocks()
            + self
                .dirty
                .keys()
                .filter(|&&fb| self.extents.find(fb).is_none())
                .count() as u64;
        let (mtime, ctime) = if self.dirty.is_empty() {
            (self.attr.mtime, self.attr.ctime)
        } else {
            (
                self.attr.mtime.max(self.cached_mtime),
                self.attr.ctime.max(self.cached_mtime),
            )
        };
        Attr {
            ino: self.ino,
            generation: self.generation,
            kind: self.kind,
            mode: self.attr.mode,
            nlink: self.attr.nlink,
            uid: self.attr.uid,
            gid: self.attr.gid,
            rdev: self.rdev,
            size: self.size(),
            blocks: data_blocks * (BLOCK_SIZE / 512),
            atime: self.attr.atime,
            mtime,
            ctime,
            btime: self.btime,
        }
    }

    /// Whether reads of the inode's data are refused with EIO: a read-only
    /// mount's quarantined inode ([`Inode::damaged`]), or a file `fsck`
    /// marked with [`DAMAGED_XATTR`](crate::service_state::DAMAGED_XATTR)
    /// because what it lost may have been data.
    pub fn data_refused(&self) -> bool {
        self.damaged
            || self
                .xattrs
                .contains_key(crate::service_state::DAMAGED_XATTR)
    }

    /// Entries that describe this inode's whole current state (log compaction).
    pub fn snapshot_entries(&self) -> Vec<Entry> {
        let mut v = Vec::new();
        for (s, e) in self.extents.iter() {
            let mut left = e.blocks;
            let mut off = 0;
            while left > 0 {
                let n = left.min(u32::MAX as u64);
                v.push(Entry::Write(WriteEntry {
                    file_block: s + off,
                    blocks: n as u32,
                    tier: e.tier,
                    size_counter: e.counter,
                    wflags: if e.shared {
                        terrace_format::WRITE_FLAG_MOVED | terrace_format::WRITE_FLAG_SHARED
                    } else {
                        terrace_format::WRITE_FLAG_MOVED
                    },
                    block: e.block + off,
                    size_after: self.attr.size,
                    mtime: e.mtime,
                }));
                if let Some((t, b)) = e.copy {
                    v.push(Entry::Copy(terrace_format::CopyEntry {
                        file_block: s + off,
                        blocks: n as u32,
                        tier: t,
                        op: terrace_format::CopyOp::Add,
                        block: b + off,
                    }));
                }
                left -= n;
                off += n;
            }
        }
        if let Some(d) = &self.dir {
            for (_, name, ino, dt) in d.iter() {
                v.push(Entry::DentryAdd {
                    ino,
                    file_type: dt,
                    name: name.to_vec(),
                });
            }
        }
        for (k, val) in &self.xattrs {
            v.extend(xattr_entries(k, val));
        }
        v.push(Entry::Attr(self.attr));
        v
    }

    /// Log bytes the checksums of this file's block-tier data take in a
    /// compacted log (at most).
    pub fn sums_log_bytes(&self) -> u64 {
        self.extents.sums_log_bytes()
    }

    /// Number of entries a compacted log would hold.
    pub fn live_entries(&self) -> u64 {
        (self.extents.len()
            + self.extents.with_copies() as usize
            + self.dir.as_ref().map_or(0, |d| d.len())
            + self
                .xattrs
                .values()
                .map(|v| v.len().div_ceil(terrace_format::XATTR_CHUNK).max(1))
                .sum::<usize>()
            + 1) as u64
    }

    /// Bytes of xattr values beyond what [`Inode::live_entries`] counts at
    /// 64 bytes an entry (values are up to 64 KiB).
    pub fn xattr_value_bytes(&self) -> u64 {
        self.xattrs.values().map(|v| v.len() as u64).sum()
    }
}
