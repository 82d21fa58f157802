//! Rebuilding DRAM state from the PM tier: the only way a pool is opened.
//!
//! Steps (docs/design.md, "Recovery"):
//! 1. choose the newest valid superblock copy;
//! 2. roll back open journal transactions;
//! 3. read every in-use inode slot and replay its log into a DRAM [`Inode`];
//! 4. walk the tree from the root: set directory parents, find dangling entries;
//! 5. in-use slots no directory reaches are orphans (a create that did not
//!    commit, or a file unlinked while open): they are freed;
//! 6. the page allocator is the complement of live log pages and live data.
//!
//! A scan collects every problem it finds instead of stopping at the first, so
//! `fsck` can report them all; mount refuses a pool with any problem other than
//! link-count mismatches.

use crate::alloc::{PageAllocator, Run};
use crate::inode::Inode;
use crate::log::walk;
use crate::types::{FileType, Ino};
use std::collections::{HashMap, VecDeque};
use terrace_format::{
    decode_tier_log_head, inode_offset, is_used_state, FormatError, InodeSlot, PhysBlock,
    Superblock, TierId, BLOCK_SIZE, INODE_SIZE, INODE_USED_TIER_LOG, ROOT_INO, SUPERBLOCK_A_BLOCK,
    SUPERBLOCK_B_BLOCK,
};
use terrace_format::{INODE_OFF_LOG_HEAD, INODE_OFF_LOG_TAIL, INODE_USED};
use terrace_media::PmMedia;

pub use crate::recovery_blobs::TierDevices;
use crate::recovery_blobs::{blob_fits_its_place, fits_within, read_log_blob, BlobBlocks};
pub use crate::recovery_problems::{LogWord, OpenError, Problem};

/// Everything a scan learned.
pub struct Scan {
    /// The superblock in use.
    pub sb: Superblock,
    /// Where the inode table's slots lie on PM: the base table and the
    /// groups it grew by (read from the inode map blocks).
    pub inode_map: terrace_format::InodeMap,
    /// DRAM inodes by number (reachable ones only).
    pub inodes: HashMap<Ino, Inode>,
    /// Inconsistencies.
    pub problems: Vec<Problem>,
    /// In-use slots no directory reaches (freed by mount).
    pub orphans: Vec<Ino>,
    /// Data the orphans mapped, in bytes (given back with them).
    pub orphan_bytes: u64,
    /// Inode logs replayed (orphans' included) and their entries.
    pub replayed: Replayed,
    /// Journal transactions rolled back.
    pub rolled_back: usize,
    /// The allocator (None when block ownership is inconsistent).
    pub alloc: Option<PageAllocator>,
    /// Small log pages' slabs (meaningful when `alloc` is `Some`).
    pub log_space: crate::log_space::LogSpace,
    /// Runs that live write entries use on each block tier.
    pub block_used: std::collections::BTreeMap<TierId, Vec<Run>>,
    /// Checksums of the block-tier blocks the replayed inodes reference,
    /// by tier id (`sums.rs`).
    pub sums: std::collections::BTreeMap<TierId, crate::sums::BlockSums>,
    /// Extra references of blocks several extents map, by tier (0 = PM).
    pub shared: std::collections::BTreeMap<TierId, crate::shared::RefRuns>,
    /// Extra references of blocks several packed log blobs share, by tier.
    pub packed_logs: std::collections::BTreeMap<TierId, crate::shared::RefRuns>,
}

/// How much log a scan replayed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Replayed {
    /// Inode logs (one per in-use slot that was read).
    pub logs: u64,
    /// Their entries.
    pub entries: u64,
}

impl Scan {
    /// The checksum tables, as commits and fsck repairs take them.
    pub fn sums_tables(&self) -> crate::sums::SumsTables<'_> {
        self.sums.iter().map(|(id, s)| (*id, s)).collect()
    }

    /// PM byte offset of the slot of `ino`, an inode the scan found.
    pub fn slot_offset(&self, ino: Ino) -> u64 {
        self.inode_map
            .offset(ino)
            .expect("a scanned inode's slot is in the table")
    }
}

