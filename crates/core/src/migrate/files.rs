//! `terrace migrate`: moving whole files on request.

use super::*;

/// Rounds of [`Fs::migrate_files`] at most (see there).
const MIGRATE_ROUNDS: usize = 4;

impl Fs {
    /// Moves all of a file's data that is not on tier `to` there (`terrace
    /// migrate`), in groups of `group_migration_bytes`. Returns bytes moved.
    /// (`to` is a tier id as the command line gives it.)
    pub fn migrate_file(&self, ino: Ino, to: u8) -> FsResult<u64> {
        self.move_file(ino, to, Fit::Whole)
    }

    /// Moves what fits of `ino`'s data to tier `to` (rule enforcement: a
    /// pin is followed as far as the target's room allows, and retried).
    pub(crate) fn move_file_as_room_allows(&self, ino: Ino, to: TierId) -> FsResult<u64> {
        self.move_file(ino, to.get(), Fit::AsRoomAllows)
    }

    fn move_file(&self, ino: Ino, to: u8, fit: Fit) -> FsResult<u64> {
        let (moved, mut errors) = self.move_files(&[ino], to, fit)?;
        match errors.pop() {
            Some((_, e)) => Err(e),
            None => Ok(moved),
        }
    }

    /// [`Fs::migrate_file`] for several files at once: their groups share
    /// sync windows ([`MoveBatch`]), so many small files cost one device sync
    /// per window rather than one each, and `migration_threads` workers move
    /// files in parallel (each file by one worker), so the target device has
    /// more than one request in flight. Returns the bytes moved and the files
    /// that failed (a file that fails does not stop the others); `Err` only
    /// for a bad target tier (`to` is a tier id as the command line gives it).
    /// A file a rule pins to another tier is not moved: it is among the
    /// failed ones with a [`PinnedElsewhere`](crate::rules::PinnedElsewhere)
    /// error.
    ///
    /// A file whose data does not fit in the room `to` has for it is not
    /// moved at all: it fails with a [`NoRoomOnTier`] error.
    pub fn migrate_files(
        &self,
        inos: &[Ino],
        to: u8,
    ) -> FsResult<(u64, Vec<(Ino, std::io::Error)>)> {
        self.move_files(inos, to, Fit::Whole)
    }

    fn move_files(
        &self,
        inos: &[Ino],
        to: u8,
        fit: Fit,
    ) -> FsResult<(u64, Vec<(Ino, std::io::Error)>)> {
        let to = TierId(to);
        if !to.is_pm() && !self.tiers.iter().any(|t| t.id == to) {
            return Err(errno(libc::EINVAL));
        }
        if self.read_only || self.is_frozen() {
            return Err(errno(libc::EROFS));
        }
        // A file a rule pins to another tier stays where the rule keeps it:
        // the rule's enforcement would bring its data back within a pass or
        // two, after the command had said it moved (`rules.rs`).
        let mut errors: Vec<(Ino, std::io::Error)> = Vec::new();
        let inos: Vec<Ino> = inos
            .iter()
            .copied()
            .filter(|&ino| match self.pinned_elsewhere(ino, to) {
                Some(e) => {
                    errors.push((ino, e));
                    false
                }
                None => true,
            })
            .collect();
        let inos = &inos[..];
        // A move whose pieces changed between their copy and its commit (a
        // write, a write-back, a clean copy made by the migration thread)
        // drops them rather than commit stale data: move what is left again,
        // a bounded number of times (a file written all along keeps some).
        // The migration thread leaves these files alone while the command
        // moves them: a drain copying one of them to another tier meanwhile
        // changed its pieces, so the command's commit dropped them and its
        // next round moved them again — into an object tier as extra,
        // smaller parts (design §5n).
        let _claim = Commanded::claim(self, inos);
        let mut moved = 0;
        let mut todo: Vec<Ino> = inos.to_vec();
        for _ in 0..MIGRATE_ROUNDS {
            let (m, e) = self.migrate_files_once(&todo, to, fit);
            moved += m;
            todo.retain(|ino| !e.iter().any(|(i, _)| i == ino) && self.has_data_off(*ino, to));
            errors.extend(e);
            if todo.is_empty() || self.migrator.worker.stopping() {
                break;
            }
        }
        Ok((moved, errors))
    }

