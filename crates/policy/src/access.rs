//! HetFS's access tracing and classification: what kind of I/O a file gets.
//!
//! HetFS (ISC workshops 2017) traces every request to a file, merges
//! contiguous requests, and classifies the file as *sequential*, *random* or
//! *byte-granular* (requests smaller than a block), so that placement can put
//! each class on the device that serves it best. Here a per-file
//! [`AccessTrace`] (DRAM only: it starts empty at every mount) counts the
//! file's reads and writes as they arrive; [`AccessTrace::class`] turns the
//! counts into an [`AccessClass`]. The `hetfs` placement policy
//! ([`crate::placement`]) uses it; `terrace where` and the virtual xattr
//! `user.terrace.access` show it.
//!
//! # Rules
//! - Contiguous requests are merged into a *run* (HetFS merges contiguous
//!   requests of a trace). A request *continues* the run when it lies within
//!   a gap of the run's end (or start) — the gap being the larger of this and
//!   the previous request's length, at least [`GAP_BYTES`]; the run then grows
//!   to cover it, else the request starts a new run (a request deep inside
//!   the run is a re-access, not a continuation). The gap matters through FUSE: the kernel
//!   splits one large `write()` into pieces that the daemon's threads may
//!   serve in either order, so a stream does not arrive strictly in order.
//!   The share of continuing requests is the file's sequentiality.
//! - A request shorter than [`SMALL_BYTES`] (one block) is byte-granular.
//! - Until [`MIN_REQUESTS`] requests have been seen the class is
//!   [`AccessClass::Unknown`]. Then: byte-granular when at least half of the
//!   bytes came in small requests (by bytes, not by count: FUSE cuts the
//!   tail of a large `write()` into a small request of its own, which must
//!   not make a stream look byte-granular); else sequential when at least
//!   [`SEQUENTIAL_PERCENT`] of the requests continued the run; else random.
//! - Counts decay: when a file has seen [`WINDOW`] requests, every count is
//!   halved, so a file that changes pattern is reclassified within about a
//!   window's worth of requests.

use std::fmt;

/// Requests below this size (bytes) are byte-granular.
pub const SMALL_BYTES: u64 = 4096;
/// Requests seen before a file is classified.
pub const MIN_REQUESTS: u64 = 16;
/// Share (percent) of continuing requests that makes a file sequential.
pub const SEQUENTIAL_PERCENT: u64 = 80;
/// Requests after which the counts are halved.
pub const WINDOW: u64 = 1024;
/// Smallest gap (bytes) between a request and the run it continues.
pub const GAP_BYTES: u64 = 64 << 10;

/// A file's access pattern, as HetFS classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AccessClass {
    /// Too few requests to tell.
    #[default]
    Unknown,
    /// Mostly requests that continue the previous one.
    Sequential,
    /// Mostly block-sized or larger requests at scattered offsets.
    Random,
    /// Mostly requests smaller than a block.
    ByteGranular,
}

impl AccessClass {
    /// The class's name as shown to users.
    pub fn name(&self) -> &'static str {
        match self {
            AccessClass::Unknown => "unknown",
            AccessClass::Sequential => "sequential",
            AccessClass::Random => "random",
            AccessClass::ByteGranular => "byte-granular",
        }
    }
}

