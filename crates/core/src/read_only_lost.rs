//! Files no directory names any more, on a read-only mount of a damaged
//! pool: their only name was in a lost log entry, or in a directory whose
//! slot was left out. `fsck --repair` keeps them in `/lost+found` as
//! `#INO`; a read-only mount, which writes nothing, shows them there in
//! memory only, so that a copy made of the pool before any repair (`cp -a`,
//! `tar`) takes them too. Before 2026-12-07 they were invisible to it, and
//! such a copy ended with exit 0 without them.
//!
//! Invariants: nothing is written to any medium; the directory made when
//! the pool has no `/lost+found` takes an inode number that is free in the
//! table and that no directory entry names (a name leading nowhere keeps
//! leading nowhere); only what repair would adopt is shown (link count
//! above 0, not named by another lost directory — which brings it along).

use crate::inode::Inode;
use crate::recovery::{scan_keeping_orphans, OpenError, Scan, TierDevices};
use crate::types::Ino;
use std::collections::HashSet;
use terrace_format::{InodeSlot, INODE_USED, ROOT_INO};
use terrace_media::PmMedia;

/// Name of the directory lost files are shown (and kept) in.
pub(crate) const LOST_FOUND: &[u8] = b"lost+found";

/// The orphans of `sc` (a scan that kept them) worth keeping, with their
/// directory entry types: link count above 0, and not named by another
/// orphan directory (adopting that one brings them along).
pub(crate) fn orphans_to_adopt(sc: &Scan) -> Vec<(Ino, u8)> {
    let orphans: HashSet<Ino> = sc.orphans.iter().copied().collect();
    let named: HashSet<Ino> = sc
        .orphans
        .iter()
        .filter_map(|o| sc.inodes.get(o)?.dir.as_ref())
        .flat_map(|d| d.iter().map(|(_, _, child, _)| child))
        .filter(|c| orphans.contains(c))
        .collect();
    let mut adopt: Vec<(Ino, u8)> = sc
        .orphans
        .iter()
        .filter(|o| !named.contains(o))
        .filter_map(|o| sc.inodes.get(o).map(|i| (*o, i)))
        .filter(|(_, i)| i.attr.nlink > 0)
        .map(|(o, i)| (o, i.kind.dt()))
        .collect();
    adopt.sort_unstable();
    adopt
}

/// Adds to `sc` (the scan a read-only mount serves) the files only a lost
/// name led to, under `/lost+found/#INO`; returns how many names it made.
/// A scan that keeps orphans is made only when `sc` found some.
pub(crate) fn show_lost_files(
    media: &dyn PmMedia,
    devices: &TierDevices,
    sc: &mut Scan,
) -> Result<usize, OpenError> {
    if sc.orphans.is_empty() {
        return Ok(0);
    }
    let mut kept = scan_keeping_orphans(media, devices, &mut |_, _| {})?;
    let adopt = orphans_to_adopt(&kept);
    if adopt.is_empty() {
        return Ok(0);
    }
    for o in &kept.orphans {
        if let Some(i) = kept.inodes.remove(o) {
            sc.inodes.insert(*o, i);
        }
    }
    let Some(lf) = lost_found(sc) else {
        return Ok(0);
    };
    let mut subdirs = 0;
    let dir = sc
        .inodes
        .get_mut(&lf)
        .and_then(|i| i.dir.as_mut())
        .expect("lost+found is a directory");
    for &(ino, dt) in &adopt {
        let name = format!("#{ino}").into_bytes();
        if dir.get(&name).is_none() {
            dir.insert(name, ino, dt);
            subdirs += u32::from(dt == libc::DT_DIR);
        }
    }
    if let Some(i) = sc.inodes.get_mut(&lf) {
        i.attr.nlink += subdirs;
    }
    Ok(adopt.len())
}

/// The inode of `/lost+found`: the pool's own when the root names a
/// directory so, else one made in memory (mode 0700, root's).
fn lost_found(sc: &mut Scan) -> Option<Ino> {
    let root = sc.inodes.get(&ROOT_INO)?;
    if let Some((ino, _)) = root.dir.as_ref()?.get(LOST_FOUND) {
        return sc
            .inodes
            .get(&ino)
            .and_then(|i| i.dir.as_ref())
            .map(|_| ino);
    }
    let named: HashSet<Ino> = sc
        .inodes
        .values()
        .filter_map(|i| i.dir.as_ref())
        .flat_map(|d| d.iter().map(|(_, _, child, _)| child))
        .collect();
    let ino = (2..sc.inode_map.total())
        .find(|i| !sc.inodes.contains_key(i) && !named.contains(i) && !sc.orphans.contains(i))?;
    let slot = InodeSlot {
        state: INODE_USED,
        mode: libc::S_IFDIR | 0o700,
        btime_ns: root.btime,
        parent_hint: ROOT_INO,
        ..InodeSlot::default()
    };
    let made = Inode::from_slot(ino, &slot)?;
    sc.inodes.insert(ino, made);
    let root = sc.inodes.get_mut(&ROOT_INO)?;
    root.dir
        .as_mut()?
        .insert(LOST_FOUND.to_vec(), ino, libc::DT_DIR);
    root.attr.nlink += 1;
    Some(ino)
}