    /// True when some of `ino`'s data (clean copies aside) is not on `to`.
    fn has_data_off(&self, ino: Ino, to: TierId) -> bool {
        self.lock(ino)
            .ok()
            .and_then(|g| {
                g.as_ref()
                    .map(|i| snapshot_entries(i).iter().any(|e| e.tier != to))
            })
            .unwrap_or(false)
    }

    /// The error for a move of `bytes` into tier `to` that cannot fit
    /// (`None` when it can, or `to` is an object tier: its room is the
    /// store's). The room of PM is what data may take there: below the
    /// forced mark and beyond the metadata reserve (as for data pinned to
    /// PM, `rules.rs`); a block tier's is its capacity less its valid data
    /// (dead blocks are recycled for room).
    fn no_room_for(&self, to: TierId, bytes: u64) -> Option<std::io::Error> {
        if bytes == 0 || (!to.is_pm() && self.is_object_tier(to)) {
            return None;
        }
        let forced = self.settings.read().migration_params().forced_percent;
        let (room, name, mark) = if to.is_pm() {
            let room = self
                .room_below(TierId::PM, forced)
                .min(self.pm_data_free_bytes());
            (room, "pm", Some(forced))
        } else {
            let tier = self.tiers.iter().find(|t| t.id == to);
            let name = tier.map_or("?", |t| t.kind.name());
            // The extents held back for recycling take no moved data
            // (`ExtentSpace::alloc`): counted as room, a move that passed
            // this check stopped partway with a bare ENOSPC (found in
            // review, 2026-12-07).
            let reserve = tier.map_or(0, |t| {
                t.space.recycling_reserve_extents() * t.space.extent_blocks() * BLOCK_SIZE
            });
            (self.room_below(to, 100).saturating_sub(reserve), name, None)
        };
        (bytes > room).then(|| {
            std::io::Error::other(NoRoomOnTier {
                tier: name,
                needed: bytes,
                room,
                forced_percent: mark,
            })
        })
    }

    /// One round of [`Fs::migrate_files`] over `inos`.
    fn migrate_files_once(
        &self,
        inos: &[Ino],
        to: TierId,
        fit: Fit,
    ) -> (u64, Vec<(Ino, std::io::Error)>) {
        let params = self.settings.read().migration_params();
        let gb = params.group_blocks();
        let window = MOVE_SYNC_WINDOW_BYTES.max(gb * BS);
        let tiers: Vec<TierId> = std::iter::once(TierId::PM)
            .chain(self.tiers.iter().map(|t| t.id))
            .filter(|&t| t != to)
            .collect();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Into an object tier one worker, as for a drain (`pass.rs`): its
        // windows upload in the background and end on segment ends, which
        // two workers' interleaved allocations would break.
        let workers = if !to.is_pm() && self.is_object_tier(to) {
            1
        } else {
            params.threads_for(cpus).clamp(1, inos.len().max(1))
        };
        let next = std::sync::atomic::AtomicUsize::new(0);
        let work = || -> (u64, Vec<(Ino, std::io::Error)>) {
            let mut batch = MoveBatch::new(self, window);
            let mut errors = Vec::new();
            let mut last = None;
            while !self.migrator.worker.stopping() {
                let Some(&ino) = inos.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    break;
                };
                last = Some(ino);
                if let Err(e) = self.add_file_to_batch(&mut batch, ino, to, &tiers, gb, fit) {
                    errors.push((ino, e));
                }
            }
            let (moved, r) = batch.finish();
            if let (Err(e), Some(ino)) = (r, last) {
                // The last window's sync failed: none of it committed.
                errors.push((ino, e));
            }
            (moved, errors)
        };
        if workers == 1 {
            return work();
        }
        let results: Vec<(u64, Vec<(Ino, std::io::Error)>)> = std::thread::scope(|sc| {
            let handles: Vec<_> = (0..workers).map(|_| sc.spawn(work)).collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a migration worker panicked"))
                .collect()
        });
        let mut moved = 0;
        let mut errors = Vec::new();
        for (m, e) in results {
            moved += m;
            errors.extend(e);
        }
        (moved, errors)
    }

    /// Adds every group of file `ino` that is not on tier `to` (from each of
    /// `tiers`) to `batch`, after writing back its cached writes so that what
    /// moves is the file's current data.
    fn add_file_to_batch(
        &self,
        batch: &mut MoveBatch<'_>,
        ino: Ino,
        to: TierId,
        tiers: &[TierId],
        gb: u64,
        fit: Fit,
    ) -> FsResult<()> {
        // This thread's uncommitted moves may hold the room the write-back
        // needs: commit them before waiting for room.
        if let Err(e) = self.write_back_part(ino, u64::MAX) {
            if e.raw_os_error() != Some(libc::ENOSPC) {
                return Err(e);
            }
            batch.commit_all()?;
            self.flush_inode(ino)?;
        }
        let (entries, to_copy) = {
            let g = self.lock(ino)?;
            let i = g.as_ref().expect("live");
            if i.kind != FileType::Regular {
                return Ok(());
            }
            (snapshot_entries(i), bytes_to_copy(i, to))
        };
        // A file that cannot fit is left whole where it is: moved in part,
        // it came back down at once (PM past its threshold) and the command
        // had copied for nothing.
        if fit == Fit::Whole {
            if let Some(e) = self.no_room_for(to, to_copy) {
                return Err(e);
            }
        }
        for &from in tiers {
            let mine: Vec<EntrySnapshot> =
                entries.iter().filter(|e| e.tier == from).copied().collect();
            for group in mig::batch_groups(&mig::group_entries(&mine, gb), gb) {
                let ranges: Vec<(FileBlock, u64)> = group
                    .iter()
                    .map(|g| (FileBlock(g.file_block), g.blocks))
                    .collect();
                batch.add(ino, from, to, &ranges, Mode::Move)?;
            }
        }
        Ok(())
    }
}

