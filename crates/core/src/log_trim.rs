//! Trimming a directory's log from its head: the pages at the start of the
//! log whose entries no longer matter are dropped, with room for at most a
//! few live entries instead of room for the whole live log.
//!
//! Compaction (`Fs::maybe_compact`) rewrites a whole log into new pages,
//! so it needs PM room for every live entry before it frees anything. A
//! directory whose files' logs have left PM (log migration) frees no PM
//! when a file is unlinked, while each unlink adds entries to the
//! directory's log: on a pool full of small files in one directory, `rm`
//! used PM up for good partway through (`tests/full_pool_deletes.rs`),
//! though the log's first pages held only the names already removed.
//!
//! A trim keeps the log's last pages (the *suffix*, from page `k` on) as
//! they are and replaces the first `k` pages by new ones holding *E*: the
//! directory's attributes and the names and xattrs that only the dropped
//! pages establish. Then replaying E and the suffix gives the state the
//! whole log gives, which is checked before anything is published (a
//! replay of both, compared as sets of entries).
//!
//! Steps, under the directory's inode lock:
//! 1. Walk the log; note for each page the names and xattrs it is the last
//!    to set; choose the `k` that frees most more than E takes.
//! 2. Stage E into fresh pages (a page-end marker after its last entry),
//!    link the last new page's `next` to the suffix's first page, flush.
//! 3. Commit point: one store of the slot's head word (fence, store,
//!    persist). A crash before it leaves the old chain (the new pages are
//!    free at the next mount, log space being derived); after it, the new
//!    chain. Then the first `k` pages are freed.
//!
//! Only directories: their entries are names, xattrs and attributes, each
//! a final value by itself. A file's writes, copies and checksums are not,
//! and its log is what log migration moves instead.
//!
//! Lock order: the inode lock, then the PM allocator (as every commit).

use crate::fs::Fs;
use crate::inode::Inode;
use crate::log::{walk, Log};
use crate::log_space::LogPage;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use terrace_format::{Entry, InodeSlot, INODE_OFF_LOG_HEAD, INODE_SIZE, LOG_PAGE_HEADER};

/// What a trim of the first `k` pages would cost and free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cut {
    /// Pages dropped.
    k: usize,
    /// Their bytes.
    freed: u64,
    /// Bytes E takes (encoded entries, not counting page headers).
    needed: u64,
}

/// The last page that sets each live name and each xattr of a directory,
/// and the cuts that are allowed, from its walked log.
struct PageFacts {
    /// Bytes of the entries that establish, for each page, the names whose
    /// last add is there and which the directory still has.
    name_bytes: Vec<u64>,
    /// Those entries (as E holds them), each with the page of its last add.
    live_names: Vec<(usize, Entry)>,
    /// Per xattr name the directory still has: (page of its last Set, page
    /// of its last entry of any kind, bytes of its entries in E).
    xattrs: Vec<(usize, usize, u64)>,
}

impl PageFacts {
    fn of(dir: &Inode, entries: &[(Entry, usize)], pages: usize) -> PageFacts {
        let mut last_add: HashMap<&[u8], usize> = HashMap::new();
        let mut last_set: HashMap<&[u8], usize> = HashMap::new();
        let mut last_any: HashMap<&[u8], usize> = HashMap::new();
        for (e, page) in entries {
            match e {
                Entry::DentryAdd { name, .. } => {
                    last_add.insert(name.as_slice(), *page);
                }
                Entry::XattrSet { name, .. } | Entry::XattrDel { name } => {
                    last_set.insert(name.as_slice(), *page);
                    last_any.insert(name.as_slice(), *page);
                }
                Entry::XattrAppend { name, .. } => {
                    last_any.insert(name.as_slice(), *page);
                }
                _ => {}
            }
        }
        let mut name_bytes = vec![0u64; pages];
        let mut live_names = Vec::new();
        if let Some(d) = &dir.dir {
            for (_, name, ino, file_type) in d.iter() {
                if let Some(&p) = last_add.get(name) {
                    let e = Entry::DentryAdd {
                        ino,
                        file_type,
                        name: name.to_vec(),
                    };
                    name_bytes[p] += e.encode().len() as u64;
                    live_names.push((p, e));
                }
            }
        }
        let xattrs = dir
            .xattrs
            .iter()
            .map(|(name, value)| {
                let bytes = crate::inode::xattr_entries(name, value)
                    .iter()
                    .map(|e| e.encode().len() as u64)
                    .sum();
                let set = last_set.get(name.as_slice()).copied().unwrap_or(0);
                let any = last_any.get(name.as_slice()).copied().unwrap_or(0);
                (set, any, bytes)
            })
            .collect();
        PageFacts {
            name_bytes,
            live_names,
            xattrs,
        }
    }

