//! Transactions: an operation builds log entries per inode ([`TxBuilder`]),
//! then [`Fs::commit`] stages them beyond each tail, publishes all new tails
//! (and any slot-state words) at once — the commit point — and finally
//! applies the same entries to the DRAM inodes, so DRAM always equals a
//! replay of the committed logs. A log migrated to a block tier is recalled
//! to PM in the same commit ([`stage_recall`]); a log grown mostly dead is
//! compacted after a commit ([`Fs::maybe_compact`]).

use crate::extent_map::Released;
use crate::fs::Fs;
use crate::inode::Inode;
use crate::space::LogUse;
use crate::table::Locked;
use crate::types::{FsResult, Ino};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use terrace_format::{
    inode_offset, Entry, INODE_OFF_LOG_HEAD, INODE_OFF_LOG_TAIL, INODE_OFF_STATE,
};
use terrace_media::PmMedia;

impl Fs {
    /// Stages `entries` for a commit to `inode` and returns them with the
    /// slot words whose publication commits them. A log on PM gets them
    /// beyond its tail (the tail word; the head word too when the log was
    /// empty and `journal_head` is set). A log on a block tier is *recalled*
    /// in the same commit: a fresh PM chain holds the inode's whole state
    /// (the entries compaction writes) followed by `entries`, and the words
    /// publish its head, its tail and the slot state "log on PM" together
    /// (design.md §5d, log migration). The blob is freed after the commit.
    pub(crate) fn stage_commit(
        &self,
        inode: &Inode,
        entries: &[Entry],
        use_: LogUse,
        journal_head: bool,
    ) -> FsResult<StagedCommit> {
        let base = self.table.pm_offset(inode.ino);
        let room = self.log_room(use_);
        // Data on block tiers commits with its checksums (sums.rs).
        let sums = self.sums_entries_for(entries);
        let with_sums;
        let entries = if sums.is_empty() {
            entries
        } else {
            with_sums = [entries, &sums[..]].concat();
            &with_sums[..]
        };
        if let Some(t) = inode.log.on_tier {
            let (st, words) = stage_recall(
                &*self.media,
                &room,
                inode,
                base,
                entries,
                &self.sums_tables(),
            )?;
            return Ok(StagedCommit {
                st,
                words,
                recalled: Some(t),
            });
        }
        let st = inode
            .log
            .stage(&*self.media, &room, inode.ino, base, entries)?;
        let mut words = Vec::with_capacity(2);
        if inode.log.head == 0 && journal_head {
            // The head was stored ahead; journal it too so a rollback is exact.
            words.push((
                base + INODE_OFF_LOG_HEAD,
                terrace_format::encode_page_pointer(inode.log.head_after(&st)),
            ));
        }
        words.push((
            base + INODE_OFF_LOG_TAIL,
            terrace_format::encode_tail(st.new_tail),
        ));
        Ok(StagedCommit {
            st,
            words,
            recalled: None,
        })
    }

    /// Applies a committed [`StagedCommit`] to the inode's DRAM log; returns
    /// the blob a recall released (to free with the other released runs).
    fn apply_staged(inode: &mut Inode, sc: StagedCommit) -> Option<Released> {
        if sc.recalled.is_some() {
            // The recalled state holds the DRAM attributes, lazy atime too.
            inode.log = crate::log::Log::default();
            inode.lazy_atime = false;
        }
        inode.log.apply(sc.st);
        sc.recalled.map(|t| (t.tier, t.block, t.blocks))
    }

    /// Brings a log that migration moved to a block tier back to PM (one
    /// commit with no new entry); nothing when the log is on PM.
    pub(crate) fn recall_log(&self, inode: &mut Inode, background: bool) -> FsResult<()> {
        if inode.log.on_tier.is_none() {
            return Ok(());
        }
        self.commit_one_in(inode, Vec::new(), background)
    }

    /// Commits entries to several logs atomically, plus extra `(address, value)`
    /// words, then applies the entries to DRAM. The inodes must be locked in `l`.
    pub(crate) fn commit(
        &self,
        l: &mut Locked<'_>,
        parts: Vec<(Ino, Vec<Entry>)>,
        extra: Vec<(u64, u64)>,
    ) -> FsResult<()> {
        self.commit_for(l, parts, extra, LogUse::Foreground)
    }

    /// [`Fs::commit`] of an operation that removes a name (unlink, rmdir):
    /// it may take all of PM's removal reserve (`space.rs` rule 4).
    pub(crate) fn commit_removal(
        &self,
        l: &mut Locked<'_>,
        parts: Vec<(Ino, Vec<Entry>)>,
        extra: Vec<(u64, u64)>,
    ) -> FsResult<()> {
        self.commit_for(l, parts, extra, LogUse::Name)
    }