/// How much of a file a move may leave behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    /// All of it moves or none (`terrace migrate`).
    Whole,
    /// What fits moves (rule enforcement; the rest on a later pass).
    AsRoomAllows,
}

/// Bytes of `i`'s data that a move to `to` copies: what is neither there
/// nor has a clean copy there (a clean copy is promoted without a copy).
fn bytes_to_copy(i: &Inode, to: TierId) -> u64 {
    i.extents
        .iter()
        .filter(|(_, e)| e.tier != to && e.copy.map_or(true, |(t, _)| t != to))
        .map(|(_, e)| e.blocks)
        .sum::<u64>()
        * BS
}

/// Why `terrace migrate` left a file where it was: its data does not fit
/// in the room `tier` has for it ([`Fs::migrate_files`] reports it among
/// the failed files; nothing of the file moved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoRoomOnTier {
    /// The tier's kind name (`pm`, `ssd`, `hdd`).
    pub tier: &'static str,
    /// Bytes the move would copy there.
    pub needed: u64,
    /// Bytes of room the tier has for them.
    pub room: u64,
    /// PM's forced mark (percent), which data may not pass.
    pub forced_percent: Option<u8>,
}

impl std::fmt::Display for NoRoomOnTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no room on {}: {} to move, room for {}",
            self.tier,
            size_text(self.needed),
            size_text(self.room)
        )?;
        if let Some(p) = self.forced_percent {
            write!(f, " (data may fill PM up to {p} %)")?;
        }
        write!(f, "; left where it was")
    }
}

impl std::error::Error for NoRoomOnTier {}

/// `1.50 GiB`, `230.0 MiB`, `12 KiB`: sizes in the messages above.
fn size_text(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    let b = bytes as f64;
    if b >= 1024.0 * MIB {
        format!("{:.2} GiB", b / (1024.0 * MIB))
    } else if b >= MIB {
        format!("{:.1} MiB", b / MIB)
    } else {
        format!("{} KiB", bytes.div_ceil(1024))
    }
}

/// Files claimed by a `migrate` command until dropped (see
/// `Migrator::commanded`).
pub(super) struct Commanded<'a> {
    fs: &'a Fs,
    inos: Vec<Ino>,
}

impl<'a> Commanded<'a> {
    pub(super) fn claim(fs: &'a Fs, inos: &[Ino]) -> Commanded<'a> {
        let mut g = fs.migrator.commanded.lock();
        for &ino in inos {
            *g.entry(ino).or_default() += 1;
        }
        Commanded {
            fs,
            inos: inos.to_vec(),
        }
    }
}

impl Drop for Commanded<'_> {
    fn drop(&mut self) {
        let mut g = self.fs.migrator.commanded.lock();
        for ino in &self.inos {
            if let Some(n) = g.get_mut(ino) {
                *n -= 1;
                if *n == 0 {
                    g.remove(ino);
                }
            }
        }
    }
}

impl Fs {
    /// Whether a `migrate` command is moving `ino` now.
    pub(crate) fn is_commanded(&self, ino: Ino) -> bool {
        self.migrator.commanded.lock().contains_key(&ino)
    }
}
