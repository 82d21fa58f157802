//! DRAM state of an inode: attributes, extent map, directory index, xattrs.
//!
//! Everything here is rebuilt at mount by replaying the inode's log
//! ([`Inode::apply`]); operations change it only after their commit point, so the
//! DRAM state always equals "replay of the committed log".

use crate::log::Log;
use crate::types::{Attr, FileType, Ino};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use terrace_format::{AttrEntry, Entry, InodeSlot, WriteEntry, BLOCK_SIZE};

/// Where a run of file blocks lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Number of blocks.
    pub blocks: u64,
    /// Tier id.
    pub tier: u8,
    /// First block on the tier.
    pub block: u64,
    /// Write-size predictor counter of the write entry this came from.
    pub counter: u8,
    /// When this data was written (ns; migration keeps it).
    pub mtime: i64,
    /// The inode's data sequence number when this mapping was made (DRAM
    /// only): a changed mapping always has a new one, even if it reuses the
    /// same blocks, so migration can tell that its copy is stale.
    pub seq: u64,
    /// A second, clean copy of the same data: `(tier, first block)` (NVMFS;
    /// see `terrace_format::CopyEntry`). Reads use the primary location.
    pub copy: Option<(u8, u64)>,
    /// Writes this location has seen (DRAM only, saturating): one more than
    /// the extent that held the write's first block before, the same for a
    /// migration. Rebuilt by log replay at mount (each replayed write entry
    /// counts), so it counts the writes still in the log. NVMFS's
    /// frequency-aware flush order reads it.
    pub writes: u8,
    /// The blocks may be mapped by other entries too (a `copy_file_range`
    /// clone; `terrace_format::WRITE_FLAG_SHARED`, see `shared.rs`). Kept by
    /// log compaction; a move to fresh blocks clears it.
    pub shared: bool,
}

impl Extent {
    /// The part of this extent from block `off` on, `n` blocks long.
    pub fn part(&self, off: u64, n: u64) -> Extent {
        Extent {
            blocks: n,
            block: self.block + off,
            copy: self.copy.map(|(t, b)| (t, b + off)),
            ..*self
        }
    }

    /// The physical runs this extent holds: its blocks and its copy's.
    pub fn runs(&self) -> Vec<Released> {
        let mut v = vec![(self.tier, self.block, self.blocks)];
        if let Some((t, b)) = self.copy {
            v.push((t, b, self.blocks));
        }
        v
    }

    /// The runs of this extent on block tiers (its data's and its copy's),
    /// as `(tier, first block, blocks, is the copy)`: what carries block
    /// checksums (`sums.rs`).
    pub fn block_tier_runs(&self) -> impl Iterator<Item = (u8, u64, u64, bool)> {
        let data = (self.tier != 0).then_some((self.tier, self.block, self.blocks, false));
        let copy = self
            .copy
            .filter(|&(t, _)| t != 0)
            .map(|(t, b)| (t, b, self.blocks, true));
        data.into_iter().chain(copy)
    }
}

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

/// A physical run that a change of the extent map released.
pub type Released = (u8, u64, u64);

/// File block → extent map. Keys are first file blocks; extents never overlap.
///
/// Invariant: the counters (`blocks`, `copies`, `pm_blocks`,
/// `pm_clean_blocks`) always equal what a scan of `map` would give; every
/// change of `map` goes through [`ExtentMap::put`] and [`ExtentMap::take`].
/// They make the hot paths (stat, log-compaction checks, NVMFS's dirty/clean
/// accounting) O(1) in the number of extents.
#[derive(Debug, Clone, Default)]
pub struct ExtentMap {
    map: BTreeMap<u64, Extent>,
    blocks: u64,
    copies: u64,
    pm_blocks: u64,
    pm_clean_blocks: u64,
}

impl ExtentMap {
    fn count(&mut self, e: &Extent, add: bool) {
        let f = |v: &mut u64, n: u64| {
            if add {
                *v += n
            } else {
                *v -= n
            }
        };
        f(&mut self.blocks, e.blocks);
        f(&mut self.copies, u64::from(e.copy.is_some()));
        if e.tier == 0 {
            f(&mut self.pm_blocks, e.blocks);
            if e.copy.is_some() {
                f(&mut self.pm_clean_blocks, e.blocks);
            }
        }
    }

    /// Inserts (or replaces) the extent starting at `s`.
    fn put(&mut self, s: u64, e: Extent) {
        self.count(&e, true);
        if let Some(old) = self.map.insert(s, e) {
            self.count(&old, false);
        }
    }

