//! Per-inode logs on PM: appending entries and walking them back.
//!
//! A log is a chain of log pages (header: `next` page offset, owner word with
//! the page's size class). A log's first page is small (256 bytes, or what
//! its first entry needs) and each further page doubles up to 4 KiB, so a
//! file with few entries shares a pool block with others (`log_space`).
//! Committed entries are those from `head + LOG_PAGE_HEADER` up to `tail`. The
//! walk never reads past `tail`, so whatever appending does beyond it (a `next`
//! pointer to a page that is later freed, half-written entries) is invisible until
//! a commit moves the tail, and harmless when it never does.
//!
//! Appending is split in two: [`Log::stage`] writes and flushes entries beyond the
//! tail and returns the new tail without publishing it; the caller publishes it
//! (one 8-byte store, or several through the journal) — the commit point.

use crate::log_space::{LogPage, LogRoom};
use crate::types::{errno, FsResult};
use terrace_format::{
    log_page_owner_word, log_page_size, Entry, FormatError, ENTRY_HEADER, INODE_OFF_LOG_HEAD,
    LOG_PAGE_HEADER, LOG_PAGE_MAX, LOG_PAGE_MIN, LOG_PAGE_OFF_NEXT, LOG_PAGE_OFF_OWNER,
};
use terrace_media::PmMedia;

/// A log that migration moved to a block tier (a `terrace_format::LogBlob`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierLog {
    /// Tier id.
    pub tier: terrace_format::TierId,
    /// First block of the blob on the tier.
    pub block: terrace_format::PhysBlock,
    /// Bytes into `block` where the blob starts: 0, or for a blob packed
    /// with others into one block a multiple of
    /// [`terrace_format::LOG_BLOB_ALIGN`] (format version 11).
    pub offset: u64,
    /// Blocks the blob takes (1 for a packed blob, which shares it).
    pub blocks: u64,
    /// The blob's length in bytes (the slot's tail).
    pub bytes: u64,
}

impl TierLog {
    /// Whether the blob may share its block with other blobs: it fits in
    /// one block. Such a block is held by every blob in it, and freed when
    /// the last goes (`Fs::packed_logs`); a longer blob owns its blocks.
    pub fn shares_its_block(&self) -> bool {
        self.offset + self.bytes <= terrace_format::BLOCK_SIZE
    }
}

/// DRAM view of one inode's log.
///
/// Either on PM (`head`, `tail`, `pages`) or, after log migration, a blob on
/// a block tier (`on_tier`; then `head` and `tail` are 0 and `pages` empty).
/// A commit to an inode whose log is on a tier first writes the inode's
/// state back into a fresh PM log in the same commit (`Fs::stage_commit`).
#[derive(Debug, Clone, Default)]
pub struct Log {
    /// Where the log is when it is not on PM.
    pub on_tier: Option<TierLog>,
    /// PM byte offset of the first page (0 = empty log).
    pub head: u64,
    /// Committed end (0 = empty log).
    pub tail: u64,
    /// Pages in chain order.
    pub pages: Vec<LogPage>,
    /// Committed entries (PageEnd markers not counted).
    pub entries: u64,
}

/// Entries written beyond the tail, not yet committed.
#[derive(Debug, Default)]
pub struct Staged {
    /// Tail to publish.
    pub new_tail: u64,
    /// Pages the entries needed, chained after the current last page.
    pub new_pages: Vec<LogPage>,
    /// Entries written.
    pub added: u64,
}

/// Size of the page to chain after a last page of `last` bytes (`None`: a
/// first page) for an entry of `len` bytes: double the last page (256 bytes
/// for a first page), at most 4 KiB, and at least what the entry needs with
/// the header.
pub fn next_page_size(last: Option<u64>, len: u64) -> u64 {
    let grown = last.map_or(LOG_PAGE_MIN, |size| (size * 2).min(LOG_PAGE_MAX));
    grown.max((len + LOG_PAGE_HEADER).next_power_of_two())
}

/// The sizes of the pages [`Log::stage`] chains into an empty log for
/// entries of `lens` bytes, when PM has every size it asks for.
pub fn page_sizes_for(lens: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let mut sizes: Vec<u64> = Vec::new();
    let mut left = 0;
    for len in lens {
        if len > left {
            let size = next_page_size(sizes.last().copied(), len);
            sizes.push(size);
            left = size - LOG_PAGE_HEADER;
        }
        left -= len;
    }
    sizes
}