    /// The cut of the first `k` pages, or None when it is not allowed: an
    /// xattr set in the dropped pages and appended to after them (E would
    /// hold its whole value, and the suffix would append again).
    fn cut(&self, pages: &[LogPage], k: usize, attr_bytes: u64) -> Option<Cut> {
        let mut needed = attr_bytes + self.name_bytes[..k].iter().sum::<u64>();
        for &(set, any, bytes) in &self.xattrs {
            if any < k {
                needed += bytes;
            } else if set < k {
                return None;
            }
        }
        let freed = pages[..k].iter().map(|p| p.size).sum();
        Some(Cut { k, freed, needed })
    }
}

/// The cut to make: of those whose E (with a page header per 4 KiB) fits
/// in `room` bytes — or in one smallest page — the one freeing most beyond
/// what E takes, and at least one 4 KiB block more.
fn best_cut(facts: &PageFacts, pages: &[LogPage], attr_bytes: u64, room: u64) -> Option<Cut> {
    let takes = |c: &Cut| {
        let e_pages = c
            .needed
            .div_ceil(terrace_format::LOG_PAGE_MAX - LOG_PAGE_HEADER);
        c.needed + e_pages * LOG_PAGE_HEADER
    };
    let room = room.max(terrace_format::LOG_PAGE_MIN);
    (1..pages.len())
        .filter_map(|k| facts.cut(pages, k, attr_bytes))
        .filter(|c| takes(c) <= room && c.freed >= takes(c) + terrace_format::BLOCK_SIZE)
        .max_by_key(|c| c.freed - takes(c))
}

/// The entries of an inode's state as a sorted list of encodings: equal
/// lists mean equal states, whatever order the entries came in.
fn state_of(inode: &Inode) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = inode.snapshot_entries().iter().map(Entry::encode).collect();
    v.sort_unstable();
    v
}

impl Fs {
    /// Trims the log of directory `dir` from its head now, as a removal
    /// does when PM is short (module doc): whether it did.
    pub fn trim_dir_log(&self, dir: crate::types::Ino) -> crate::types::FsResult<bool> {
        let mut l = self.lock_set(&[dir])?;
        Ok(self.trim_log_head(l.get(dir)))
    }