    /// Removes the extent starting at `s`.
    fn take(&mut self, s: u64) -> Option<Extent> {
        let e = self.map.remove(&s)?;
        self.count(&e, false);
        Some(e)
    }

    /// Splits the extent covering `b` (if any) so that one starts at `b`.
    fn split_at(&mut self, b: u64) {
        if let Some((&s, &e)) = self.map.range(..b).next_back() {
            if s + e.blocks > b {
                self.put(s, e.part(0, b - s));
                self.put(b, e.part(b - s, s + e.blocks - b));
            }
        }
    }

    /// Removes `[start, start + n)` from the map; returns the physical runs
    /// released (primary blocks and copies).
    pub fn unmap(&mut self, start: u64, n: u64) -> Vec<Released> {
        let end = start.saturating_add(n);
        self.split_at(start);
        if end != u64::MAX {
            self.split_at(end);
        }
        let inside: Vec<u64> = self.map.range(start..end).map(|(&s, _)| s).collect();
        let mut out = Vec::new();
        for s in inside {
            let e = self.take(s).expect("key exists");
            out.extend(e.runs());
        }
        out
    }

    /// Applies a copy entry to `[start, start + n)` (every block mapped);
    /// returns the runs it releases.
    pub fn apply_copy(&mut self, c: &terrace_format::CopyEntry, seq: u64) -> Vec<Released> {
        use terrace_format::CopyOp;
        let start = c.file_block;
        let end = start + c.blocks as u64;
        self.split_at(start);
        self.split_at(end);
        let inside: Vec<u64> = self.map.range(start..end).map(|(&s, _)| s).collect();
        let mut out = Vec::new();
        for s in inside {
            let mut e = self.take(s).expect("key exists");
            let at = c.block + (s - start);
            match c.op {
                CopyOp::Add => {
                    if let Some((t, b)) = e.copy {
                        out.push((t, b, e.blocks));
                    }
                    e.copy = Some((c.tier, at));
                }
                CopyOp::Promote => {
                    out.push((e.tier, e.block, e.blocks));
                    e.tier = c.tier;
                    e.block = at;
                    e.copy = None;
                    // The copy was this file's alone.
                    e.shared = false;
                }
                CopyOp::Drop => {
                    if let Some((t, b)) = e.copy.take() {
                        out.push((t, b, e.blocks));
                    }
                }
            }
            e.seq = seq;
            self.put(s, e);
        }
        out
    }

    /// Applies a shift entry (COLLAPSE_RANGE / INSERT_RANGE): a collapse
    /// unmaps `[start, start + n)` and moves every extent after it down by
    /// `n`; an insert splits the extent covering `start` and moves every
    /// extent from `start` on up by `n`. Moved extents get `seq` (migration
    /// then sees their mapping changed). Returns the runs a collapse releases.
    pub fn shift(
        &mut self,
        start: u64,
        n: u64,
        op: terrace_format::ShiftOp,
        seq: u64,
    ) -> Vec<Released> {
        use terrace_format::ShiftOp;
        let (out, from) = match op {
            ShiftOp::Collapse => (self.unmap(start, n), start.saturating_add(n)),
            ShiftOp::Insert => {
                self.split_at(start);
                (Vec::new(), start)
            }
        };
        let keys: Vec<u64> = self.map.range(from..).map(|(&s, _)| s).collect();
        let moved: Vec<(u64, Extent)> = keys
            .into_iter()
            .map(|s| (s, self.take(s).expect("key exists")))
            .collect();
        for (s, mut e) in moved {
            e.seq = seq;
            let to = match op {
                ShiftOp::Collapse => s - n,
                ShiftOp::Insert => s.saturating_add(n),
            };
            self.put(to, e);
        }
        out
    }

    /// Maps `[start, start + ext.blocks)` to `ext`, returning the runs it displaced.
    pub fn map(&mut self, start: u64, ext: Extent) -> Vec<Released> {
        let out = self.unmap(start, ext.blocks);
        self.put(start, ext);
        out
    }

    /// The extent covering file block `b`, with `b`'s index inside it.
    pub fn find(&self, b: u64) -> Option<(u64, Extent)> {
        let (&s, &e) = self.map.range(..=b).next_back()?;
        (s + e.blocks > b).then_some((s, e))
    }

    /// First block of the first extent starting after block `b`.
    pub fn next_start_after(&self, b: u64) -> Option<u64> {
        self.map.range(b + 1..).next().map(|(&s, _)| s)
    }

