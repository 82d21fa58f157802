//! The DRAM inode table: locking one inode ([`Fs::lock`]) or a set of them
//! ([`Fs::lock_set`]), and taking and returning slot numbers.
//!
//! # Locking
//! Each inode has its own mutex. An operation on several inodes locks them in
//! ascending inode-number order ([`Fs::lock_set`]), after a first unlocked
//! lookup pass, and re-validates what it looked up once it holds the locks.
//! Renames also hold `rename_lock`, so directory parents (the only thing a
//! loop check reads) change one rename at a time. The order of every lock in
//! the core is written once, in docs/design.md section 4a.

use crate::fs::Fs;
use crate::inode::Inode;
use crate::lock_order::MutexGuard;
use crate::types::{errno, FsResult, Ino};
use std::sync::atomic::Ordering;
use terrace_format::{
    BLOCK_SIZE, INODES_PER_BLOCK, INODE_GROWTH_VERSION, INODE_MAP_ENTRIES, MAX_INODE_GROUPS,
};

/// Fewest groups (of 32 slots, one PM block each) the inode table grows by
/// at once: 4,096 slots, 512 KiB of PM.
const GROW_MIN_GROUPS: u64 = 128;
/// Most groups the inode table grows by at once: 262,144 slots, 32 MiB.
const GROW_MAX_GROUPS: u64 = 8192;

/// How long an inode allocation waits for deleted inodes the kernel still
/// references before it fails with ENOSPC (see [`Fs::alloc_slot`]).
const ZOMBIE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// A locked inode slot of the DRAM table.
pub type Slot<'a> = MutexGuard<'a, Option<Box<Inode>>>;

