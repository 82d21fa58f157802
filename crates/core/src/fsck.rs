//! Offline consistency check and repair (`terrace fsck`).
//!
//! The check runs the same scan as mount, which reads through a read-only view
//! with open journal transactions rolled back, so it never writes to the pool. It verifies the superblock, every inode slot checksum, every
//! log entry checksum and chain, reachability from the root, link counts, and
//! that no block is owned twice. Free space is derived from what is reachable, so
//! unreachable space cannot leak; unreachable inodes (orphans) are reported.
//!
//! Repair fixes what it can without guessing. It first rolls back open
//! journal transactions and clears unreadable journal slots, so that every
//! later step works on the words the scans saw. Then it corrects a log's link word
//! one or two bits off (`pointer_repair.rs`), truncates an unreadable log to
//! its last good entry, frees broken slots, keeps the inodes only those named
//! in `/lost+found`, removes directory entries that point nowhere, corrects
//! link counts and frees the other orphans. A block owned twice, a directory
//! with two parents and a missing root are reported, not repaired.

use crate::alloc::PageAllocator;
use crate::recovery::{scan, LogWord, OpenError, Problem, Scan, TierDevices};
use crate::types::Ino;
use std::sync::Arc;
use terrace_format::{
    Entry, InodeSlot, INODE_FREE, INODE_OFF_GENERATION, INODE_OFF_LOG_HEAD, INODE_OFF_LOG_TAIL,
    INODE_OFF_STATE, INODE_SIZE, INODE_USED, ROOT_INO,
};
use terrace_media::PmMedia;

/// What fsck found (and, with repair, did).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FsckReport {
    /// Problems found (after repair: those that remain).
    pub problems: Vec<String>,
    /// Orphan inodes (freed by the next mount or by repair).
    pub orphans: Vec<Ino>,
    /// Live inodes.
    pub inodes: usize,
    /// Log pages of live inodes.
    pub log_pages: u64,
    /// Data blocks on the PM tier.
    pub data_blocks: u64,
    /// Free blocks of the PM page pool.
    pub free_blocks: u64,
    /// Open journal transactions found (rolled back by mount or repair).
    pub open_transactions: usize,
    /// The pool was cleanly unmounted.
    pub clean_unmount: bool,
    /// Repairs done.
    pub repaired: Vec<String>,
    /// Block-tier data blocks read and found to match their checksum
    /// ([`check_data`] only).
    pub checked_blocks: u64,
    /// Block-tier data blocks with no checksum (written before format 5).
    pub unverified_blocks: u64,
    /// Block-tier data blocks whose checksum did not match, or that could
    /// not be read.
    pub bad_blocks: u64,
    /// Parts of object tiers that hold no block the pool references (left
    /// by a crash between an upload and its commit; the next mount deletes
    /// them, and so does repair). Not a problem: only space.
    pub object_orphans: u64,
    /// Their bytes.
    pub object_orphan_bytes: u64,
    /// Orphan parts deleted by repair.
    pub object_orphans_deleted: u64,
    /// A problem found blocks a mount: the orphans are then kept, neither
    /// freed by repair nor by the next mount (what is damaged or missing
    /// may name them).
    pub mount_blocked: bool,
    /// A log is on a block tier whose device was not given: repair cannot
    /// fix that, only the device put back can.
    pub tier_missing: bool,
    /// Of `problems`, those that are damaged or unreadable block-tier data
    /// ([`check_data`]): repair does not touch data; a scrub of the mounted
    /// pool repairs such blocks from a good copy where one exists.
    pub data_problems: usize,
}