    /// The mapped parts of `[start, start + n)`: `(first file block, extent)`
    /// clipped to the range.
    pub fn overlaps(&self, start: u64, n: u64) -> Vec<(u64, Extent)> {
        let end = start.saturating_add(n);
        let mut out = Vec::new();
        if let Some((s, e)) = self.find(start) {
            let until = (s + e.blocks).min(end);
            out.push((start, e.part(start - s, until - start)));
        }
        for (&s, &e) in self.map.range(start.saturating_add(1)..end) {
            let until = (s + e.blocks).min(end);
            out.push((s, e.part(0, until - s)));
        }
        out
    }

    /// Iterates over `(first file block, extent)`.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Extent)> + '_ {
        self.map.iter().map(|(&s, &e)| (s, e))
    }

    /// Number of mapped blocks.
    pub fn mapped_blocks(&self) -> u64 {
        self.blocks
    }

    /// Number of extents that have a clean copy.
    pub fn with_copies(&self) -> u64 {
        self.copies
    }

    /// Blocks on PM: `(with a clean copy, without)`.
    pub fn pm_clean_dirty(&self) -> (u64, u64) {
        (self.pm_clean_blocks, self.pm_blocks - self.pm_clean_blocks)
    }

    /// Number of extents.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// A directory's name index. Cookies give `readdir` stable offsets for the life
/// of a mount: a name keeps its cookie until it is removed.
#[derive(Debug, Clone, Default)]
pub struct DirIndex {
    /// Name → (child, DT type, cookie).
    pub names: HashMap<Vec<u8>, (Ino, u8, u64)>,
    /// Cookie → name, in insertion order.
    pub order: BTreeMap<u64, Vec<u8>>,
    next_cookie: u64,
    /// Parent directory (derived from the tree; the root is its own parent).
    pub parent: Ino,
    /// Number of subdirectories.
    pub subdirs: u32,
}

/// First cookie handed to a name ("." is 1, ".." is 2).
pub const FIRST_COOKIE: u64 = 3;

impl DirIndex {
    /// Adds or replaces `name`.
    pub fn insert(&mut self, name: Vec<u8>, ino: Ino, dt: u8) {
        if self.next_cookie < FIRST_COOKIE {
            self.next_cookie = FIRST_COOKIE;
        }
        if let Some(old) = self.names.get_mut(&name) {
            if old.1 == libc::DT_DIR {
                self.subdirs -= 1;
            }
            if dt == libc::DT_DIR {
                self.subdirs += 1;
            }
            old.0 = ino;
            old.1 = dt;
            return;
        }
        let c = self.next_cookie;
        self.next_cookie += 1;
        if dt == libc::DT_DIR {
            self.subdirs += 1;
        }
        self.order.insert(c, name.clone());
        self.names.insert(name, (ino, dt, c));
    }

    /// Removes `name`; returns what it pointed to.
    pub fn remove(&mut self, name: &[u8]) -> Option<(Ino, u8)> {
        let (ino, dt, c) = self.names.remove(name)?;
        self.order.remove(&c);
        if dt == libc::DT_DIR {
            self.subdirs -= 1;
        }
        Some((ino, dt))
    }

    /// The readdir cookie of `name`.
    pub fn cookie_of(&self, name: &[u8]) -> Option<u64> {
        self.names.get(name).map(|&(_, _, c)| c)
    }

    /// Gives `name` the cookie `cookie` (free: the name that had it is gone),
    /// so a name renamed within its directory keeps its place in readdir
    /// order — a directory read while its entries are renamed sees each
    /// once, instead of meeting every renamed entry again at the end.
    pub fn move_to_cookie(&mut self, name: &[u8], cookie: u64) {
        if self.order.contains_key(&cookie) {
            return;
        }
        if let Some(e) = self.names.get_mut(name) {
            self.order.remove(&e.2);
            e.2 = cookie;
            self.order.insert(cookie, name.to_vec());
        }
    }

    /// Looks a name up.
    pub fn get(&self, name: &[u8]) -> Option<(Ino, u8)> {
        self.names.get(name).map(|&(i, d, _)| (i, d))
    }