impl fmt::Display for AccessClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The access counts of one file (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AccessTrace {
    /// Requests counted (decayed).
    pub requests: u64,
    /// Of those, requests that continued the previous one.
    pub continuing: u64,
    /// Of those, requests smaller than [`SMALL_BYTES`].
    pub small: u64,
    /// Bytes of the counted requests (decayed with them).
    pub window_bytes: u64,
    /// Of those, bytes in small requests.
    pub small_bytes: u64,
    /// Reads and writes since mount (not decayed).
    pub reads: u64,
    /// Writes since mount (not decayed).
    pub writes: u64,
    /// Bytes read and written since mount (not decayed).
    pub bytes: u64,
    /// The current run `(start, end)` and the previous request's length.
    run: Option<(u64, u64, u64)>,
}

impl AccessTrace {
    /// Counts one request of `len` bytes at `off` (a read when `write` is false).
    pub fn record(&mut self, off: u64, len: u64, write: bool) {
        if len == 0 {
            return;
        }
        if self.requests >= WINDOW {
            self.requests /= 2;
            self.continuing /= 2;
            self.small /= 2;
            self.window_bytes /= 2;
            self.small_bytes /= 2;
        }
        self.window_bytes = self.window_bytes.saturating_add(len);
        self.requests += 1;
        let end = off.saturating_add(len);
        self.run = Some(match self.run {
            Some((start, run_end, prev_len))
                if {
                    // Near the run's end (going forward) or its start (going
                    // backward); a request deep inside the run is a re-access.
                    let gap = prev_len.max(len).max(GAP_BYTES);
                    let forward =
                        end.saturating_add(gap) >= run_end && off <= run_end.saturating_add(gap);
                    let backward =
                        off <= start.saturating_add(gap) && end.saturating_add(gap) >= start;
                    forward || backward
                } =>
            {
                self.continuing += 1;
                (start.min(off), run_end.max(end), len)
            }
            _ => (off, end, len),
        });
        if len < SMALL_BYTES {
            self.small += 1;
            self.small_bytes += len;
        }
        if write {
            self.writes += 1;
        } else {
            self.reads += 1;
        }
        self.bytes = self.bytes.saturating_add(len);
    }

    /// The file's class now.
    pub fn class(&self) -> AccessClass {
        if self.requests < MIN_REQUESTS {
            AccessClass::Unknown
        } else if self.small_bytes * 2 >= self.window_bytes {
            AccessClass::ByteGranular
        } else if self.continuing * 100 >= self.requests * SEQUENTIAL_PERCENT {
            AccessClass::Sequential
        } else {
            AccessClass::Random
        }
    }

    /// Share of continuing requests, in percent (0 before any request).
    pub fn sequential_percent(&self) -> u64 {
        (self.continuing * 100)
            .checked_div(self.requests)
            .unwrap_or(0)
    }

    /// Share of the bytes that came in small requests, in percent (0 before
    /// any request).
    pub fn small_percent(&self) -> u64 {
        (self.small_bytes * 100)
            .checked_div(self.window_bytes)
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(reqs: impl IntoIterator<Item = (u64, u64)>) -> AccessTrace {
        let mut t = AccessTrace::default();
        for (off, len) in reqs {
            t.record(off, len, true);
        }
        t
    }

    #[test]
    fn too_few_requests_are_unknown() {
        let t = trace((0..MIN_REQUESTS - 1).map(|k| (k << 20, 1 << 20)));
        assert_eq!(t.class(), AccessClass::Unknown);
    }

    #[test]
    fn appends_and_streaming_reads_are_sequential() {
        let t = trace((0..64).map(|k| (k << 20, 1 << 20)));
        assert_eq!(t.class(), AccessClass::Sequential);
        assert_eq!(t.sequential_percent(), 98); // 63 of 64 continue
    }

    #[test]
    fn pieces_of_large_writes_served_out_of_order_are_still_sequential() {
        // Each 1 MiB write arrives as a 4 KiB tail and then its 1020 KiB head.
        let t = trace((0..32).flat_map(|k| [((k << 20) + 1_044_480, 4096), (k << 20, 1_044_480)]));
        assert_eq!(t.class(), AccessClass::Sequential);
    }

    #[test]
    fn small_tails_of_large_writes_do_not_make_a_stream_byte_granular() {
        // FUSE cut each 1 MiB write into 1,048,064 bytes and a 512-byte tail.
        let t = trace((0..32).flat_map(|k| [(k << 20, 1_048_064), ((k << 20) + 1_048_064, 512)]));
        assert_eq!(t.class(), AccessClass::Sequential);
        assert_eq!(t.small, 32);
    }

    #[test]
    fn scattered_block_writes_are_random() {
        let t = trace((0..64).map(|k| ((k * 7919 % 1000) * 4096, 4096)));
        assert_eq!(t.class(), AccessClass::Random);
    }

    #[test]
    fn sub_block_requests_are_byte_granular_even_when_contiguous() {
        let t = trace((0..64).map(|k| (k * 100, 100)));
        assert_eq!(t.class(), AccessClass::ByteGranular);
        assert_eq!(t.small_percent(), 100);
    }

    #[test]
    fn a_file_that_changes_pattern_is_reclassified_within_a_window() {
        let mut t = trace((0..4 * WINDOW).map(|k| (k << 16, 1 << 16)));
        assert_eq!(t.class(), AccessClass::Sequential);
        for k in 0..WINDOW {
            t.record((k * 7919 % 5000) << 12, 4096, false);
        }
        assert_eq!(t.class(), AccessClass::Random);
        assert_eq!(t.reads, WINDOW);
        assert_eq!(t.writes, 4 * WINDOW);
    }

    #[test]
    fn empty_requests_are_ignored() {
        let t = trace([(0, 0), (0, 0)]);
        assert_eq!(t, AccessTrace::default());
    }
}
