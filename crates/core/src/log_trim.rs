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
//!    to set; choose the `k` whose pages give back the most pool blocks
//!    more than E's pages take (at least one: checked again once E is
//!    staged, where its pages really lie, so each trim that reports
//!    success has freed a block and a removal's retries end).
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
    /// Pool blocks that dropping them gives back
    /// ([`crate::log_space::LogSpace::blocks_freed_by_prefixes`]).
    freed: u64,
    /// Bytes E takes (encoded entries, not counting page headers).
    needed: u64,
}

/// A live xattr of the directory, as the walked log sets it.
struct XattrFacts {
    /// Page of its last Set (or Del).
    set: usize,
    /// Page of its last entry of any kind.
    any: usize,
    /// Encoded lengths of its entries in E.
    lens: Vec<u64>,
}

/// The last page that sets each live name and each xattr of a directory,
/// and the cuts that are allowed, from its walked log.
struct PageFacts {
    /// Bytes of the entries that establish, for each page, the names whose
    /// last add is there and which the directory still has.
    name_bytes: Vec<u64>,
    /// Those entries (as E holds them), each with the page of its last add
    /// and its encoded length.
    live_names: Vec<(usize, Entry, u64)>,
    /// Per xattr name the directory still has, in its order.
    xattrs: Vec<XattrFacts>,
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
                    let len = e.encode().len() as u64;
                    name_bytes[p] += len;
                    live_names.push((p, e, len));
                }
            }
        }
        let xattrs = dir
            .xattrs
            .iter()
            .map(|(name, value)| XattrFacts {
                set: last_set.get(name.as_slice()).copied().unwrap_or(0),
                any: last_any.get(name.as_slice()).copied().unwrap_or(0),
                lens: crate::inode::xattr_entries(name, value)
                    .iter()
                    .map(|e| e.encode().len() as u64)
                    .collect(),
            })
            .collect();
        PageFacts {
            name_bytes,
            live_names,
            xattrs,
        }
    }

    /// The cut of the first `k` pages (`freed[k]` blocks given back), or
    /// None when it is not allowed: an xattr set in the dropped pages and
    /// appended to after them (E would hold its whole value, and the suffix
    /// would append again).
    fn cut(&self, freed: &[u64], k: usize, attr_bytes: u64) -> Option<Cut> {
        let mut needed = attr_bytes + self.name_bytes[..k].iter().sum::<u64>();
        for x in &self.xattrs {
            if x.any < k {
                needed += x.lens.iter().sum::<u64>();
            } else if x.set < k {
                return None;
            }
        }
        Some(Cut {
            k,
            freed: freed[k],
            needed,
        })
    }

    /// Encoded lengths of E's entries for a cut of `k` pages, in the order
    /// E is staged: the attributes, the names, the xattrs.
    fn e_lens(&self, k: usize, attr_bytes: u64) -> Vec<u64> {
        let mut lens = vec![attr_bytes];
        lens.extend(
            self.live_names
                .iter()
                .filter(|(p, _, _)| *p < k)
                .map(|(_, _, len)| *len),
        );
        for x in self.xattrs.iter().filter(|x| x.any < k) {
            lens.extend_from_slice(&x.lens);
        }
        lens
    }
}