    /// Number of names.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when the directory has no names.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
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
    /// Names (directories).
    pub dir: Option<DirIndex>,
    /// Extended attributes.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Open file handles.
    pub open_count: u32,
    /// References the kernel holds (FUSE lookup count).
    pub lookups: u64,
    /// The slot was freed on media (nlink 0, not open); DRAM waits for the kernel to forget it.
    pub zombie: bool,
    /// Ziggurat's synchronicity predictor for this file (DRAM only).
    pub sync: terrace_policy::SyncPredictor,
    /// Pages written to the DRAM cache and not yet in the log, by file page
    /// (see `cache`). Their content is newer than the extent map's.
    pub dirty: BTreeMap<u64, DirtyPage>,
    /// At least the number of runs of consecutive pages in `dirty` (each
    /// cached write adds at most one; reset when `dirty` empties): bounds
    /// the entries the file's write-back commits (`space.rs`).
    pub dirty_runs: u64,
    /// File size including the dirty pages (meaningful while `dirty` is not
    /// empty; `attr.size` is the committed size).
    pub cached_size: u64,
    /// Time of the last cached write (meaningful while `dirty` is not empty).
    pub cached_mtime: i64,
    /// Average modification time over the file's blocks (Ziggurat §5.1).
    pub amtime: terrace_policy::Amtime,
    /// The key under which the file is in the cold lists (its amtime when it
    /// was last listed), `None` when not listed.
    pub cold_key: Option<u64>,
    /// Keys in the two PM cold lists (PM data without a copy; with a clean
    /// copy), where listed.
    pub pm_cold_keys: [Option<u64>; 2],
    /// Blocks of this file read from block tiers (reverse-migration heat).
    pub block_reads: u64,
    /// Counts write entries applied (see [`Extent::seq`]).
    pub data_seq: u64,
    /// HetFS access trace (DRAM only; empty at mount).
    pub access: terrace_policy::AccessTrace,
    /// `attr.atime` was set by a read while the log is on a block tier and
    /// is not in the log yet (lazytime: written with the inode's next
    /// commit, its next log move, or at unmount; see `log_migrate`).
    pub lazy_atime: bool,
    /// Created by [`Fs::tmpfile`](crate::Fs::tmpfile) without `O_EXCL` and
    /// never linked since: `link` may give it its first name although its
    /// link count is 0 (DRAM only: after a crash such a file is an orphan).
    pub linkable: bool,
}