/// A page of `size` bytes for an entry of `len` bytes or, when PM has no
/// block left for it, the largest smaller page that holds the entry and fits
/// in a slab block's free units. Removals need this on a full PM: deleted
/// files free their small log pages (slab units, rarely a whole block) while
/// a large directory's log asks for 4 KiB pages, so without the fallback a
/// directory of thousands of small files could not be emptied once PM was
/// full (xfstests generic/416 under `-o writeback_cache`). A log's pages may
/// have any sizes in any order (design.md §3.5); compaction rewrites the log
/// in growing pages again.
fn take_page(room: &LogRoom<'_>, size: u64, len: u64) -> Option<LogPage> {
    let least = (len + LOG_PAGE_HEADER)
        .next_power_of_two()
        .max(LOG_PAGE_MIN);
    let mut try_size = size;
    loop {
        if let Some(page) = room.take(try_size) {
            return Some(page);
        }
        if try_size <= least {
            return None;
        }
        try_size /= 2;
    }
}

impl Log {
    /// Writes `entries` after the tail, allocating and chaining pages as needed,
    /// and flushes them (no fence: the commit fences). `slot_off` is the inode
    /// slot's PM offset; when the log was empty the new head is stored there
    /// (harmless before the commit: the head means nothing while the tail is 0).
    pub fn stage(
        &self,
        media: &dyn PmMedia,
        room: &LogRoom<'_>,
        owner: u64,
        slot_off: u64,
        entries: &[Entry],
    ) -> FsResult<Staged> {
        let mut st = Staged {
            new_tail: self.tail,
            ..Default::default()
        };
        let mut last_page = self.pages.last().copied();
        let result = (|| {
            for e in entries {
                let bytes = e.encode();
                let len = bytes.len() as u64;
                let left = match last_page {
                    Some(p) if st.new_tail != 0 => p.end() - st.new_tail,
                    _ => 0,
                };
                if len > left {
                    if left >= ENTRY_HEADER as u64 {
                        let pe = Entry::PageEnd.encode();
                        media.write(st.new_tail, &pe);
                        media.flush(st.new_tail, pe.len() as u64);
                    }
                    let size = next_page_size(last_page.map(|p| p.size), len);
                    let page = take_page(room, size, len).ok_or_else(|| errno(libc::ENOSPC))?;
                    let size = page.size;
                    st.new_pages.push(page);
                    // The whole page is written: header, then zeros. A page
                    // (above all a small one in a slab) reuses bytes that
                    // held another log's entries, valid checksums and all;
                    // were they left, a damaged tail word pointing past the
                    // last entry would replay them as this inode's (found by
                    // corrupt_images). Zeros there are refused by the walk.
                    let mut fresh = vec![0u8; size as usize];
                    fresh[LOG_PAGE_OFF_OWNER as usize..LOG_PAGE_OFF_OWNER as usize + 8]
                        .copy_from_slice(&log_page_owner_word(owner, size).to_le_bytes());
                    media.write(page.off, &fresh);
                    media.flush(page.off, size);
                    match last_page {
                        Some(prev) => {
                            media.store_u64(
                                prev.off + LOG_PAGE_OFF_NEXT,
                                terrace_format::encode_page_pointer(page.off),
                            );
                            media.flush(prev.off + LOG_PAGE_OFF_NEXT, 8);
                        }
                        None => {
                            media.store_u64(
                                slot_off + INODE_OFF_LOG_HEAD,
                                terrace_format::encode_page_pointer(page.off),
                            );
                            media.flush(slot_off + INODE_OFF_LOG_HEAD, 8);
                        }
                    }
                    last_page = Some(page);
                    st.new_tail = page.off + LOG_PAGE_HEADER;
                }
                media.write(st.new_tail, &bytes);
                media.flush(st.new_tail, len);
                st.new_tail += len;
                st.added += 1;
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(st),
            Err(e) => {
                room.give_back(st.new_pages);
                Err(e)
            }
        }
    }

    /// Head the log has after `st` commits.
    pub fn head_after(&self, st: &Staged) -> u64 {
        if self.head != 0 {
            self.head
        } else {
            st.new_pages.first().map_or(0, |p| p.off)
        }
    }

    /// Applies a committed stage to the DRAM view.
    pub fn apply(&mut self, st: Staged) {
        self.head = self.head_after(&st);
        self.tail = st.new_tail;
        self.pages.extend(st.new_pages);
        self.entries += st.added;
    }
}

/// Why a log could not be walked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkError {
    /// PM offset where the walk stopped.
    pub at: u64,
    /// Offset just past the last good entry (a safe tail for repair), 0 if none.
    pub last_good: u64,
    /// What was wrong.
    pub what: String,
    /// PM offset of a page's `next` word that failed its check (format
    /// version 12), when that stopped the walk: `fsck --repair` may correct
    /// it (`pointer_repair.rs`).
    pub damaged_next: Option<u64>,
}

/// Result of walking a committed log.
#[derive(Debug, Default)]
pub struct Walked {
    /// Entries in order, with the PM offset just past each.
    pub entries: Vec<(Entry, u64)>,
    /// Pages in chain order.
    pub pages: Vec<LogPage>,
}

/// Reads the committed entries of the log of inode `owner`. `pool` is the
/// byte range log pages must lie in. Fails on a bad checksum, a pointer
/// outside the pool, a page another inode owns (a damaged head or `next`
/// word), or a chain longer than the pool (a cycle).
pub fn walk(
    media: &dyn PmMedia,
    owner: u64,
    head: u64,
    tail: u64,
    pool: std::ops::Range<u64>,
) -> Result<Walked, WalkError> {
    let mut w = Walked::default();
    if tail == 0 {
        return Ok(w);
    }
    let misplaced = |p: u64| p % LOG_PAGE_MIN != 0 || p < pool.start || p >= pool.end;
    let max_pages = (pool.end - pool.start) / LOG_PAGE_MIN;
    let mut last_good = 0;
    let err = |at: u64, last_good: u64, what: String| {
        Err(WalkError {
            at,
            last_good,
            what,
            damaged_next: None,
        })
    };
    // Reads a page's header and checks its size class and place.
    let open = |p: u64, buf: &mut Vec<u8>| -> Result<LogPage, String> {
        if misplaced(p) {
            return Err(format!("log page {p:#x} is not in the pool"));
        }
        let mut hdr = [0u8; LOG_PAGE_HEADER as usize];
        media.read(p, &mut hdr);
        let class = hdr[LOG_PAGE_OFF_OWNER as usize + 7];
        let word = u64::from_le_bytes(
            hdr[LOG_PAGE_OFF_OWNER as usize..LOG_PAGE_OFF_OWNER as usize + 8]
                .try_into()
                .expect("8 bytes"),
        );
        if word & ((1 << 56) - 1) != owner {
            return Err(format!(
                "log page {p:#x} belongs to inode {}",
                word & ((1 << 56) - 1)
            ));
        }
        let size = log_page_size(class)
            .ok_or_else(|| format!("log page {p:#x} has a bad size class {class}"))?;
        if p % size != 0 || p + size > pool.end {
            return Err(format!("log page {p:#x} of {size} bytes is misplaced"));
        }
        buf.resize(size as usize, 0);
        media.read(p, buf);
        Ok(LogPage { off: p, size })
    };
    let mut buf = Vec::with_capacity(LOG_PAGE_MAX as usize);
    let mut page = match open(head, &mut buf) {
        Ok(p) => p,
        Err(what) => return err(head, 0, format!("log head: {what}")),
    };
    w.pages.push(page);
    let mut pos = page.off + LOG_PAGE_HEADER;
    loop {
        if pos == tail {
            return Ok(w);
        }
        let in_page = (pos - page.off) as usize;
        let page_over = in_page + ENTRY_HEADER > page.size as usize;
        if page_over || buf[in_page] == 1 {
            if !page_over {
                if let Err(e) = Entry::decode(&buf[in_page..]) {
                    return err(pos, last_good, format!("bad page-end marker: {e}"));
                }
            }
            let word = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
            let Ok(next) = terrace_format::decode_page_pointer(word) else {
                return Err(WalkError {
                    at: pos,
                    last_good,
                    what: format!("log page {:#x}: damaged next pointer", page.off),
                    damaged_next: Some(page.off + LOG_PAGE_OFF_NEXT),
                });
            };
            if next == 0 {
                return err(
                    pos,
                    last_good,
                    format!(
                        "log chain breaks at page {:#x} before the tail {tail:#x}",
                        page.off
                    ),
                );
            }
            if w.pages.len() as u64 >= max_pages {
                return err(pos, last_good, "log chain loops".into());
            }
            page = match open(next, &mut buf) {
                Ok(p) => p,
                Err(what) => return err(pos, last_good, what),
            };
            w.pages.push(page);
            pos = page.off + LOG_PAGE_HEADER;
            continue;
        }
        match Entry::decode(&buf[in_page..]) {
            Ok((e, len)) => {
                pos += len as u64;
                if pos > tail && tail > page.off && tail <= page.end() {
                    return err(pos, last_good, "entry crosses the log tail".into());
                }
                last_good = pos;
                w.entries.push((e, pos));
            }
            Err(FormatError::BadChecksum) => {
                return err(pos, last_good, "entry checksum mismatch".into())
            }
            Err(e) => return err(pos, last_good, format!("bad entry: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::PageAllocator;
    use crate::log_space::LogSpace;
    use terrace_format::{AttrEntry, BLOCK_SIZE};
    use terrace_media::MemMedia;

    fn room<'a>(ls: &'a LogSpace, a: &'a PageAllocator) -> LogRoom<'a> {
        LogRoom {
            space: ls,
            alloc: a,
            keep_free: 0,
        }
    }

    /// A 64-block PM, an allocator of its blocks 4..64 (2 shards) and an
    /// empty log space: the room the tests' logs grow in.
    fn small_pm() -> (MemMedia, PageAllocator, LogSpace) {
        (
            MemMedia::new(64 * 4096),
            PageAllocator::new(terrace_format::PhysBlock(4), 60, 2),
            LogSpace::default(),
        )
    }

    fn attr(n: u32) -> Entry {
        Entry::Attr(AttrEntry {
            nlink: n,
            ..Default::default()
        })
    }

    #[test]
    fn page_sizes_for_predicts_the_pages_a_stage_takes() {
        for (n, long) in [(1, 0), (12, 230), (40, 3), (67, 5), (200, 100)] {
            let (m, a, ls) = small_pm();
            let mut entries = vec![attr(1)];
            entries.extend((0..n).map(|i| Entry::DentryAdd {
                ino: i,
                file_type: 8,
                name: format!("{i:05}{}", "n".repeat(long)).into_bytes(),
            }));
            let st = Log::default()
                .stage(&m, &room(&ls, &a), 7, 0, &entries)
                .unwrap();
            let staged: Vec<u64> = st.new_pages.iter().map(|p| p.size).collect();
            let lens = entries.iter().map(|e| e.encode().len() as u64);
            assert_eq!(page_sizes_for(lens), staged, "{n} names of {long}+5 bytes");
        }
    }

    #[test]
    fn staged_entries_are_invisible_until_the_tail_moves() {
        let (m, a, ls) = small_pm();
        let mut log = Log::default();
        let st = log
            .stage(&m, &room(&ls, &a), 7, 0, &[attr(1), attr(2)])
            .unwrap();
        assert_eq!(
            walk(&m, 7, log.head, log.tail, 16384..64 * 4096)
                .unwrap()
                .entries
                .len(),
            0
        );
        log.apply(st);
        let w = walk(&m, 7, log.head, log.tail, 16384..64 * 4096).unwrap();
        assert_eq!(
            w.entries.iter().map(|e| e.0.clone()).collect::<Vec<_>>(),
            vec![attr(1), attr(2)]
        );
    }

    #[test]
    fn entries_spanning_many_pages_walk_back_in_order() {
        let (m, a, ls) = small_pm();
        let mut log = Log::default();
        let names: Vec<Entry> = (0..300)
            .map(|i| Entry::DentryAdd {
                ino: i,
                file_type: 8,
                name: format!("file-{i:05}-{}", "x".repeat(i as usize % 40)).into_bytes(),
            })
            .collect();
        for chunk in names.chunks(7) {
            let st = log.stage(&m, &room(&ls, &a), 3, 0, chunk).unwrap();
            log.apply(st);
        }
        let w = walk(&m, 3, log.head, log.tail, 16384..64 * 4096).unwrap();
        assert_eq!(
            w.entries.into_iter().map(|e| e.0).collect::<Vec<_>>(),
            names
        );
        assert_eq!(w.pages, log.pages);
        assert!(log.pages.len() > 2);
    }

    #[test]
    fn corrupt_entry_is_reported_with_a_safe_tail() {
        let (m, a, ls) = small_pm();
        let mut log = Log::default();
        let st = log
            .stage(&m, &room(&ls, &a), 3, 0, &[attr(1), attr(2), attr(3)])
            .unwrap();
        log.apply(st);
        let second = log.head + LOG_PAGE_HEADER + 64;
        m.write(second + 20, &[0xff]);
        let e = walk(&m, 3, log.head, log.tail, 16384..64 * 4096).unwrap_err();
        assert_eq!(e.last_good, second);
    }

    #[test]
    fn staging_that_runs_out_of_pages_frees_what_it_took() {
        let m = MemMedia::new(8 * 4096);
        let a = PageAllocator::new(terrace_format::PhysBlock(4), 2, 1);
        let ls = LogSpace::default();
        let log = Log::default();
        let big: Vec<Entry> = (0..200)
            .map(|i| Entry::DentryAdd {
                ino: i,
                file_type: 8,
                name: vec![b'a'; 200],
            })
            .collect();
        assert_eq!(
            log.stage(&m, &room(&ls, &a), 1, 0, &big)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::ENOSPC)
        );
        assert_eq!(a.free(), 2);
    }

    #[test]
    fn a_log_goes_on_in_smaller_pages_from_slab_room_when_no_block_is_left() {
        let (m, a, ls) = small_pm();
        // A log grown to 4 KiB pages, and one slab block with room left.
        let mut log = Log::default();
        let mut entries = Vec::new();
        while log.pages.last().map_or(true, |p| p.size < LOG_PAGE_MAX) {
            let e = attr(entries.len() as u32);
            let st = log
                .stage(&m, &room(&ls, &a), 3, 0, std::slice::from_ref(&e))
                .unwrap();
            log.apply(st);
            entries.push(e);
        }
        // Every other block taken — the next 4 KiB page cannot be had —
        // but for a slab block with room left in it.
        while ls
            .alloc(&a, 256, 0)
            .is_some_and(|p| p.off % BLOCK_SIZE != 0)
        {}
        let other = ls.alloc(&a, 256, 0).expect("a small page");
        let hole = ls.alloc(&a, 2048, 0).expect("a small page");
        while a.alloc_one().is_some() {}
        ls.free(&a, hole);
        let fill = (LOG_PAGE_MAX - (log.tail - log.pages.last().unwrap().off)) / 64 + 1;
        for _ in 0..fill {
            let e = attr(entries.len() as u32);
            let st = log
                .stage(&m, &room(&ls, &a), 3, 0, std::slice::from_ref(&e))
                .unwrap();
            log.apply(st);
            entries.push(e);
        }
        let last = *log.pages.last().unwrap();
        assert!(last.size < LOG_PAGE_MAX, "{last:?}");
        assert_eq!(last.off / BLOCK_SIZE, other.off / BLOCK_SIZE, "in the slab");
        let w = walk(&m, 3, log.head, log.tail, 16384..64 * 4096).unwrap();
        assert_eq!(
            w.entries.into_iter().map(|e| e.0).collect::<Vec<_>>(),
            entries
        );
        // The slab's room gone too: ENOSPC, and nothing taken.
        while ls.alloc(&a, 256, 0).is_some() {}
        let before = ls.bitmaps();
        let mut err = None;
        for _ in 0..64 {
            match log.stage(&m, &room(&ls, &a), 3, 0, &[attr(0)]) {
                Ok(st) => log.apply(st),
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        assert_eq!(err.and_then(|e| e.raw_os_error()), Some(libc::ENOSPC));
        assert_eq!(ls.bitmaps(), before);
    }
}
