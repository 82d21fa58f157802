//! Whether a READDIRPLUS reply carries its entries' attributes.
//!
//! With `FUSE_READDIRPLUS_AUTO` the kernel asks for attributes with the first
//! batch of every directory it has not cached, whatever the caller does next.
//! Every entry sent with attributes becomes a kernel inode and dentry; for a
//! walk that never stats what it lists (`find` with name or type tests, `ls`
//! without `-l`) that costs about as much as the walk itself (a `find` of
//! 50,000 names the kernel had forgotten: 0.25 s against 0.03 s on ext4, most
//! of it in the kernel making inodes). A walk that does stat (`ls -l`, `du`,
//! `git status`, `tar`) saves a LOOKUP round trip per entry with them. The
//! daemon cannot see which walk it serves — a stat answered from the attributes
//! it sent never reaches it — so it asks, now and then:
//!
//! - **Attributes mode** (the start): replies carry attributes, except that
//!   every [`PROBE_EVERY`]th directory listed is sent names only, a *probe*.
//! - A probe ends once it listed at least [`MIN_EVIDENCE`] names of
//!   non-directories (directories are looked up by any walk that descends)
//!   and the next directory's listing starts: if at least half of those names
//!   were looked up meanwhile the caller stats, and attributes stay on;
//!   otherwise **names mode**.
//! - **Names mode**: replies carry names only, and every listing is a probe;
//!   as soon as [`MIN_EVIDENCE`] of its names, and half of them, have been
//!   looked up, attributes come back on (before the next listing).
//! - A later batch of a directory (offset ≠ 0) always gets attributes: the
//!   kernel asks for them there only when names of that directory were looked
//!   up since its previous batch, which is the sign of a stat-ing caller.
//!
//! What a wrong guess costs is bounded: in attributes mode one directory in
//! [`PROBE_EVERY`] pays a LOOKUP per entry; in names mode a stat-ing caller
//! pays them for the directory it is in when the mode flips. Correctness does
//! not depend on the guess: an entry without attributes is an ordinary name
//! the kernel looks up when it needs to (the node id 0 of the protocol).
//!
//! Invariants: the probe's set of unlooked names is bounded by
//! [`MAX_PROBED`]; all state is behind one mutex taken for a few instructions
//! per listing and per lookup, never across I/O.

use std::collections::HashSet;
use std::sync::Mutex;

/// Directories listed with attributes between two probes.
pub const PROBE_EVERY: u32 = 16;
/// Names of non-directories a probe needs before it decides.
pub const MIN_EVIDENCE: u32 = 4;
/// Most names a probe remembers (a huge directory decides on its first ones).
pub const MAX_PROBED: usize = 4096;

/// The estimator shared by the request threads of one mount.
#[derive(Debug, Default)]
pub struct ListingAttrs {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Names mode (false = attributes mode, the start).
    names_only: bool,
    /// Directories listed with attributes since the last probe.
    since_probe: u32,
    /// The open probe, if any.
    probe: Option<Probe>,
}

#[derive(Debug, Default)]
struct Probe {
    /// Inode numbers of non-directories listed without attributes and not
    /// looked up yet.
    unlooked: HashSet<u64>,
    listed: u32,
    looked_up: u32,
}

impl Probe {
    fn decided(&self) -> bool {
        self.listed >= MIN_EVIDENCE
    }
    fn caller_stats(&self) -> bool {
        self.looked_up * 2 >= self.listed
    }
}

impl ListingAttrs {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding it cannot leave the counters inconsistent
        // in a way that matters (a heuristic): take the state as it is.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A READDIRPLUS of a directory arrived, for entries after cookie
    /// `offset`: should the reply carry attributes?
    pub fn attrs_for(&self, offset: u64) -> bool {
        let mut s = self.state();
        if offset != 0 {
            true
        } else {
            if s.probe.as_ref().is_some_and(Probe::decided) {
                let probe = s.probe.take().expect("checked");
                s.names_only = !probe.caller_stats();
                s.since_probe = 0;
            }
            if s.names_only {
                s.probe.get_or_insert_with(Probe::default);
                false
            } else if s.probe.is_some() {
                // A probe still short of evidence goes on.
                false
            } else if s.since_probe + 1 >= PROBE_EVERY {
                s.since_probe = 0;
                s.probe = Some(Probe::default());
                false
            } else {
                s.since_probe += 1;
                true
            }
        }
    }