/// Records, from the Sums entries of one replayed inode's log (in log
/// order), the checksums of the blocks the inode references now. Its log
/// may still hold checksums of blocks it gave up, which another file may
/// own since; those are left out.
fn keep_referenced_sums(
    inode: &Inode,
    entries: &mut dyn Iterator<Item = &terrace_format::Entry>,
    sums: &std::collections::BTreeMap<TierId, crate::sums::BlockSums>,
) {
    use terrace_format::Entry;
    let mut found = entries
        .filter(|e| match e {
            Entry::Sums { .. } => true,
            Entry::Write(w) => !w.tier.is_pm() && w.wflags & terrace_format::WRITE_FLAG_ZEROED != 0,
            _ => false,
        })
        .peekable();
    if found.peek().is_none() {
        return;
    }
    let mut refs: Vec<(TierId, PhysBlock, u64)> = inode
        .extents
        .iter()
        .flat_map(|(_, e)| e.block_tier_runs())
        .map(|(t, b, n, _)| (t, b, n))
        .collect();
    refs.sort_unstable();
    let referenced = |tier: TierId, b: PhysBlock| {
        let i = refs.partition_point(|&(t, s, _)| (t, s) <= (tier, b));
        i > 0 && {
            let (t, s, n) = refs[i - 1];
            t == tier && b < s + n
        }
    };
    let set = |tier: TierId, b: PhysBlock, crc: u32| {
        if let Some(table) = sums.get(&tier) {
            if referenced(tier, b) {
                table.set(b, crc);
            }
        }
    };
    for e in found {
        match e {
            Entry::Sums { tier, block, crcs } => {
                for (i, c) in crcs.iter().enumerate() {
                    set(*tier, block.saturating_add(i as u64), *c);
                }
            }
            Entry::Write(w) => {
                let zero = crate::sums::zero_block_crc();
                let first = w.block.get();
                for b in first..first.saturating_add(u64::from(w.blocks)) {
                    set(w.tier, PhysBlock(b), zero);
                }
            }
            _ => {}
        }
    }
}

/// Reads and checks both superblock copies.
pub fn read_superblock(media: &dyn PmMedia) -> Result<Superblock, OpenError> {
    if media.len() < 4 * BLOCK_SIZE {
        return Err(OpenError::NotAPool(format!(
            "only {} bytes long",
            media.len()
        )));
    }
    let mut a = vec![0u8; BLOCK_SIZE as usize];
    let mut b = vec![0u8; BLOCK_SIZE as usize];
    media.read(SUPERBLOCK_A_BLOCK * BLOCK_SIZE, &mut a);
    media.read(SUPERBLOCK_B_BLOCK * BLOCK_SIZE, &mut b);
    let sb = Superblock::choose(&a, &b).map_err(|e| match e {
        FormatError::BadMagic => OpenError::NotAPool("no Terrace superblock".into()),
        FormatError::UnsupportedVersion(v) => OpenError::NewerVersion(v),
        FormatError::BadChecksum => {
            OpenError::BadSuperblock("both superblock copies fail their checksum".into())
        }
        FormatError::Invalid(w) => {
            OpenError::BadSuperblock(format!("superblock field invalid: {w}"))
        }
    })?;
    if sb.pm_size > media.len() {
        return Err(OpenError::BadSuperblock(format!(
            "the PM tier is {} bytes but its superblock says {} (truncated file?)",
            media.len(),
            sb.pm_size
        )));
    }
    Ok(sb)
}

/// A read-only view of a media with some 8-byte words replaced: the state the
/// journal rollback would produce, seen before anything is written.
pub(crate) struct Overlay<'a> {
    pub(crate) inner: &'a dyn PmMedia,
    pub(crate) words: std::collections::BTreeMap<u64, u64>,
}