    fn commit_for(
        &self,
        l: &mut Locked<'_>,
        parts: Vec<(Ino, Vec<Entry>)>,
        extra: Vec<(u64, u64)>,
        use_: LogUse,
    ) -> FsResult<()> {
        let mut staged: Vec<StagedCommit> = Vec::with_capacity(parts.len());
        let journal_head = parts.len() + extra.len() > 1;
        for (ino, entries) in &parts {
            let inode = l.get(*ino);
            match self.stage_commit(inode, entries, use_, journal_head) {
                Ok(s) => staged.push(s),
                Err(e) => {
                    for s in staged {
                        self.log_space.free_all(&self.alloc, s.st.new_pages);
                    }
                    return Err(e);
                }
            }
        }
        let mut words: Vec<(u64, u64)> = staged.iter().flat_map(|s| s.words.clone()).collect();
        words.extend(extra);
        self.journal.commit(&*self.media, &words);
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        if words.len() > 1 {
            self.counters
                .journaled_commits
                .fetch_add(1, Ordering::Relaxed);
        }
        let mut released = Vec::new();
        for ((ino, entries), s) in parts.into_iter().zip(staged) {
            let inode = l.get(ino);
            let split = inode.extents.pm_clean_dirty();
            released.extend(Fs::apply_staged(inode, s));
            for e in &entries {
                released.extend(inode.apply(e));
            }
            self.note_pm_split_change(split, inode.extents.pm_clean_dirty());
            self.relist(inode);
        }
        self.free_runs(released);
        Ok(())
    }

    /// Commits entries to one locked inode's log.
    pub(crate) fn commit_one(&self, inode: &mut Inode, entries: Vec<Entry>) -> FsResult<()> {
        self.commit_one_in(inode, entries, false)
    }

    /// [`Fs::commit_one`] of an operation that removes (removexattr, a
    /// shrinking truncate, a hole punch): it may take the first half of
    /// PM's removal reserve (`space.rs` rule 4).
    pub(crate) fn commit_one_removal(
        &self,
        inode: &mut Inode,
        entries: Vec<Entry>,
    ) -> FsResult<()> {
        self.commit_one_for(inode, entries, LogUse::Removal)
    }

    /// Commits entries to one locked inode's log; `background` commits
    /// (write-back of cached data, migration) may take the PM blocks promised
    /// to write-back (`space.rs`), foreground ones may not.
    pub(crate) fn commit_one_in(
        &self,
        inode: &mut Inode,
        entries: Vec<Entry>,
        background: bool,
    ) -> FsResult<()> {
        self.commit_one_for(inode, entries, LogUse::of(background))
    }

    fn commit_one_for(&self, inode: &mut Inode, entries: Vec<Entry>, use_: LogUse) -> FsResult<()> {
        let released = self.commit_one_keeping(inode, entries, use_)?;
        self.free_runs(released);
        Ok(())
    }

    /// [`Fs::commit_one_for`] that frees none of the data blocks the
    /// entries unmap: it returns them, and the caller owns them from then
    /// on (a write into preallocated blocks rewrites them in place,
    /// `ops_prealloc_write.rs`). A recalled log's old blob is freed.
    pub(crate) fn commit_one_keeping(
        &self,
        inode: &mut Inode,
        entries: Vec<Entry>,
        use_: LogUse,
    ) -> FsResult<Vec<Released>> {
        let sc = self.stage_commit(inode, &entries, use_, false)?;
        // Commit point of every single-inode operation: the log tail store
        // (with a recall, the journal slot that publishes head, tail and state).
        self.journal.commit(&*self.media, &sc.words);
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        let split = inode.extents.pm_clean_dirty();
        let blob: Vec<Released> = Fs::apply_staged(inode, sc).into_iter().collect();
        let mut released = Vec::new();
        for e in &entries {
            released.extend(inode.apply(e));
        }
        self.note_pm_split_change(split, inode.extents.pm_clean_dirty());
        self.relist(inode);
        self.free_runs(blob);
        self.maybe_compact(inode, use_.compaction());
        Ok(released)
    }