impl Inode {
    /// The inode as its slot describes it, before any log entry.
    pub fn from_slot(ino: Ino, slot: &InodeSlot) -> Option<Inode> {
        let kind = FileType::from_mode(slot.mode)?;
        let dir = (kind == FileType::Directory).then(DirIndex::default);
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
            open_count: 0,
            lookups: 0,
            zombie: false,
            sync: terrace_policy::SyncPredictor::new(),
            dirty: BTreeMap::new(),
            dirty_runs: 0,
            cached_size: 0,
            cached_mtime: 0,
            amtime: terrace_policy::Amtime::new(),
            cold_key: None,
            pm_cold_keys: [None, None],
            block_reads: 0,
            data_seq: 0,
            access: Default::default(),
            lazy_atime: false,
            linkable: false,
        })
    }

    /// Applies one committed entry; returns the physical runs it released.
    pub fn apply(&mut self, e: &Entry) -> Vec<Released> {
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
    fn forget_amtime(&mut self, start: u64, n: u64) {
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
            self.attr.ctime = w.mtime;
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
            for name in d.order.values() {
                let (ino, dt, _) = d.names[name];
                v.push(Entry::DentryAdd {
                    ino,
                    file_type: dt,
                    name: name.clone(),
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
        self.extents
            .iter()
            .flat_map(|(_, e)| e.block_tier_runs())
            .map(|(_, _, n, _)| crate::sums::sums_log_bytes(n))
            .sum()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(blocks: u64, block: u64) -> Extent {
        Extent {
            blocks,
            tier: 0,
            block,
            counter: 0,
            mtime: 0,
            seq: 0,
            copy: None,
            writes: 1,
            shared: false,
        }
    }

    #[test]
    fn extent_map_counters_match_a_scan_after_random_changes() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut m = ExtentMap::default();
        for step in 0..5000 {
            let start = rng.gen_range(0..200u64);
            let n = rng.gen_range(1..20u64);
            match rng.gen_range(0..4) {
                0 => {
                    m.unmap(start, n);
                }
                1 if m.find(start).is_some() => {
                    // A copy entry over the mapped part of the extent at `start`.
                    let (s, e) = m.find(start).unwrap();
                    let len = (s + e.blocks - start).min(n);
                    let op = match rng.gen_range(0..3) {
                        0 => terrace_format::CopyOp::Add,
                        1 => terrace_format::CopyOp::Promote,
                        _ => terrace_format::CopyOp::Drop,
                    };
                    let c = terrace_format::CopyEntry {
                        file_block: start,
                        blocks: len as u32,
                        tier: rng.gen_range(0..2),
                        op,
                        block: rng.gen_range(0..1000),
                    };
                    m.apply_copy(&c, step);
                }
                _ => {
                    let e = Extent {
                        tier: rng.gen_range(0..2),
                        ..ext(n, rng.gen_range(0..1000))
                    };
                    m.map(start, e);
                }
            }
            let scan_blocks: u64 = m.iter().map(|(_, e)| e.blocks).sum();
            let scan_copies = m.iter().filter(|(_, e)| e.copy.is_some()).count() as u64;
            let pm = |clean: bool| -> u64 {
                m.iter()
                    .filter(|(_, e)| e.tier == 0 && e.copy.is_some() == clean)
                    .map(|(_, e)| e.blocks)
                    .sum()
            };
            assert_eq!(m.mapped_blocks(), scan_blocks, "step {step}");
            assert_eq!(m.with_copies(), scan_copies, "step {step}");
            assert_eq!(m.pm_clean_dirty(), (pm(true), pm(false)), "step {step}");
        }
    }

    #[test]
    fn overwrite_in_the_middle_splits_and_releases_exactly_the_overlap() {
        let mut m = ExtentMap::default();
        assert!(m.map(0, ext(10, 100)).is_empty());
        let rel = m.map(3, ext(2, 500));
        assert_eq!(rel, vec![(0, 103, 2)]);
        assert_eq!(m.find(2), Some((0, ext(3, 100))));
        assert_eq!(m.find(4), Some((3, ext(2, 500))));
        assert_eq!(m.find(5), Some((5, ext(5, 105))));
        assert_eq!(m.mapped_blocks(), 10);
    }

    #[test]
    fn collapse_and_insert_move_later_extents_and_keep_their_blocks() {
        use terrace_format::ShiftOp;
        let mut m = ExtentMap::default();
        m.map(0, ext(4, 100));
        m.map(6, ext(4, 200));
        // Insert 3 blocks at block 2: the first extent splits.
        assert!(m.shift(2, 3, ShiftOp::Insert, 9).is_empty());
        assert_eq!(m.find(1).map(|(s, e)| (s, e.block)), Some((0, 100)));
        assert!(m.find(2).is_none() && m.find(4).is_none());
        assert_eq!(
            m.find(5).map(|(s, e)| (s, e.block, e.seq)),
            Some((5, 102, 9))
        );
        assert_eq!(m.find(9).map(|(s, e)| (s, e.block)), Some((9, 200)));
        assert_eq!(m.mapped_blocks(), 8);
        // Collapse it again, plus one block of the second extent's start.
        let rel = m.shift(2, 3, ShiftOp::Collapse, 10);
        assert!(rel.is_empty());
        let rel = m.shift(6, 1, ShiftOp::Collapse, 11);
        assert_eq!(rel, vec![(0, 200, 1)]);
        assert_eq!(m.find(3).map(|(s, e)| (s, e.block)), Some((2, 102)));
        assert_eq!(
            m.find(6).map(|(s, e)| (s, e.block, e.blocks)),
            Some((6, 201, 3))
        );
        assert_eq!(m.mapped_blocks(), 7);
    }

    #[test]
    fn unmap_across_several_extents_releases_each_part() {
        let mut m = ExtentMap::default();
        m.map(0, ext(4, 100));
        m.map(4, ext(4, 200));
        m.map(10, ext(4, 300));
        let mut rel = m.unmap(2, 10);
        rel.sort();
        assert_eq!(rel, vec![(0, 102, 2), (0, 200, 4), (0, 300, 2)]);
        assert_eq!(m.mapped_blocks(), 4);
        assert_eq!(m.find(12), Some((12, ext(2, 302))));
    }

    #[test]
    fn dir_cookies_are_stable_and_replace_keeps_cookie() {
        let mut d = DirIndex::default();
        d.insert(b"a".to_vec(), 5, libc::DT_REG);
        d.insert(b"b".to_vec(), 6, libc::DT_DIR);
        let cb = d.names[&b"b".to_vec()].2;
        d.insert(b"b".to_vec(), 7, libc::DT_REG);
        assert_eq!(d.names[&b"b".to_vec()], (7, libc::DT_REG, cb));
        assert_eq!(d.subdirs, 0);
        assert_eq!(d.remove(b"a"), Some((5, libc::DT_REG)));
        assert_eq!(d.len(), 1);
    }
}