impl PmMedia for Overlay<'_> {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, off: u64, buf: &mut [u8]) {
        self.inner.read(off, buf);
        let end = off + buf.len() as u64;
        for (&a, &v) in self.words.range(off.saturating_sub(7)..end) {
            for (k, byte) in v.to_le_bytes().iter().enumerate() {
                let at = a + k as u64;
                if at >= off && at < end {
                    buf[(at - off) as usize] = *byte;
                }
            }
        }
    }
    fn write(&self, _: u64, _: &[u8]) {
        unreachable!("the recovery overlay is read-only")
    }
    fn store_u64(&self, _: u64, _: u64) {
        unreachable!("the recovery overlay is read-only")
    }
    fn flush(&self, _: u64, _: u64) {}
    fn fence(&self) {}
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// Scans a pool without writing to it. When `write` is set and nothing found
/// blocks a mount, it then rolls back open journal transactions and frees
/// orphans on media (mount, `fsck --repair`). A pool that mount refuses is never
/// written to.
pub fn scan(
    media: &dyn PmMedia,
    tiers: &TierDevices,
    write: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Scan, OpenError> {
    let mut sc = read_scan(media, tiers, progress, false)?;
    if write {
        finish_recovery(media, &mut sc);
    }
    Ok(sc)
}

/// A scan that writes nothing and keeps the orphans: they are listed in
/// `orphans` and also kept in `inodes`, so that the allocator counts their
/// log pages and data as used (`fsck --repair` adopts orphans into
/// `/lost+found` with entries it appends, and must not hand their space to
/// those entries). Their link counts show up as problems.
pub fn scan_keeping_orphans(
    media: &dyn PmMedia,
    tiers: &TierDevices,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Scan, OpenError> {
    read_scan(media, tiers, progress, true)
}

/// The reading half of a scan: on a view with open journal transactions
/// rolled back in DRAM.
fn read_scan(
    media: &dyn PmMedia,
    tiers: &TierDevices,
    progress: &mut dyn FnMut(u64, u64),
    keep_orphans: bool,
) -> Result<Scan, OpenError> {
    let sb = read_superblock(media)?;
    let mut problems = Vec::new();
    let (rolled_back, words) = match crate::journal::open_transactions(media) {
        Ok(v) => (v.len(), v.into_iter().flatten().collect()),
        Err((slot, what)) => {
            problems.push(Problem::BadJournal { slot, what });
            (0, Default::default())
        }
    };
    let view = Overlay {
        inner: media,
        words,
    };
    let mut sc = scan_view(&view, tiers, sb, problems, progress, keep_orphans);
    sc.rolled_back = rolled_back;
    Ok(sc)
}

/// The writing half of recovery, after a read-only [`scan`]: when nothing found
/// blocks a mount, rolls back open journal transactions and frees orphans.
pub fn finish_recovery(media: &dyn PmMedia, sc: &mut Scan) {
    if sc.problems.iter().any(|p| p.blocks_mount()) {
        return;
    }
    if let Err((slot, what)) = crate::journal::recover(media, true) {
        sc.problems.push(Problem::BadJournal { slot, what });
        return;
    }
    for o in &sc.orphans {
        let state = sc.slot_offset(*o) + terrace_format::INODE_OFF_STATE;
        media.store_u64(state, 0);
        media.flush(state, 8);
    }
    media.fence();
}

/// The PM block of each group of inode slots the table grew by, in group
/// order: the entries of the superblock's inode map blocks up to the first
/// 0 (design.md §3.7). An error names a map block or entry that cannot be
/// right (outside the page pool, a block named twice, an entry after the
/// end); the pool does not mount then.
pub fn read_inode_groups(media: &dyn PmMedia, sb: &Superblock) -> Result<Vec<u64>, String> {
    let pool = sb.pool_start..sb.pool_start.saturating_add(sb.pool_blocks);
    let mut groups = Vec::new();
    let mut seen: std::collections::HashSet<u64> = sb.inode_map_blocks.iter().copied().collect();
    let mut ended = false;
    for (m, &map) in sb.inode_map_blocks.iter().enumerate() {
        for k in 0..terrace_format::INODE_MAP_ENTRIES {
            let b = media.load_u64(map * BLOCK_SIZE + k * 8);
            if b == 0 {
                ended = true;
                continue;
            }
            let what = if ended {
                "follows the end of the list"
            } else if !pool.contains(&b) {
                "lies outside the page pool"
            } else if !seen.insert(b) {
                "is named twice"
            } else {
                groups.push(b);
                continue;
            };
            return Err(format!(
                "inode map block {map} (number {m}), entry {k}: group block {b} {what}"
            ));
        }
    }
    Ok(groups)
}

/// The slot word whose check alone makes the in-use slot bytes `raw` fail
/// to decode: with its check bits cleared (read unchecked) they decode as
/// an in-use slot — a state-1 slot with a log, for the head; a state-1 or
/// state-2 slot, for the tail (a state-2 tail is its log blob's length).
/// None when the slot has another fault.
pub(crate) fn damaged_slot_word(raw: &[u8]) -> Option<LogWord> {
    let raw = raw.get(..INODE_SIZE)?;
    let decodes_unchecked = |word: u64, need_log: bool| {
        let mut copy = raw.to_vec();
        let at = word as usize..word as usize + 8;
        let stored = u64::from_le_bytes(copy[at.clone()].try_into().expect("8 bytes"));
        copy[at]
            .copy_from_slice(&(stored & terrace_format::PAGE_POINTER_OFFSET_MASK).to_le_bytes());
        match InodeSlot::decode(&copy) {
            Ok(s) if s.state == INODE_USED => s.log_tail != 0 || !need_log,
            Ok(s) => s.state == INODE_USED_TIER_LOG && !need_log,
            Err(_) => false,
        }
    };
    if decodes_unchecked(INODE_OFF_LOG_HEAD, true) {
        Some(LogWord::Head)
    } else if decodes_unchecked(INODE_OFF_LOG_TAIL, false) {
        Some(LogWord::Tail)
    } else {
        None
    }
}

fn scan_view(
    media: &dyn PmMedia,
    tiers: &TierDevices,
    sb: Superblock,
    mut problems: Vec<Problem>,
    progress: &mut dyn FnMut(u64, u64),
    keep_orphans: bool,
) -> Scan {
    let pool = sb.page_pool_bytes();
    // The whole table, base and groups, in slot order.
    let inode_groups = match read_inode_groups(media, &sb) {
        Ok(g) => g,
        Err(what) => {
            problems.push(Problem::BlockOwnership { ino: 0, what });
            Vec::new()
        }
    };
    let n = sb.inode_count + inode_groups.len() as u64 * terrace_format::INODES_PER_BLOCK;
    let mut table = vec![0u8; (n * INODE_SIZE as u64) as usize];
    media.read(
        inode_offset(0),
        &mut table[..(sb.inode_count * INODE_SIZE as u64) as usize],
    );
    const GROUP_BYTES: usize = BLOCK_SIZE as usize;
    for (g, &block) in inode_groups.iter().enumerate() {
        let at = (sb.inode_count * INODE_SIZE as u64) as usize + g * GROUP_BYTES;
        media.read(block * BLOCK_SIZE, &mut table[at..at + GROUP_BYTES]);
    }
    let mut inodes: HashMap<Ino, Inode> = HashMap::new();
    let mut blob_blocks = BlobBlocks::default();
    let sums: std::collections::BTreeMap<TierId, crate::sums::BlockSums> = sb
        .tiers
        .iter()
        .filter(|t| t.kind != terrace_format::TierKind::Pm)
        .map(|t| {
            (
                TierId(t.id),
                crate::sums::BlockSums::new(t.size / BLOCK_SIZE),
            )
        })
        .collect();
    for ino in 1..n {
        if ino % 4096 == 0 {
            progress(ino, n);
        }
        let raw = &table[(ino as usize) * INODE_SIZE..(ino as usize + 1) * INODE_SIZE];
        let slot = match InodeSlot::decode(raw) {
            Ok(s) if is_used_state(s.state) => s,
            Ok(_) => continue,
            Err(e) => {
                let corrected = terrace_format::correct_one_flipped_bit(raw)
                    .and_then(|(b, byte)| Some((InodeSlot::decode(&b).ok()?, byte)));
                if let Some((slot, byte)) = corrected {
                    // One flipped bit that the slot's check corrects: the
                    // inode is read so (`fsck --repair` writes it).
                    problems.push(Problem::SlotBitFlip { ino, byte });
                    slot
                } else {
                    problems.push(match damaged_slot_word(raw) {
                        Some(word) => Problem::BadLogPointer {
                            ino,
                            word,
                            safe_tail: 0,
                        },
                        None => Problem::BadSlot {
                            ino,
                            what: format!("slot {e}"),
                        },
                    });
                    continue;
                }
            }
        };
        let Some(mut inode) = Inode::from_slot(ino, &slot) else {
            problems.push(Problem::BadSlot {
                ino,
                what: format!("invalid mode {:o}", slot.mode),
            });
            continue;
        };
        if slot.state == INODE_USED_TIER_LOG {
            // The log was moved to a block tier (log migration): one blob.
            let (tier, block, offset) = decode_tier_log_head(slot.log_head);
            let bytes = slot.log_tail;
            let blocks = (offset + bytes).div_ceil(BLOCK_SIZE);
            let rec = sb
                .tiers
                .iter()
                .find(|t| t.id == tier.get() && t.kind != terrace_format::TierKind::Pm);
            if !blob_fits_its_place(offset, bytes)
                || !rec.is_some_and(|r| {
                    block > PhysBlock::ZERO
                        && fits_within(block, blocks, PhysBlock(r.size / BLOCK_SIZE))
                })
            {
                problems.push(Problem::BadLog {
                    ino,
                    what: format!("log on tier {tier} at block {block}: no such place"),
                    safe_tail: 0,
                });
                inodes.insert(ino, inode);
                continue;
            }
            match read_log_blob(
                tiers,
                &mut blob_blocks,
                ino,
                slot.generation,
                (tier, block, offset, bytes),
            ) {
                Ok(Some(blob)) => {
                    for e in &blob.entries {
                        inode.apply(e);
                    }
                    keep_referenced_sums(&inode, &mut blob.entries.iter(), &sums);
                    inode.log.entries = blob.entries.len() as u64;
                }
                Ok(None) => problems.push(Problem::LogOnMissingTier {
                    ino,
                    tier: tier.get(),
                }),
                Err(err) => {
                    // What of a damaged blob still reads is the inode's
                    // state as far as it is known: its blocks stay owned
                    // (nothing allocates over them) and `fsck --repair`
                    // keeps it (design.md §3.6).
                    let mut what = err.what;
                    if let Some(salvaged) = &err.salvaged {
                        for e in &salvaged.entries {
                            inode.apply(e);
                        }
                        if !salvaged
                            .entries
                            .iter()
                            .any(|e| matches!(e, terrace_format::Entry::Attr(_)))
                        {
                            crate::recovery_blobs::attributes_lost(&mut inode, &salvaged.entries);
                            what.push_str(
                                "; its attributes are lost (permissions kept for the owner only)",
                            );
                        }
                        if let Some(why) = crate::recovery_blobs::data_may_be_lost(&inode, salvaged)
                        {
                            inode.xattrs.insert(
                                crate::service_state::DAMAGED_XATTR.to_vec(),
                                why.clone().into_bytes(),
                            );
                            what.push_str(&format!("; {why}"));
                        }
                        keep_referenced_sums(&inode, &mut salvaged.entries.iter(), &sums);
                        inode.log.entries = salvaged.entries.len() as u64;
                    }
                    problems.push(Problem::BadLog {
                        ino,
                        what,
                        safe_tail: 0,
                    })
                }
            }
            inode.log.on_tier = Some(crate::log::TierLog {
                tier,
                block,
                offset,
                blocks,
                bytes,
            });
            inodes.insert(ino, inode);
            continue;
        }
        let walked = match walk(media, ino, slot.log_head, slot.log_tail, pool.clone()) {
            Ok(w) => w,
            Err(e) => {
                problems.push(match e.damaged_next {
                    Some(at) => Problem::BadLogPointer {
                        ino,
                        word: LogWord::Next(at),
                        safe_tail: e.last_good,
                    },
                    None => Problem::BadLog {
                        ino,
                        what: format!("{} at {:#x}", e.what, e.at),
                        safe_tail: e.last_good,
                    },
                });
                walk(media, ino, slot.log_head, e.last_good, pool.clone()).unwrap_or_default()
            }
        };
        for (e, _) in &walked.entries {
            inode.apply(e);
        }
        keep_referenced_sums(&inode, &mut walked.entries.iter().map(|(e, _)| e), &sums);
        inode.log.head = if slot.log_tail == 0 { 0 } else { slot.log_head };
        inode.log.tail = slot.log_tail;
        inode.log.entries = walked.entries.len() as u64;
        inode.log.pages = walked.pages;
        inodes.insert(ino, inode);
    }
    progress(n, n);

    // Tree walk from the root.
    let mut reached: HashMap<Ino, u32> = HashMap::new();
    let mut parent_of: HashMap<Ino, Ino> = HashMap::new();
    match inodes.get(&ROOT_INO) {
        Some(r) if r.kind == FileType::Directory => {
            let mut queue = VecDeque::from([ROOT_INO]);
            parent_of.insert(ROOT_INO, ROOT_INO);
            while let Some(d) = queue.pop_front() {
                let names: Vec<(Vec<u8>, Ino, u8)> = inodes[&d]
                    .dir
                    .as_ref()
                    .map(|x| x.iter().map(|(_, n, i, t)| (n.to_vec(), i, t)).collect())
                    .unwrap_or_default();
                for (name, child, dt) in names {
                    let ok = inodes
                        .get(&child)
                        .map(|c| c.kind.dt() == dt)
                        .unwrap_or(false);
                    if !ok || child == ROOT_INO {
                        problems.push(Problem::DanglingEntry {
                            dir: d,
                            name: String::from_utf8_lossy(&name).into_owned(),
                            target: child,
                        });
                        continue;
                    }
                    *reached.entry(child).or_default() += 1;
                    if dt == libc::DT_DIR {
                        if parent_of.contains_key(&child) {
                            problems.push(Problem::DirectoryLinkedTwice { ino: child });
                            continue;
                        }
                        parent_of.insert(child, d);
                        queue.push_back(child);
                    }
                }
            }
        }
        _ => problems.push(Problem::BadRoot),
    }
    let orphans: Vec<Ino> = {
        let mut v: Vec<Ino> = inodes
            .keys()
            .copied()
            .filter(|&i| i != ROOT_INO && !reached.contains_key(&i))
            .collect();
        v.sort_unstable();
        v
    };
    let replayed = Replayed {
        logs: inodes.len() as u64,
        entries: inodes.values().map(|i| i.log.entries).sum(),
    };
    let orphan_bytes = if keep_orphans {
        orphans
            .iter()
            .filter_map(|o| inodes.get(o))
            .map(|i| i.extents.mapped_blocks() * BLOCK_SIZE)
            .sum()
    } else {
        orphans
            .iter()
            .filter_map(|o| inodes.remove(o))
            .map(|i| i.extents.mapped_blocks() * BLOCK_SIZE)
            .sum()
    };
    for (ino, inode) in inodes.iter_mut() {
        if let Some(d) = inode.dir.as_mut() {
            d.parent = parent_of.get(ino).copied().unwrap_or(ROOT_INO);
        }
    }
    // Link counts.
    let mut keys: Vec<Ino> = inodes.keys().copied().collect();
    keys.sort_unstable();
    for ino in &keys {
        let inode = &inodes[ino];
        let counted = match &inode.dir {
            Some(d) => 2 + d.subdirs,
            None => reached.get(ino).copied().unwrap_or(0),
        };
        if inode.attr.nlink != counted {
            problems.push(Problem::LinkCount {
                ino: *ino,
                stored: inode.attr.nlink,
                counted,
            });
        }
    }
    // Block ownership. Every run in use, with what holds it; a data block
    // may be mapped by several extents (clones, `shared.rs`), nothing else
    // may overlap.
    use crate::shared::{Found, Holder};
    let mut used: Vec<Found> = Vec::new();
    // The inode table's map and group blocks are pool blocks of no inode
    // (owner 0).
    for &b in sb.inode_map_blocks.iter().chain(&inode_groups) {
        used.push((PhysBlock(b), 1, 0, Holder::Exclusive));
    }
    let mut log_pages: Vec<(crate::log_space::LogPage, Ino)> = Vec::new();
    let mut block_used: std::collections::BTreeMap<TierId, Vec<Found>> = Default::default();
    // Blobs that may share a block, by block: (offset, length, inode).
    let mut packed_blobs: PackedBlobs = Default::default();
    for ino in &keys {
        let inode = &inodes[ino];
        for p in &inode.log.pages {
            if p.size >= BLOCK_SIZE {
                used.push((PhysBlock(p.off / BLOCK_SIZE), 1, *ino, Holder::Exclusive));
            }
            log_pages.push((*p, *ino));
        }
        if let Some(t) = inode.log.on_tier {
            // Checked against the tier's size when it was read.
            block_used.entry(t.tier).or_default().push((
                t.block,
                t.blocks,
                *ino,
                crate::shared::log_holder(&t),
            ));
            if t.shares_its_block() {
                packed_blobs
                    .entry((t.tier, t.block))
                    .or_default()
                    .push((t.offset, t.bytes, *ino));
            }
        }
        // Primary blocks and clean copies alike are owned.
        let runs = inode.extents.iter().flat_map(|(fb, ext)| {
            crate::shared::held_runs(&ext)
                .map(move |(tier, block, blocks, holder)| (fb, tier, block, blocks, holder))
        });
        for (fb, tier, block, blocks, holder) in runs {
            if !tier.is_pm() {
                let rec = sb
                    .tiers
                    .iter()
                    .find(|t| t.id == tier.get() && t.kind != terrace_format::TierKind::Pm);
                match rec {
                    Some(r) if fits_within(block, blocks, PhysBlock(r.size / BLOCK_SIZE)) => {
                        block_used
                            .entry(tier)
                            .or_default()
                            .push((block, blocks, *ino, holder))
                    }
                    Some(_) => problems.push(Problem::BlockOwnership {
                        ino: *ino,
                        what: format!("file block {fb} maps beyond the end of tier {tier}"),
                    }),
                    None => problems.push(Problem::BlockOwnership {
                        ino: *ino,
                        what: format!(
                            "file block {fb} maps to tier {tier}, which the pool does not have"
                        ),
                    }),
                }
                continue;
            }
            if block < PhysBlock(sb.pool_start)
                || !fits_within(
                    block,
                    blocks,
                    PhysBlock(sb.pool_start.saturating_add(sb.pool_blocks)),
                )
            {
                problems.push(Problem::BlockOwnership {
                    ino: *ino,
                    what: format!("file block {fb} maps to block {block} outside the pool"),
                });
                continue;
            }
            used.push((block, blocks, *ino, holder));
        }
    }
    // Blobs packed into one block must not overlap inside it.
    for ((tier, block), mut blobs) in packed_blobs {
        blobs.sort_unstable();
        for w in blobs.windows(2) {
            let ((off, len, first), (next, _, second)) = (w[0], w[1]);
            if off + len > next {
                problems.push(Problem::BlockOwnership {
                    ino: second,
                    what: format!(
                        "its log blob at byte {next} of block {block} of tier {tier} overlaps the log blob of inode {first}"
                    ),
                });
            }
        }
    }
    let mut shared = std::collections::BTreeMap::new();
    let mut packed_logs = std::collections::BTreeMap::new();
    let mut block_used_runs = std::collections::BTreeMap::new();
    for (tier, found) in block_used {
        let r = crate::shared::resolve(found);
        for c in &r.conflicts {
            problems.push(Problem::BlockOwnership {
                ino: c.second,
                what: format!(
                    "block {} of tier {tier} is also owned by inode {}",
                    c.block, c.first
                ),
            });
        }
        if !r.refs.is_empty() {
            shared.insert(tier, r.refs);
        }
        if !r.log_refs.is_empty() {
            packed_logs.insert(tier, r.log_refs);
        }
        block_used_runs.insert(tier, r.used);
    }
    // Small log pages: no two may overlap; each slab block is owned once
    // (whole-block pages are in `used` already).
    let mut ownership_ok = true;
    log_pages.sort_unstable();
    let log_space = match crate::log_space::LogSpace::from_pages(log_pages.iter().map(|x| x.0)) {
        Ok((space, blocks)) => {
            for b in blocks {
                let i = log_pages.partition_point(|(p, _)| p.off < b * BLOCK_SIZE);
                let owner = log_pages.get(i).map_or(0, |x| x.1);
                used.push((PhysBlock(b), 1, owner, Holder::Exclusive));
            }
            Some(space)
        }
        Err(e) => {
            ownership_ok = false;
            let owner = log_pages
                .iter()
                .find(|(p, _)| *p == e.page)
                .map_or(0, |x| x.1);
            problems.push(Problem::BlockOwnership {
                ino: owner,
                what: format!(
                    "log page {:#x} overlaps another inode's log page",
                    e.page.off
                ),
            });
            None
        }
    };
    let pm = crate::shared::resolve(used);
    for c in &pm.conflicts {
        ownership_ok = false;
        problems.push(Problem::BlockOwnership {
            ino: c.second,
            what: format!("block {} is also owned by inode {}", c.block, c.first),
        });
    }
    if !pm.refs.is_empty() {
        shared.insert(TierId::PM, pm.refs);
    }
    let alloc = if ownership_ok && log_space.is_some() {
        let shards = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .max(2);
        PageAllocator::from_used(PhysBlock(sb.pool_start), sb.pool_blocks, shards, pm.used).ok()
    } else {
        None
    };
    Scan {
        inode_map: terrace_format::InodeMap::new(sb.inode_count, inode_groups),
        sb,
        inodes,
        problems,
        orphans,
        orphan_bytes,
        replayed,
        rolled_back: 0,
        alloc,
        log_space: log_space.unwrap_or_default(),
        block_used: block_used_runs,
        sums,
        shared,
        packed_logs,
    }
}

/// Log blobs that may share a block, by tier and block: (offset, length,
/// inode) of each.
type PackedBlobs = std::collections::BTreeMap<(TierId, PhysBlock), Vec<(u64, u64, Ino)>>;