impl FsckReport {
    /// True when nothing needs attention (orphans and open transactions after a
    /// crash are expected and handled by mount, so they do not count).
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

fn summarize(sc: &Scan, report: &mut FsckReport) {
    // With the path each concerns (the names mapped only when needed).
    report.problems = if sc.problems.is_empty() {
        Vec::new()
    } else {
        let names = sc.names();
        sc.problems.iter().map(|p| sc.describe(p, &names)).collect()
    };
    report.orphans = sc.orphans.clone();
    report.inodes = sc.inodes.len();
    report.log_pages = sc.inodes.values().map(|i| i.log.pages.len() as u64).sum();
    report.data_blocks = sc
        .inodes
        .values()
        .flat_map(|i| i.extents.iter())
        .filter(|(_, e)| e.tier.is_pm())
        .map(|(_, e)| e.blocks)
        .sum();
    report.free_blocks = sc.alloc.as_ref().map(|a| a.free()).unwrap_or(0);
    report.clean_unmount = sc.sb.clean;
    report.mount_blocked = sc.problems.iter().any(Problem::blocks_mount);
    report.tier_missing = sc
        .problems
        .iter()
        .any(|p| matches!(p, Problem::LogOnMissingTier { .. }));
}

/// Counts the orphan parts of object tiers (see
/// [`FsckReport::object_orphans`]); with `delete` (repair) deletes them —
/// only when the scan found no problem, since a log it could not read may
/// reference more than it saw.
fn sweep_objects(sc: &Scan, tiers: &TierDevices, delete: bool, report: &mut FsckReport) {
    for (id, dev) in tiers {
        let held = crate::tier::held_runs(
            sc.block_used
                .get(&terrace_format::TierId(*id))
                .map_or(&[], |r| &r[..]),
        );
        if delete && sc.problems.is_empty() {
            match dev.retain_only(&held) {
                Ok(Some(r)) if r.parts > 0 => {
                    report.object_orphans_deleted += r.parts;
                    report.repaired.push(format!(
                        "deleted {} orphan parts ({} bytes) of object tier {id}",
                        r.parts, r.bytes
                    ));
                }
                Ok(_) => {}
                Err(e) => report
                    .problems
                    .push(format!("tier {id}: cannot delete orphan parts: {e}")),
            }
        } else if let Some(r) = dev.unreferenced(&held) {
            report.object_orphans += r.parts;
            report.object_orphan_bytes += r.bytes;
        }
    }
}

/// Checks a pool without writing to it (open journal transactions are applied
/// to a read-only overlay, not to the pool).
pub fn check(
    media: &dyn PmMedia,
    tiers: &TierDevices,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<FsckReport, OpenError> {
    let sc = scan(media, tiers, false, progress)?;
    let mut report = FsckReport {
        open_transactions: sc.rolled_back,
        ..Default::default()
    };
    summarize(&sc, &mut report);
    sweep_objects(&sc, tiers, false, &mut report);
    Ok(report)
}

/// [`check`], then reads every block of file data on the block tiers (primary
/// locations and clean copies) and verifies it against its checksum; each
/// mismatch or read error is a problem naming the file and the place.
pub fn check_data(
    media: &dyn PmMedia,
    tiers: &TierDevices,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<FsckReport, OpenError> {
    let sc = scan(media, tiers, false, &mut |_, _| {})?;
    let mut report = FsckReport {
        open_transactions: sc.rolled_back,
        ..Default::default()
    };
    summarize(&sc, &mut report);
    sweep_objects(&sc, tiers, false, &mut report);
    verify_data(&sc, tiers, &mut report, progress);
    Ok(report)
}

/// Reads every referenced block-tier block of `sc` and checks its checksum.
/// Each problem names the file by inode and path ("inode 43 (/dir/big):
/// ..."): the paths are mapped once ([`Scan::names`]), after the reads and
/// only when there is a problem to name (a clean pool costs no map, a
/// badly damaged one a single map, never a search per problem).
fn verify_data(
    sc: &Scan,
    tiers: &TierDevices,
    report: &mut FsckReport,
    progress: &mut dyn FnMut(u64, u64),
) {
    const BS: u64 = terrace_format::BLOCK_SIZE;
    // (inode, file block, tier, first block, blocks)
    use terrace_format::{FileBlock, PhysBlock, TierId};
    let mut runs: Vec<(Ino, FileBlock, TierId, PhysBlock, u64)> = Vec::new();
    let mut inos: Vec<&Ino> = sc.inodes.keys().collect();
    inos.sort_unstable();
    for ino in inos {
        for (fb, e) in sc.inodes[ino].extents.iter() {
            runs.extend(e.block_tier_runs().map(|(t, b, n, _)| (*ino, fb, t, b, n)));
        }
    }
    let total: u64 = runs.iter().map(|r| r.4).sum();
    let mut done = 0u64;
    let mut buf = vec![0u8; (256 * BS) as usize];
    // (inode, what is wrong): named with the inode's path once all are found.
    let mut damaged: Vec<(Ino, String)> = Vec::new();
    for (ino, fb, tier, block, blocks) in runs {
        let Some((_, dev)) = tiers.iter().find(|(id, _)| *id == tier.get()) else {
            continue; // a missing tier is reported by the scan
        };
        let sums = sc.sums.get(&tier);
        let mut off = 0u64;
        while off < blocks {
            let n = (blocks - off).min(256);
            let chunk = &mut buf[..(n * BS) as usize];
            if let Err(e) = dev.read_blocks((block + off).get(), chunk) {
                report.bad_blocks += n;
                report.data_problems += 1;
                damaged.push((
                    ino,
                    format!(
                        "file blocks {}..{} on tier {tier} (blocks {}..{}) cannot be read: {e}",
                        fb + off,
                        fb + off + n,
                        block + off,
                        block + off + n
                    ),
                ));
                off += n;
                continue;
            }
            for (i, data) in chunk.chunks(BS as usize).enumerate() {
                let b = block + off + i as u64;
                match sums.and_then(|s| s.check(b, data)) {
                    None => report.unverified_blocks += 1,
                    Some(true) => report.checked_blocks += 1,
                    Some(false) => {
                        report.bad_blocks += 1;
                        report.data_problems += 1;
                        damaged.push((
                            ino,
                            format!(
                                "file block {} on tier {tier} block {b}: checksum mismatch (the data is damaged; reads of it fail with EIO)",
                                fb + off + i as u64
                            ),
                        ));
                    }
                }
            }
            off += n;
            done += n;
            progress(done, total);
        }
    }
    if damaged.is_empty() {
        return;
    }
    let names = sc.names();
    for (ino, what) in damaged {
        let path = crate::problem_paths::path_note_of(ino, &names);
        report.problems.push(format!("inode {ino}{path}: {what}"));
    }
}

/// Repairs a pool in place, then checks it again. Repairs nothing, and
/// only checks, while a block tier of the pool is not among `tiers`: the
/// logs and data there are unknown, so what the namespace seems to lack
/// (names, link counts, slots) may be there, and a fix made without them
/// would destroy it once the tier is back (found in review, 2026-12-07).
pub fn repair(
    media: Arc<dyn PmMedia>,
    tiers: &TierDevices,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<FsckReport, OpenError> {
    let sb = crate::recovery::read_superblock(&*media)?;
    let absent: Vec<u8> = sb
        .tiers
        .iter()
        .map(|t| t.id)
        .filter(|&id| id != 0 && !tiers.iter().any(|(given, _)| *given == id))
        .collect();
    if !absent.is_empty() {
        let mut report = check(&*media, tiers, progress)?;
        report.tier_missing = true;
        report.problems.push(format!(
            "nothing was repaired: tier{} {} of the pool {} not given (repair waits for every tier)",
            if absent.len() == 1 { "" } else { "s" },
            absent.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", "),
            if absent.len() == 1 { "was" } else { "were" }
        ));
        return Ok(report);
    }
    let mut report = FsckReport::default();
    // Open transactions first, as a mount would. The scans below see the
    // pool with them rolled back (in DRAM); doing it on media now makes
    // every fix below apply to the words they saw, and no later rollback
    // can undo an entry that repair appends.
    let (rolled_back, cleared) = crate::journal::roll_back_or_clear(&*media);
    report.open_transactions = rolled_back;
    for (slot, what) in cleared {
        report
            .repaired
            .push(format!("cleared unreadable journal slot {slot} ({what})"));
    }
    // Pass 1: problems below the log level (slots, logs).
    let sc = repair_scan(&*media, tiers, progress, &mut report)?;
    let mut rescan = false;
    // Inodes whose damaged log blobs still read in part: kept after pass 1.
    let mut salvaged: Vec<Ino> = Vec::new();
    // Where each inode is named, for the report: mapped once, if needed.
    let mut names = None;
    for p in &sc.problems {
        match p {
            Problem::BadSlot { ino, .. } => {
                free_slot(&*media, sc.slot_offset(*ino));
                report
                    .repaired
                    .push(format!("freed broken inode slot {ino}"));
                rescan = true;
            }
            Problem::BadLogPointer {
                ino,
                word,
                safe_tail,
            } => {
                let slot = sc.slot_offset(*ino);
                let pages = sc.sb.page_pool_bytes();
                match crate::pointer_repair::corrected_word(
                    &*media, tiers, *ino, slot, *word, pages,
                ) {
                    Some((at, fixed)) => {
                        store_word(&*media, at, fixed);
                        report
                            .repaired
                            .push(format!("corrected the damaged log {word} of inode {ino}"));
                    }
                    None if !matches!(word, LogWord::Next(_)) => {
                        free_slot(&*media, slot);
                        report.repaired.push(format!(
                            "freed inode slot {ino} (its log {word} is damaged beyond correction)"
                        ));
                    }
                    None => {
                        truncate_log(&*media, slot, *safe_tail);
                        report.repaired.push(format!(
                            "truncated the log of inode {ino} to its last good entry (its {word} is damaged beyond correction)"
                        ));
                    }
                }
                rescan = true;
            }
            Problem::BadLog { ino, .. }
                if media.load_u64(sc.slot_offset(*ino) + INODE_OFF_STATE)
                    == terrace_format::INODE_USED_TIER_LOG =>
            {
                // An unreadable log blob on a block tier: the inode keeps
                // what its slot says (an empty log on PM). State, head and
                // tail in one journal transaction: stored one by one, a
                // crash between them left a state-1 slot whose head still
                // named the blob, and the next repair freed the inode
                // (found in review, 2026-12-07).
                if sc.inodes.get(ino).is_some_and(|i| i.log.entries > 0) {
                    // What still reads of it is kept once the rest of
                    // this pass is done (below).
                    salvaged.push(*ino);
                } else {
                    empty_blob_log(&*media, &sc, *ino);
                    report.repaired.push(format!(
                        "emptied the log of inode {ino}{} (its log on a block tier is unreadable)",
                        crate::problem_paths::path_note_of(
                            *ino,
                            names.get_or_insert_with(|| sc.names())
                        )
                    ));
                }
                rescan = true;
            }
            Problem::SlotBitFlip { ino, byte } => {
                // The corrected slot differs from the stored one in this
                // byte alone: one store, which a crash cannot tear.
                let slot = sc.slot_offset(*ino);
                let mut raw = [0u8; INODE_SIZE];
                media.read(slot, &mut raw);
                let corrected = terrace_format::correct_one_flipped_bit(&raw);
                if let Some((fixed, _)) = corrected.filter(|&(_, at)| at == *byte) {
                    media.write(slot + *byte as u64, &fixed[*byte..*byte + 1]);
                    media.persist(slot + *byte as u64, 1);
                    report.repaired.push(format!(
                        "corrected one flipped bit (byte {byte}) of the slot of inode {ino}{}",
                        crate::problem_paths::path_note_of(
                            *ino,
                            names.get_or_insert_with(|| sc.names())
                        )
                    ));
                }
            }
            Problem::BadLog { ino, safe_tail, .. } => {
                truncate_log(&*media, sc.slot_offset(*ino), *safe_tail);
                report.repaired.push(format!(
                    "truncated the log of inode {ino} to its last good entry"
                ));
                rescan = true;
            }
            _ => {}
        }
    }
    // What pass 1 freed or cut may have been the only way to inodes that
    // are fine; so may a slot whose state word alone was damaged (free, its
    // name now dangling), or a rename a cleared journal slot undid: keep
    // them in /lost+found rather than let the next scan that writes free
    // them (found in review, 2026-12-07).
    if rescan || sc.problems.iter().any(Problem::blocks_mount) {
        adopt_orphans(&*media, tiers, progress, &mut report)?;
        // Pass 2 appends to logs adoption may have grown: from a new scan.
        rescan = true;
    }
    let mut sc = if rescan {
        repair_scan(&*media, tiers, progress, &mut report)?
    } else {
        sc
    };
    if !salvaged.is_empty() {
        keep_salvaged_blobs(&*media, &sc, &salvaged, &mut report);
        sc = repair_scan(&*media, tiers, progress, &mut report)?;
    }
    // Pass 2: namespace problems, fixed by appending entries to logs. A fix
    // may show the next one: removing a dangling entry of a directory lowers
    // its parent's count of subdirectories, so its link count is wrong in
    // the scan after. A few rounds settle every such chain.
    for _ in 0..PASS_2_ROUNDS {
        let Some(alloc) = sc.alloc.as_ref() else {
            break;
        };
        let mut fixes: Vec<(Ino, Entry, String)> = Vec::new();
        for p in &sc.problems {
            match p {
                Problem::DanglingEntry { dir, name, target } => fixes.push((
                    *dir,
                    Entry::DentryDel { name: name.as_bytes().to_vec() },
                    format!("removed entry {name:?} of directory {dir} (pointed to missing inode {target})"),
                )),
                Problem::LinkCount { ino, counted, stored } => {
                    let mut a = sc.inodes[ino].attr;
                    a.nlink = *counted;
                    fixes.push((*ino, Entry::Attr(a), format!("set link count of inode {ino} from {stored} to {counted}")));
                }
                _ => {}
            }
        }
        if fixes.is_empty() {
            break;
        }
        append_fixes(&*media, &sc.log_space, alloc, &sc, fixes, &mut report);
        sc = repair_scan(&*media, tiers, progress, &mut report)?;
    }
    summarize(&sc, &mut report);
    sweep_objects(&sc, tiers, true, &mut report);
    Ok(report)
}

/// Empties the log of inode `ino`, whose log blob is unreadable: the
/// inode keeps what its slot says (an empty log on PM). State, head and
/// tail in one journal transaction: stored one by one, a crash between
/// them left a state-1 slot whose head still named the blob, and the next
/// repair freed the inode (found in review, 2026-12-07).
fn empty_blob_log(media: &dyn PmMedia, sc: &Scan, ino: Ino) {
    let slot = sc.slot_offset(ino);
    crate::journal::Journal::default().commit(
        media,
        &[
            (slot + INODE_OFF_STATE, terrace_format::INODE_USED),
            (slot + INODE_OFF_LOG_HEAD, 0),
            (slot + INODE_OFF_LOG_TAIL, 0),
        ],
    );
}

/// Keeps what still reads of the damaged log blobs of `inos`
/// ([`keep_salvaged_blob`]), by a scan made after the rest of the first
/// pass: that pass may correct the words of logs the scan before it could
/// not walk, and an allocator that did not count their pages would give
/// them to the rewritten logs. Where the scan still leaves inodes or blocks
/// uncounted (a slot or log word it could not correct, a block owned
/// twice), what was read is not kept and the log is emptied as before.
fn keep_salvaged_blobs(media: &dyn PmMedia, sc: &Scan, inos: &[Ino], report: &mut FsckReport) {
    let uncounted = sc.alloc.is_none()
        || sc.problems.iter().any(|p| {
            matches!(
                p,
                Problem::BadSlot { .. }
                    | Problem::BadLogPointer { .. }
                    | Problem::BlockOwnership { .. }
                    | Problem::BadJournal { .. }
            )
        });
    let names = sc.names();
    for &ino in inos {
        let still_a_blob = sc.inodes.contains_key(&ino)
            && media.load_u64(sc.slot_offset(ino) + INODE_OFF_STATE)
                == terrace_format::INODE_USED_TIER_LOG;
        if !still_a_blob {
            continue; // freed, or recalled by a fix of this repair
        }
        let path = crate::problem_paths::path_note_of(ino, &names);
        let kept = if uncounted {
            None
        } else {
            keep_salvaged_blob(media, sc, ino)
        };
        match kept {
            Some(kept) => report.repaired.push(format!(
                "rewrote the log of inode {ino}{path} on PM from the {kept} entries of its damaged log blob that still read (the others are lost)"
            )),
            None => {
                empty_blob_log(media, sc, ino);
                report.repaired.push(format!(
                    "emptied the log of inode {ino}{path} (its log on a block tier is damaged{})",
                    if uncounted {
                        "; what still read of it was not kept while other damage leaves blocks uncounted"
                    } else {
                        ""
                    }
                ));
            }
        }
    }
}

/// Writes the state the scan salvaged from inode `ino`'s damaged log blob
/// (`LogBlob::salvage`: every entry whose own checksum holds) to a fresh
/// PM log and publishes it with the slot's state in one journal
/// transaction, as a log recall does. Returns the number of entries kept,
/// or `None` when nothing was salvaged or it could not be written (the
/// caller then empties the log).
fn keep_salvaged_blob(media: &dyn PmMedia, sc: &Scan, ino: Ino) -> Option<u64> {
    let inode = sc.inodes.get(&ino)?;
    let alloc = sc.alloc.as_ref()?;
    if inode.log.entries == 0 {
        return None;
    }
    let room = crate::log_space::LogRoom {
        space: &sc.log_space,
        alloc,
        keep_free: 0,
    };
    let tables = sc.sums_tables();
    let (_, words) =
        crate::commit::stage_recall(media, &room, inode, sc.slot_offset(ino), &[], &tables).ok()?;
    crate::journal::Journal::default().commit(media, &words);
    Some(inode.log.entries)
}

/// Stores one 8-byte word of a slot and makes it durable before the next
/// store (each repair store is a commit of its own).
fn store_word(media: &dyn PmMedia, at: u64, value: u64) {
    media.store_u64(at, value);
    media.persist(at, 8);
}

/// Frees the inode slot at `slot` (its state word).
fn free_slot(media: &dyn PmMedia, slot: u64) {
    store_word(media, slot + INODE_OFF_STATE, INODE_FREE);
}

/// Cuts the log of the inode slot at `slot` back to `safe_tail`, the end of
/// its last good entry.
fn truncate_log(media: &dyn PmMedia, slot: u64, safe_tail: u64) {
    store_word(
        media,
        slot + INODE_OFF_LOG_TAIL,
        terrace_format::encode_tail(safe_tail),
    );
}

/// A scan of `repair`: it writes what recovery writes — rolls back open
/// transactions and frees orphans — but only when nothing it found blocks a
/// mount, so the orphans are reported freed only then (the children of a
/// directory whose log word is damaged are orphans until it is corrected).
fn repair_scan(
    media: &dyn PmMedia,
    tiers: &TierDevices,
    progress: &mut dyn FnMut(u64, u64),
    report: &mut FsckReport,
) -> Result<Scan, OpenError> {
    let sc = scan(media, tiers, true, progress)?;
    if !sc.orphans.is_empty() && !sc.problems.iter().any(|p| p.blocks_mount()) {
        report
            .repaired
            .push(format!("freed {} orphan inodes", sc.orphans.len()));
    }
    Ok(sc)
}

/// The directory under the root where repair puts the orphans it keeps.
pub const LOST_FOUND: &[u8] = b"lost+found";

/// Names in `/lost+found` the orphans that a repair of damage left and that
/// are worth keeping (e2fsck's way): every orphan with names before (link
/// count above 0: not a file unlinked while open) that no other orphan
/// directory names, as `#INO`. Makes `/lost+found` (mode 0700, owned by
/// root) when the root has no such directory. Runs only after pass 1
/// changed something (the journal is empty by then: repair rolls it back
/// first); orphans it does not adopt are freed as before. The adopted
/// inodes' link counts are set in pass 2.
fn adopt_orphans(
    media: &dyn PmMedia,
    tiers: &TierDevices,
    progress: &mut dyn FnMut(u64, u64),
    report: &mut FsckReport,
) -> Result<(), OpenError> {
    let sc = crate::recovery::scan_keeping_orphans(media, tiers, progress)?;
    let adopt = crate::read_only_lost::orphans_to_adopt(&sc);
    let Some(alloc) = sc.alloc.as_ref() else {
        return Ok(());
    };
    if adopt.is_empty() {
        return Ok(());
    }
    let Some(root) = sc.inodes.get(&ROOT_INO).and_then(|r| r.dir.as_ref()) else {
        return Ok(());
    };
    let sc = match root.get(LOST_FOUND) {
        Some((_, dt)) if dt == libc::DT_DIR => sc,
        // Something else has the name: the orphans go as before.
        Some(_) => return Ok(()),
        None => {
            let Some(ino) = new_directory_slot(media, &sc) else {
                return Ok(());
            };
            let entry = Entry::DentryAdd {
                ino,
                file_type: libc::DT_DIR,
                name: LOST_FOUND.to_vec(),
            };
            let made = format!("made /lost+found (inode {ino})");
            append_fixes(
                media,
                &sc.log_space,
                alloc,
                &sc,
                vec![(ROOT_INO, entry, made)],
                report,
            );
            crate::recovery::scan_keeping_orphans(media, tiers, progress)?
        }
    };
    let (Some(alloc), Some(root)) = (
        sc.alloc.as_ref(),
        sc.inodes.get(&ROOT_INO).and_then(|r| r.dir.as_ref()),
    ) else {
        return Ok(());
    };
    let Some((lost_found, _)) = root.get(LOST_FOUND) else {
        return Ok(());
    };
    let Some(names) = sc.inodes.get(&lost_found).and_then(|d| d.dir.as_ref()) else {
        return Ok(());
    };
    let mut fixes = Vec::new();
    for (ino, dt) in adopt {
        let mut name = format!("#{ino}");
        let mut n = 1;
        while names.get(name.as_bytes()).is_some() {
            name = format!("#{ino}.{n}");
            n += 1;
        }
        let what = format!("put orphan inode {ino} in /lost+found as {name}");
        let entry = Entry::DentryAdd {
            ino,
            file_type: dt,
            name: name.into_bytes(),
        };
        fixes.push((lost_found, entry, what));
    }
    append_fixes(media, &sc.log_space, alloc, &sc, fixes, report);
    Ok(())
}

/// Takes a free inode slot that no entry names and makes it an empty
/// directory (mode 0700, owned by root), published by a store of its state
/// word as `Fs` publishes a new inode: `/lost+found` before a root entry
/// names it (a crash in between leaves an orphan the next mount frees).
fn new_directory_slot(media: &dyn PmMedia, sc: &Scan) -> Option<Ino> {
    // Not a slot a directory entry still names: the entries of a directory
    // repair just freed are removed only in pass 2.
    let named: std::collections::HashSet<Ino> = sc
        .inodes
        .values()
        .filter_map(|i| i.dir.as_ref())
        .flat_map(|d| d.iter().map(|(_, _, child, _)| child))
        .collect();
    let (ino, off) = (2..sc.inode_map.total())
        .filter(|i| !sc.inodes.contains_key(i) && !named.contains(i))
        .filter_map(|i| Some((i, sc.inode_map.offset(i)?)))
        .find(|(_, off)| media.load_u64(off + INODE_OFF_STATE) == INODE_FREE)?;
    let mut generation = [0u8; 4];
    media.read(off + INODE_OFF_GENERATION, &mut generation);
    let slot = InodeSlot {
        log_head: 0,
        log_tail: 0,
        state: INODE_FREE,
        mode: libc::S_IFDIR | 0o700,
        uid: 0,
        gid: 0,
        generation: u32::from_le_bytes(generation).wrapping_add(1),
        rdev: 0,
        btime_ns: crate::fs::now_ns(),
        parent_hint: ROOT_INO,
    };
    media.write(off, &slot.encode());
    media.persist(off, INODE_SIZE as u64);
    media.store_u64(off + INODE_OFF_STATE, INODE_USED);
    media.persist(off + INODE_OFF_STATE, 8);
    Some(ino)
}

/// Rounds of namespace fixes `repair` makes at most (each one scans again).
const PASS_2_ROUNDS: usize = 3;

fn append_fixes(
    media: &dyn PmMedia,
    space: &crate::log_space::LogSpace,
    alloc: &PageAllocator,
    sc: &Scan,
    fixes: Vec<(Ino, Entry, String)>,
    report: &mut FsckReport,
) {
    let mut logs: std::collections::HashMap<Ino, crate::log::Log> = Default::default();
    for (ino, e, what) in fixes {
        let Some(inode) = sc.inodes.get(&ino) else {
            continue;
        };
        let log = logs.entry(ino).or_insert_with(|| inode.log.clone());
        let room = crate::log_space::LogRoom {
            space,
            alloc,
            keep_free: 0,
        };
        if log.on_tier.is_some() {
            // A log on a block tier comes back to PM with the fix: the
            // inode's state, then the fix, in a fresh chain published with
            // the slot state through the journal (as a recall does).
            let tables = sc.sums_tables();
            match crate::commit::stage_recall(
                media,
                &room,
                inode,
                sc.slot_offset(ino),
                std::slice::from_ref(&e),
                &tables,
            ) {
                Ok((st, words)) => {
                    crate::journal::Journal::default().commit(media, &words);
                    *log = crate::log::Log::default();
                    log.apply(st);
                    report.repaired.push(what);
                }
                Err(err) => report
                    .problems
                    .push(format!("could not repair inode {ino}: {err}")),
            }
            continue;
        }
        match log.stage(
            media,
            &room,
            ino,
            sc.slot_offset(ino),
            std::slice::from_ref(&e),
        ) {
            Ok(st) => {
                media.fence();
                media.store_u64(
                    sc.slot_offset(ino) + INODE_OFF_LOG_TAIL,
                    terrace_format::encode_tail(st.new_tail),
                );
                media.persist(sc.slot_offset(ino) + INODE_OFF_LOG_TAIL, 8);
                log.apply(st);
                report.repaired.push(what);
            }
            Err(err) => report
                .problems
                .push(format!("could not repair inode {ino}: {err}")),
        }
    }
}