    /// Entries were sent without attributes: the inode numbers of the
    /// non-directories among them.
    pub fn listed_names(&self, inos: impl IntoIterator<Item = u64>) {
        let mut s = self.state();
        let Some(p) = s.probe.as_mut() else { return };
        for ino in inos {
            if p.unlooked.len() >= MAX_PROBED {
                break;
            }
            if p.unlooked.insert(ino) {
                p.listed += 1;
            }
        }
    }

    /// The kernel looked up a name that resolved to inode `ino`.
    pub fn looked_up(&self, ino: u64) {
        let mut s = self.state();
        let names_only = s.names_only;
        let Some(p) = s.probe.as_mut() else { return };
        if !p.unlooked.remove(&ino) {
            return;
        }
        p.looked_up += 1;
        if names_only && p.looked_up >= MIN_EVIDENCE && p.caller_stats() {
            s.names_only = false;
            s.probe = None;
            s.since_probe = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lists a directory of `n` files numbered from `first` the way the
    /// adapter does; returns whether it carried attributes.
    fn list(e: &ListingAttrs, first: u64, n: u64) -> bool {
        let attrs = e.attrs_for(0);
        if !attrs {
            e.listed_names(first..first + n);
        }
        attrs
    }

    #[test]
    fn a_walk_that_never_stats_stops_getting_attributes_after_one_probe() {
        let e = ListingAttrs::default();
        let mut with = 0;
        for d in 0..100u64 {
            if list(&e, d * 1000, 100) {
                with += 1;
            }
        }
        // The directories before the first probe, and none after it.
        assert_eq!(with, u64::from(PROBE_EVERY) - 1);
    }

    #[test]
    fn a_walk_that_stats_everything_keeps_attributes_but_for_one_directory_in_sixteen() {
        let e = ListingAttrs::default();
        let mut without = 0;
        for d in 0..160u64 {
            if !list(&e, d * 1000, 100) {
                without += 1;
                // The caller stats what it listed: the probe's names are
                // looked up (a probe directory costs its LOOKUPs).
                for ino in d * 1000..d * 1000 + 100 {
                    e.looked_up(ino);
                }
            }
        }
        assert_eq!(without, 10);
    }

    #[test]
    fn names_mode_turns_attributes_back_on_as_soon_as_listed_names_are_looked_up() {
        let e = ListingAttrs::default();
        for d in 0..20u64 {
            list(&e, d * 1000, 100);
        }
        assert!(!list(&e, 50_000, 100), "in names mode");
        for ino in 50_000..50_100 {
            e.looked_up(ino);
        }
        assert!(list(&e, 60_000, 100), "the next directory has attributes");
    }

    #[test]
    fn lookups_of_names_never_listed_without_attributes_do_not_count() {
        let e = ListingAttrs::default();
        for d in 0..20u64 {
            list(&e, d * 1000, 100);
        }
        // Lookups of other names (a path walk elsewhere) change nothing.
        for ino in 900_000..900_100 {
            e.looked_up(ino);
        }
        assert!(!list(&e, 70_000, 100));
    }

    #[test]
    fn a_probe_waits_for_enough_names_of_files() {
        let e = ListingAttrs::default();
        for d in 0..u64::from(PROBE_EVERY) - 1 {
            assert!(list(&e, d * 1000, 10));
        }
        // The probe lands on directories holding only subdirectories (no
        // file names: nothing listed), so it goes on to the next listing.
        assert!(!list(&e, 100_000, 0));
        assert!(!list(&e, 100_100, 2));
        for ino in 100_100..100_102 {
            e.looked_up(ino);
        }
        assert!(!list(&e, 100_200, 2), "2 names are not enough to decide");
        for ino in 100_200..100_202 {
            e.looked_up(ino);
        }
        // 4 names listed, 4 looked up: the caller stats.
        assert!(list(&e, 100_300, 10));
    }

    #[test]
    fn later_batches_of_a_directory_always_carry_attributes() {
        let e = ListingAttrs::default();
        for d in 0..20u64 {
            list(&e, d * 1000, 100);
        }
        assert!(!e.attrs_for(0));
        assert!(e.attrs_for(4096));
    }

    #[test]
    fn a_probe_remembers_a_bounded_number_of_names() {
        let e = ListingAttrs::default();
        for d in 0..u64::from(PROBE_EVERY) - 1 {
            list(&e, d * 1000, 1);
        }
        assert!(!list(&e, 1 << 40, 100_000));
        let s = e.state();
        let p = s.probe.as_ref().expect("a probe");
        assert_eq!(p.unlooked.len(), MAX_PROBED);
        assert_eq!(p.listed as usize, MAX_PROBED);
    }
}