    /// Compacts a log whose dead entries outnumber the live ones by far: writes a
    /// fresh chain with the inode's current state and swaps head and tail through
    /// the journal. Failure (no space) leaves the old log in place.
    ///
    /// "By far": the log takes at least three times the bytes its live
    /// entries need (counted at 64 bytes each) and more than one smallest
    /// page, so a small file's log that a few attribute changes and a move
    /// grew to 768 bytes goes back to one 256-byte page (a tar extract's
    /// files: 447 bytes of log per file on average without this, 2026-11-24),
    /// and a log is rewritten only after its dead part has grown well past
    /// its live part since the last time.
    ///
    /// `use_` is the room the fresh chain may take ([`LogUse::compaction`]
    /// of the operation whose commit set it off): a compaction frees more
    /// log bytes than it takes, but not always more blocks — a small log's
    /// pages share slab blocks with other logs, and the fresh chain may
    /// need a new one — so one that a create or an access-time update set
    /// off leaves PM's removal reserve alone, as that operation does.
    pub(crate) fn maybe_compact(&self, inode: &mut Inode, use_: LogUse) {
        // Checksums of block-tier data are live too. This runs after every
        // commit, so nothing here walks the file's extents or, while the log
        // cannot be due, its pages: a walk over the extents made each 4 KiB
        // write into a file of 262,144 extents cost 8 ms (2026-11-29).
        let need = inode.live_entries() * 64
            + inode.xattr_value_bytes()
            + inode.sums_log_bytes()
            + terrace_format::LOG_PAGE_HEADER;
        if (inode.log.pages.len() as u64) * terrace_format::LOG_PAGE_MAX < 3 * need {
            return;
        }
        let bytes: u64 = inode.log.pages.iter().map(|p| p.size).sum();
        if bytes <= terrace_format::LOG_PAGE_MIN || bytes < 3 * need {
            return;
        }
        let entries = crate::sums::with_sums(inode.snapshot_entries(), &self.sums_tables());
        let fresh = crate::log::Log::default();
        // Stage into a new chain without touching the slot's head word.
        let st = match fresh.stage(
            &*self.media,
            &self.log_room(use_),
            inode.ino,
            scratch_slot(),
            &entries,
        ) {
            Ok(s) => s,
            Err(_) => return,
        };
        let head = st.new_pages[0].off;
        let base = self.table.pm_offset(inode.ino);
        self.journal.commit(
            &*self.media,
            &[
                (
                    base + INODE_OFF_LOG_HEAD,
                    terrace_format::encode_page_pointer(head),
                ),
                (
                    base + INODE_OFF_LOG_TAIL,
                    terrace_format::encode_tail(st.new_tail),
                ),
            ],
        );
        let old = std::mem::take(&mut inode.log.pages);
        self.log_space.free_all(&self.alloc, old);
        inode.log = crate::log::Log {
            on_tier: None,
            head,
            tail: st.new_tail,
            pages: st.new_pages,
            entries: st.added,
        };
        self.counters.compactions.fetch_add(1, Ordering::Relaxed);
    }
}

/// Stages, for an inode whose log is on a block tier, a fresh PM chain with
/// the inode's whole state (the entries compaction writes) followed by
/// `entries`, and returns it with the slot words that publish it — head,
/// tail and state 1 — to be stored in one journal transaction (log recall,
/// design.md §5g). The slot's head word names the blob until then, so the
/// chain is staged without storing a head there.
pub(crate) fn stage_recall(
    media: &dyn PmMedia,
    room: &crate::log_space::LogRoom<'_>,
    inode: &Inode,
    slot: u64,
    entries: &[Entry],
    sums: &crate::sums::SumsTables<'_>,
) -> FsResult<(crate::log::Staged, Vec<(u64, u64)>)> {
    let mut all = crate::sums::with_sums(inode.snapshot_entries(), sums);
    all.extend_from_slice(entries);
    let st = crate::log::Log::default().stage(media, room, inode.ino, scratch_slot(), &all)?;
    let base = slot;
    let words = vec![
        (
            base + INODE_OFF_LOG_HEAD,
            terrace_format::encode_page_pointer(st.new_pages[0].off),
        ),
        (
            base + INODE_OFF_LOG_TAIL,
            terrace_format::encode_tail(st.new_tail),
        ),
        (base + INODE_OFF_STATE, terrace_format::INODE_USED),
    ];
    Ok((st, words))
}

/// A scratch address for staging a chain whose head must not be stored in a slot:
/// slot 0 is never used, so its head word may be scribbled on.
pub(crate) fn scratch_slot() -> u64 {
    inode_offset(0)
}

/// Entries staged for one inode's commit (see [`Fs::stage_commit`]).
pub(crate) struct StagedCommit {
    /// The staged entries and pages.
    pub(crate) st: crate::log::Staged,
    /// Slot words to publish, `(address, value)`.
    pub(crate) words: Vec<(u64, u64)>,
    /// The log was on a block tier: this blob is freed after the commit.
    pub(crate) recalled: Option<crate::log::TierLog>,
}

/// Log entries per inode, in the order the inodes were first named.
pub(crate) type Parts = Vec<(Ino, Vec<Entry>)>;

/// Map of inode → entries, in insertion order (helper for building transactions).
#[derive(Default)]
pub(crate) struct TxBuilder {
    order: Vec<Ino>,
    map: HashMap<Ino, Vec<Entry>>,
    /// Extra words to publish with the tails.
    pub extra: Vec<(u64, u64)>,
}

impl TxBuilder {
    /// Appends an entry to `ino`'s part.
    pub fn push(&mut self, ino: Ino, e: Entry) {
        if !self.map.contains_key(&ino) {
            self.order.push(ino);
        }
        self.map.entry(ino).or_default().push(e);
    }
    /// The parts in order.
    pub fn parts(mut self) -> (Parts, Vec<(u64, u64)>) {
        let parts = self
            .order
            .iter()
            .map(|i| (*i, self.map.remove(i).unwrap_or_default()))
            .collect();
        (parts, self.extra)
    }
}