impl Fs {
    /// Locks one inode; ENOENT when the slot holds no live inode.
    #[track_caller]
    pub(crate) fn lock(&self, ino: Ino) -> FsResult<Slot<'_>> {
        let slot = self
            .table
            .get(ino)
            .ok_or_else(|| errno(libc::ENOENT))?
            .lock();
        match slot.as_ref() {
            Some(i) if !i.zombie || i.open_count > 0 || i.lookups > 0 => Ok(slot),
            _ => Err(errno(libc::ENOENT)),
        }
    }

    /// Locks several inodes in ascending order (duplicates ignored).
    #[track_caller]
    pub(crate) fn lock_set(&self, inos: &[Ino]) -> FsResult<Locked<'_>> {
        let mut v: Vec<Ino> = inos.to_vec();
        v.sort_unstable();
        v.dedup();
        let mut guards = Vec::with_capacity(v.len());
        for ino in v {
            guards.push((ino, self.lock(ino)?));
        }
        Ok(Locked { guards })
    }

    /// Puts a new inode into its free slot `ino` (taken with
    /// [`Fs::alloc_slot`]), under its parent's inode lock whatever the two
    /// numbers: the one exception to ascending inode order (design.md §4a).
    /// It cannot deadlock: until this store the slot is empty, and whoever
    /// locks an empty slot (`Fs::lock`, the table scans) finds nothing and
    /// lets go without waiting for any other lock.
    pub(crate) fn install_inode(&self, ino: Ino, inode: Inode) {
        let mut slot = self.table.slot(ino).lock_unchecked();
        debug_assert!(slot.is_none(), "inode {ino} installed into a used slot");
        *slot = Some(Box::new(inode));
    }

    /// Takes a free inode slot number. When none is free, the table grows
    /// into PM's page pool ([`Fs::grow_inode_table`]); when it cannot grow
    /// but deleted inodes still wait for the kernel to drop its references
    /// (its `forget` comes asynchronously, possibly on another FUSE thread
    /// after the application already saw the unlink finish), waits up to
    /// [`ZOMBIE_WAIT`] for one of them before failing with ENOSPC.
    pub(crate) fn alloc_slot(&self) -> FsResult<Ino> {
        let deadline = std::time::Instant::now() + ZOMBIE_WAIT;
        loop {
            if let Some(ino) = self.free_slots.lock().pop() {
                return Ok(ino);
            }
            if self.grow_inode_table() {
                continue;
            }
            if std::time::Instant::now() >= deadline || !self.has_zombies() {
                // A zombie freed since the look above left its number here
                // before it stopped counting.
                return self
                    .free_slots
                    .lock()
                    .pop()
                    .ok_or_else(|| errno(libc::ENOSPC));
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Most groups the inode table may grow by: `inode_max_percent` of PM's
    /// page pool (a quarter by default, as XFS's `imaxpct`), within what the
    /// format names.
    pub(crate) fn max_inode_groups(&self) -> u64 {
        let percent = u64::from(self.settings.read().inode_max_percent);
        (self.alloc.total() * percent / 100).min(MAX_INODE_GROUPS)
    }

    /// Slots the inode table may still grow by ([`Fs::max_inode_groups`]),
    /// which `statfs` counts as free inodes: a bound like XFS's, which
    /// growing or writing data does not move (creates still fail with
    /// ENOSPC when PM has no block for a new group).
    pub(crate) fn inode_growth_room(&self) -> u64 {
        self.max_inode_groups().saturating_sub(self.table.groups()) * INODES_PER_BLOCK
    }

    /// Grows the inode table when its slots ran out (design.md §3.7): by a
    /// quarter of the table (at least [`GROW_MIN_GROUPS`], at most
    /// [`GROW_MAX_GROUPS`] groups of 32 slots, all groups together within
    /// [`Fs::max_inode_groups`]), one PM page-pool block a
    /// group, taken down to a quarter of PM's metadata reserve (without a
    /// slot no create succeeds, whatever the reserve keeps for logs) and
    /// never from the room dirty cached pages were promised.
    ///
    /// Order: a new inode map block, when the last one is full, is zeroed,
    /// persisted and committed by a superblock write naming it; the group
    /// blocks are zeroed and persisted; then each group's 8-byte entry in
    /// its map block is stored and persisted — the group's commit point.
    /// Only then are its slots published and free. A crash leaves every
    /// group whose entry was persisted (all slots free), and the other
    /// blocks unowned, free at the next mount. True when slots were added
    /// (or another creator added some meanwhile).
    pub(crate) fn grow_inode_table(&self) -> bool {
        let _room = self.room_lock.lock();
        if !self.free_slots.lock().is_empty() {
            return true;
        }
        let have = self.table.groups();
        if have >= self.max_inode_groups()
            && self.inode_cap_noticed_at.swap(have, Ordering::Relaxed) != have
        {
            let percent = self.settings.read().inode_max_percent;
            self.notice(format!(
                "inode table full: {} slots, its growth at the cap of inode_max_percent={percent} \
                 (% of PM's page pool); creates fail with ENOSPC while the pool may still \
                 have room (`df -i`); raise it with `terrace set MOUNTPOINT inode_max_percent N` \
                 (up to 90)",
                self.table.len() - 1
            ));
        }
        let want = (self.table.len() as u64 / 4)
            .div_ceil(INODES_PER_BLOCK)
            .clamp(GROW_MIN_GROUPS, GROW_MAX_GROUPS)
            .min(self.max_inode_groups().saturating_sub(have));
        let mut room = self
            .pm_free_unpromised()
            .saturating_sub(self.pm_removal_reserve_blocks());
        if !self.tiers.is_empty() {
            // Not the blocks dirty cached pages were promised (as any
            // metadata, `check_metadata_room`).
            let (free, dirty) = self.metadata_room_and_dirty_blocks();
            room = room.min(free.saturating_sub(dirty));
        }
        // Entries left in the map blocks the superblock names now.
        let maps = self.sb.lock().inode_map_blocks.clone();
        let mapped = maps.len() as u64 * INODE_MAP_ENTRIES - have;
        let new_maps = want.saturating_sub(mapped).div_ceil(INODE_MAP_ENTRIES);
        let groups = want.min(room.saturating_sub(new_maps));
        if groups == 0 {
            return false;
        }
        let new_maps = groups.saturating_sub(mapped).div_ceil(INODE_MAP_ENTRIES);
        let Some(runs) = self.alloc.alloc(groups + new_maps) else {
            return false;
        };
        let mut blocks: Vec<u64> = runs
            .iter()
            .flat_map(|&(s, n)| s.get()..s.get() + n)
            .collect();
        let group_blocks = blocks.split_off(new_maps as usize);
        let zero = [0u8; BLOCK_SIZE as usize];
        for &b in blocks.iter().chain(&group_blocks) {
            self.media.write(b * BLOCK_SIZE, &zero);
            self.media.flush(b * BLOCK_SIZE, BLOCK_SIZE);
        }
        self.media.fence();
        if !blocks.is_empty() {
            // Commits the new (empty) map blocks.
            let mut sb = self.sb.lock();
            let mut next = sb.clone();
            next.inode_map_blocks.extend(&blocks);
            next.version = next.version.max(INODE_GROWTH_VERSION);
            next.generation += 1;
            crate::mkfs::write_superblock(&*self.media, &next);
            *sb = next;
        }
        let maps: Vec<u64> = maps.into_iter().chain(blocks).collect();
        for (k, &b) in group_blocks.iter().enumerate() {
            let g = have + k as u64;
            let entry =
                maps[(g / INODE_MAP_ENTRIES) as usize] * BLOCK_SIZE + (g % INODE_MAP_ENTRIES) * 8;
            // Persisted one by one: no entry is durable before the one
            // ahead of it (recovery reads up to the first 0).
            self.media.store_u64(entry, b);
            self.media.persist(entry, 8);
        }
        let first = self.table.len() as Ino;
        self.table.add_groups(&group_blocks);
        let last = self.table.len() as Ino;
        self.free_slots.lock().extend((first..last).rev());
        self.notice(format!(
            "inode table grew by {} slots ({} KiB of PM) to {}",
            last - first,
            (group_blocks.len() as u64 + new_maps) * BLOCK_SIZE / 1024,
            last - 1
        ));
        true
    }

    /// Marks deleted inode `i`, whose space is released, as a zombie: its
    /// DRAM slot waits for the kernel's FORGET (`Fs::forget`). The one place
    /// the mark is set, so that [`Fs::zombies`] counts every marked inode.
    pub(crate) fn make_zombie(&self, i: &mut Inode) {
        i.zombie = true;
        self.zombies.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether some deleted inode still waits for its last kernel reference
    /// (`Fs::zombies`; a look at each slot's lock missed the one a FORGET
    /// held while freeing it, and a create then failed with ENOSPC).
    fn has_zombies(&self) -> bool {
        self.zombies.load(Ordering::SeqCst) > 0
    }

    /// Returns a slot number to the free list (the DRAM slot must be empty).
    pub(crate) fn release_slot(&self, ino: Ino) {
        self.free_slots.lock().push(ino);
    }
}

/// Several locked inodes.
pub(crate) struct Locked<'a> {
    guards: Vec<(Ino, Slot<'a>)>,
}

impl Locked<'_> {
    /// The locked inode `ino` (must be in the set).
    pub(crate) fn get(&mut self, ino: Ino) -> &mut Inode {
        let g = self
            .guards
            .iter_mut()
            .find(|(i, _)| *i == ino)
            .expect("inode locked");
        g.1.as_mut().expect("live inode")
    }

    /// The DRAM slot of `ino` (to drop a freed inode).
    pub(crate) fn slot(&mut self, ino: Ino) -> &mut Option<Box<Inode>> {
        let g = self
            .guards
            .iter_mut()
            .find(|(i, _)| *i == ino)
            .expect("inode locked");
        &mut g.1
    }
}