/// The cut to make: of those whose E fits in `room_blocks` free blocks (or
/// in one smallest page), the one that gives back the most blocks beyond
/// what E's pages take, and at least one. E's pages take at most a block
/// each (a small one may open a slab block of its own), as many as
/// [`Log::stage`] chains for E into an empty log
/// ([`crate::log::page_sizes_for`]).
///
/// Pricing a cut exactly walks E's entries, so cuts are first ranked by a
/// bound: E takes at least as many pages as 4 KiB pages hold its bytes,
/// so no cut gains more than `freed - that`. Cuts are priced in the order
/// of that bound until the next one's bound is no better than the best
/// exact gain found, which is then the best of all. (Pricing only the best
/// few by the bound missed every cut on a log whose deep cuts all had an E
/// too large for the room by its exact pages, though a shallow cut of
/// dead pages was there: removals then waited, and under load failed with
/// ENOSPC — `tests/full_pool_deletes.rs`.)
fn best_cut(facts: &PageFacts, freed: &[u64], attr_bytes: u64, room_blocks: u64) -> Option<Cut> {
    // Fewer pages than E can take (none holds more than a whole page's).
    let at_least = |c: &Cut| {
        c.needed
            .div_ceil(terrace_format::LOG_PAGE_MAX - LOG_PAGE_HEADER)
    };
    let may_fit = |c: &Cut| {
        at_least(c) <= room_blocks || c.needed + LOG_PAGE_HEADER <= terrace_format::LOG_PAGE_MIN
    };
    let mut cuts: Vec<(u64, Cut)> = (1..freed.len() - 1)
        .filter_map(|k| facts.cut(freed, k, attr_bytes))
        .filter(|c| c.freed > at_least(c) && may_fit(c))
        .map(|c| (c.freed - at_least(&c), c))
        .collect();
    cuts.sort_by_key(|&(bound, c)| (std::cmp::Reverse(bound), c.k));
    let mut best: Option<(u64, Cut)> = None;
    for (bound, c) in cuts {
        if best.is_some_and(|(gain, _)| bound <= gain) {
            break;
        }
        let lens = facts.e_lens(c.k, attr_bytes);
        let sizes = crate::log::page_sizes_for(lens.iter().copied());
        let takes = sizes.len() as u64;
        let fits = takes <= room_blocks || sizes == [terrace_format::LOG_PAGE_MIN];
        if fits && c.freed > takes {
            let gain = c.freed - takes;
            // Of equal gains, the first priced (the better bound).
            if best.map_or(true, |(g, _)| gain > g) {
                best = Some((gain, c));
            }
        }
    }
    best.map(|(_, c)| c)
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
        let room_blocks = self.alloc.free().saturating_sub(self.promised_blocks());
        let attr_bytes = attr.encode().len() as u64;
        let freed = self.log_space.blocks_freed_by_prefixes(&walked.pages);
        let Some(cut) = best_cut(&facts, &freed, attr_bytes, room_blocks) else {
            return false;
        };
        // E: the attributes, then what only the dropped pages establish.
        let mut e_entries = vec![attr];
        e_entries.extend(
            facts
                .live_names
                .iter()
                .filter(|(p, _, _)| *p < cut.k)
                .map(|(_, e, _)| e.clone()),
        );
        for ((name, value), x) in whole.xattrs.iter().zip(&facts.xattrs) {
            if x.any < cut.k {
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
        // Where E's pages really lie decides what the trim gives and takes
        // (a small page of E in a slab block with dropped pages keeps that
        // block): at least a block more given than taken, or nothing is
        // published, so a removal's retries after trims end.
        let gives = self
            .log_space
            .blocks_freed_by_prefixes(&walked.pages[..cut.k])[cut.k];
        let takes = self.log_space.blocks_freed_by_prefixes(&st.new_pages)[st.new_pages.len()];
        if gives <= takes {
            room.give_back(st.new_pages);
            return false;
        }
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

    /// Facts of a log of `pages` pages whose live names, of `len` bytes
    /// each, have their last add in the pages `at` lists.
    fn facts(pages: usize, at: &[(usize, u64)]) -> PageFacts {
        let mut name_bytes = vec![0; pages];
        let mut live_names = Vec::new();
        for &(p, len) in at {
            name_bytes[p] += len;
            live_names.push((p, Entry::PageEnd, len));
        }
        PageFacts {
            name_bytes,
            live_names,
            xattrs: vec![],
        }
    }

    #[test]
    fn the_cut_frees_most_beyond_what_the_kept_names_take() {
        // Five whole-block pages; live names: 30 of 100 bytes set in page 2,
        // one in page 4 (the last, always kept).
        let freed: Vec<u64> = (0..=5).collect();
        let mut at = vec![(2, 100); 30];
        at.push((4, 100));
        let f = facts(5, &at);
        // E for k = 4: 80 + 3,000 bytes in pages of 256, 512, 1024, 2048:
        // four pages, each may take a block, so dropping 4 gains nothing;
        // dropping 2 (E: the attributes alone, one small page) gains 1.
        let c = best_cut(&f, &freed, 80, 1 << 20).unwrap();
        assert_eq!((c.k, c.freed, c.needed), (2, 2, 80));
        // With many more dead pages behind the names, the deep cut wins.
        let freed: Vec<u64> = (0..=12).collect();
        let mut at = vec![(2, 100); 30];
        at.push((11, 100));
        let f = facts(12, &at);
        let c = best_cut(&f, &freed, 80, 1 << 20).unwrap();
        assert_eq!((c.k, c.freed, c.needed), (11, 11, 3080));
        // With no free block, only an E of one smallest page may be made.
        let c = best_cut(&f, &freed, 80, 0).unwrap();
        assert_eq!((c.k, c.needed), (2, 80));
        // Nothing to gain when the pages are all live.
        let full = facts(5, &[(0, 4000), (1, 4000), (2, 4000), (3, 4000), (4, 4000)]);
        assert_eq!(
            best_cut(&full, &(0..=5).collect::<Vec<_>>(), 80, 1 << 20),
            None
        );
    }

    /// The gain of the best cut, found by pricing every cut.
    fn best_gain_by_pricing_all(f: &PageFacts, freed: &[u64], attr: u64, room: u64) -> Option<u64> {
        (1..freed.len() - 1)
            .filter_map(|k| f.cut(freed, k, attr))
            .filter_map(|c| {
                let sizes = crate::log::page_sizes_for(f.e_lens(c.k, attr));
                let takes = sizes.len() as u64;
                let fits = takes <= room || sizes == [terrace_format::LOG_PAGE_MIN];
                (fits && c.freed > takes).then_some(c.freed - takes)
            })
            .max()
    }

    #[test]
    fn a_shallow_cut_is_found_when_every_deep_cut_is_too_large_for_the_room() {
        // Ten dead pages, then fifty whose live names take 1,000 bytes
        // each. With 8 free blocks, the 4 KiB bound lets cuts to page 42
        // through, but E past page 29 takes more than 8 pages (they grow
        // from 256 bytes): the deep cuts with the best bound all fail
        // their exact price. Pricing only the best few of them found no
        // cut at all, on a log with ten dead pages.
        let at: Vec<(usize, u64)> = (10..60)
            .flat_map(|p| std::iter::repeat((p, 100)).take(10))
            .collect();
        let f = facts(60, &at);
        let freed: Vec<u64> = (0..=60).collect();
        let c = best_cut(&f, &freed, 80, 8).expect("a cut of dead pages exists");
        let takes = crate::log::page_sizes_for(f.e_lens(c.k, 80)).len() as u64;
        assert!(takes <= 8, "{c:?} takes {takes} pages");
        assert_eq!(
            Some(c.freed - takes),
            best_gain_by_pricing_all(&f, &freed, 80, 8)
        );
    }

    #[test]
    fn the_chosen_cut_gains_as_much_as_the_best_of_all_cuts() {
        // Many shapes of log: live names spread at random over the pages,
        // prefixes that free blocks in steps (small pages share a block).
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..300 {
            let pages = 2 + next(40) as usize;
            let at: Vec<(usize, u64)> = (0..next(200))
                .map(|_| (next(pages as u64) as usize, 24 + next(260)))
                .collect();
            let f = facts(pages, &at);
            let mut freed = vec![0u64];
            for _ in 0..pages {
                let step = u64::from(next(3) != 0);
                freed.push(freed.last().unwrap() + step);
            }
            let room = next(12);
            let got = best_cut(&f, &freed, 80, room).map(|c| {
                let sizes = crate::log::page_sizes_for(f.e_lens(c.k, 80));
                c.freed - sizes.len() as u64
            });
            assert_eq!(got, best_gain_by_pricing_all(&f, &freed, 80, room));
        }
    }

    #[test]
    fn a_cut_that_frees_no_more_blocks_than_its_e_takes_is_never_chosen() {
        // The pages a first trim leaves (E of 12 names of 280 bytes: pages
        // of 256, 512, 1024, 2048 and 4096 bytes, the small ones sharing
        // one slab block) give back 2 blocks; a new E would take as many.
        let f = facts(
            6,
            &[
                (1, 280),
                (2, 280),
                (2, 280),
                (2, 280),
                (3, 280),
                (3, 280),
                (3, 280),
                (3, 280),
                (3, 280),
                (3, 280),
                (3, 280),
                (4, 280),
            ],
        );
        let freed = vec![0, 0, 0, 1, 1, 2, 2];
        assert_eq!(best_cut(&f, &freed, 64, 1 << 20), None);
    }

    #[test]
    fn an_xattr_set_before_the_cut_and_appended_after_it_forbids_the_cut() {
        let f = PageFacts {
            name_bytes: vec![0; 4],
            live_names: vec![],
            // Set in page 1, appended in page 2.
            xattrs: vec![XattrFacts {
                set: 1,
                any: 2,
                lens: vec![300, 200],
            }],
        };
        let freed: Vec<u64> = (0..=4).collect();
        assert_eq!(f.cut(&freed, 2, 80), None);
        assert_eq!(f.cut(&freed, 3, 80).map(|c| c.needed), Some(580));
        assert_eq!(f.cut(&freed, 1, 80).map(|c| c.needed), Some(80));
        assert_eq!(f.e_lens(3, 80), vec![80, 300, 200]);
    }
}