    /// Trims the log of directory `dir` (locked by the caller) from its
    /// head when that frees at least a block of PM (module doc). Whether it
    /// did. Never changes what the log replays to.
    pub(crate) fn trim_log_head(&self, dir: &mut Inode) -> bool {
        if dir.dir.is_none() || dir.log.on_tier.is_some() || dir.log.pages.len() < 2 {
            return false;
        }
        let media = &*self.media;
        let Ok(walked) = walk(media, dir.ino, dir.log.head, dir.log.tail, 0..media.len()) else {
            return false;
        };
        if walked.pages != dir.log.pages {
            return false;
        }
        // Each entry with the index of the page it lies in.
        let mut page = 0;
        let entries: Vec<(Entry, usize)> = walked
            .entries
            .into_iter()
            .map(|(e, end)| {
                // Pages lie anywhere in PM: an entry is in the page whose
                // bytes hold its end.
                let holds = |p: &LogPage| p.off < end && end <= p.end();
                while !holds(&walked.pages[page]) && page + 1 < walked.pages.len() {
                    page += 1;
                }
                (e, page)
            })
            .collect();
        // The state the whole log replays to, from the slot on media.
        let base = {
            let mut raw = [0u8; INODE_SIZE];
            media.read(self.table.pm_offset(dir.ino), &mut raw);
            match InodeSlot::decode(&raw)
                .ok()
                .and_then(|s| Inode::from_slot(dir.ino, &s))
            {
                Some(i) => i,
                None => return false,
            }
        };
        let mut whole = base.clone();
        for (e, _) in &entries {
            whole.apply(e);
        }
        let attr = Entry::Attr(whole.attr);
        let facts = PageFacts::of(&whole, &entries, walked.pages.len());
        let room_bytes =
            self.alloc.free().saturating_sub(self.promised_blocks()) * terrace_format::BLOCK_SIZE;
        let attr_bytes = attr.encode().len() as u64;
        let Some(cut) = best_cut(&facts, &walked.pages, attr_bytes, room_bytes) else {
            return false;
        };
        // E: the attributes, then what only the dropped pages establish.
        let mut e_entries = vec![attr];
        e_entries.extend(
            facts
                .live_names
                .iter()
                .filter(|(p, _)| *p < cut.k)
                .map(|(_, e)| e.clone()),
        );
        for ((name, value), &(_, any, _)) in whole.xattrs.iter().zip(&facts.xattrs) {
            if any < cut.k {
                e_entries.extend(crate::inode::xattr_entries(name, value));
            }
        }
        // The check: E and the suffix replay to the same state.
        let suffix: Vec<&Entry> = entries
            .iter()
            .filter(|(_, p)| *p >= cut.k)
            .map(|(e, _)| e)
            .collect();
        let mut trimmed = base;
        for e in e_entries.iter().chain(suffix.iter().copied()) {
            trimmed.apply(e);
        }
        if state_of(&trimmed) != state_of(&whole) {
            return false;
        }
        // Stage E into a new chain without touching the slot's head word.
        // Out of all but the blocks promised to write-back: a trim gives
        // back at least a block more than it takes before it returns, so
        // it may take the last blocks kept for a move's commit (PM may be
        // down to those when removals need a trim).
        let room = crate::log_space::LogRoom {
            space: &self.log_space,
            alloc: &self.alloc,
            keep_free: self.promised_blocks(),
        };
        let Ok(st) = Log::default().stage(
            media,
            &room,
            dir.ino,
            crate::commit::scratch_slot(),
            &e_entries,
        ) else {
            return false;
        };
        let last = *st.new_pages.last().expect("E has an entry");
        if last.end() - st.new_tail >= terrace_format::ENTRY_HEADER as u64 {
            let pe = Entry::PageEnd.encode();
            media.write(st.new_tail, &pe);
            media.flush(st.new_tail, pe.len() as u64);
        }
        let suffix_first = walked.pages[cut.k];
        let next_word = last.off + terrace_format::LOG_PAGE_OFF_NEXT;
        media.store_u64(
            next_word,
            terrace_format::encode_page_pointer(suffix_first.off),
        );
        media.flush(next_word, 8);
        let head = st.new_pages[0].off;
        // Commit point: the head word (the journal fences first).
        self.journal.commit(
            media,
            &[(
                self.table.pm_offset(dir.ino) + INODE_OFF_LOG_HEAD,
                terrace_format::encode_page_pointer(head),
            )],
        );
        let mut pages = st.new_pages;
        pages.extend_from_slice(&walked.pages[cut.k..]);
        let dropped: Vec<LogPage> = walked.pages[..cut.k].to_vec();
        self.log_space.free_all(&self.alloc, dropped);
        dir.log = Log {
            on_tier: None,
            head,
            tail: dir.log.tail,
            pages,
            entries: (e_entries.len() + suffix.len()) as u64,
        };
        // Counted with compactions (a trim is a partial one).
        self.counters.compactions.fetch_add(1, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages(sizes: &[u64]) -> Vec<LogPage> {
        let mut off = 1 << 20;
        sizes
            .iter()
            .map(|&size| {
                let p = LogPage { off, size };
                off += 4096;
                p
            })
            .collect()
    }

    #[test]
    fn the_cut_frees_most_beyond_what_the_kept_names_take() {
        let p = pages(&[4096; 5]);
        // Live names: 3,000 bytes set in page 2, 100 in page 4 (the last,
        // always kept).
        let facts = PageFacts {
            name_bytes: vec![0, 0, 3000, 0, 100],
            live_names: vec![],
            xattrs: vec![],
        };
        let c = best_cut(&facts, &p, 80, 1 << 20).unwrap();
        assert_eq!((c.k, c.freed, c.needed), (4, 4 * 4096, 3080));
        // With room for an E of one smallest page only, the cut stops
        // before the live names.
        let c = best_cut(&facts, &p, 80, 0).unwrap();
        assert_eq!((c.k, c.freed, c.needed), (2, 2 * 4096, 80));
        // Nothing to gain when the pages are all live.
        let full = PageFacts {
            name_bytes: vec![4000; 5],
            live_names: vec![],
            xattrs: vec![],
        };
        assert_eq!(best_cut(&full, &p, 80, 1 << 20), None);
    }

    #[test]
    fn an_xattr_set_before_the_cut_and_appended_after_it_forbids_the_cut() {
        let p = pages(&[4096; 4]);
        let facts = PageFacts {
            name_bytes: vec![0; 4],
            live_names: vec![],
            // Set in page 1, appended in page 2.
            xattrs: vec![(1, 2, 500)],
        };
        assert_eq!(facts.cut(&p, 2, 80), None);
        assert_eq!(facts.cut(&p, 3, 80).map(|c| c.needed), Some(580));
        assert_eq!(facts.cut(&p, 1, 80).map(|c| c.needed), Some(80));
    }
}
