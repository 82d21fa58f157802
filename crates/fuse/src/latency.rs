//! How long the daemon takes to answer each kind of FUSE request: one
//! fixed-bucket latency histogram per operation, filled by the request
//! threads and read by whoever exports it (the daemon's Prometheus endpoint).
//!
//! A request is timed from the moment its handler starts to the moment its
//! reply has been written to the FUSE device ([`RequestLatency::start`]
//! returns a guard that records when it is dropped, at the end of the
//! handler). The time a request waits in the kernel's queue and the
//! application's side of the round trip are not included. Since a request
//! is counted just after its reply is sent, a reader may find it missing
//! for the moment the application has its answer and the handler's thread
//! has not yet counted it.
//!
//! Cost: one clock read when the handler starts and one when it ends, a
//! search over [`BOUNDS_NS`] and two relaxed atomic additions; no lock and no
//! allocation. Operations are kept apart on their own cache lines.
//!
//! Invariants: counters only grow (until the process exits); a bucket holds
//! the requests whose duration is at most its bound and above the previous
//! one (the last bucket: above the last bound). A reader may see a request
//! counted in its bucket but not yet in the sum, or the reverse: snapshots
//! taken while requests run are off by those requests, never more.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Upper bounds of the buckets in nanoseconds (1-2-5 steps from 1 µs to
/// 10 s); a last bucket takes everything longer.
pub const BOUNDS_NS: [u64; 22] = [
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Buckets per operation: one per bound and one above the last.
const BUCKETS: usize = BOUNDS_NS.len() + 1;

macro_rules! ops {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// A FUSE operation the adapter handles.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Op {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl Op {
            /// Every operation, in the order of [`Op::index`].
            pub const ALL: &'static [Op] = &[$(Op::$variant),*];

            /// The operation's name (the FUSE request's, lower case).
            pub fn name(self) -> &'static str {
                match self {
                    $(Op::$variant => $name,)*
                }
            }
        }
    };
}

ops! {
    Lookup => "lookup",
    Forget => "forget",
    Getattr => "getattr",
    Setattr => "setattr",
    Readlink => "readlink",
    Mknod => "mknod",
    Mkdir => "mkdir",
    Unlink => "unlink",
    Rmdir => "rmdir",
    Symlink => "symlink",
    Rename => "rename",
    Link => "link",
    Open => "open",
    Read => "read",
    Write => "write",
    Flush => "flush",
    Release => "release",
    Fsync => "fsync",
    Opendir => "opendir",
    Readdir => "readdir",
    Readdirplus => "readdirplus",
    Releasedir => "releasedir",
    Fsyncdir => "fsyncdir",
    Statfs => "statfs",
    Setxattr => "setxattr",
    Getxattr => "getxattr",
    Listxattr => "listxattr",
    Removexattr => "removexattr",
    Access => "access",
    Create => "create",
    Tmpfile => "tmpfile",
    Fallocate => "fallocate",
    CopyFileRange => "copy_file_range",
    Lseek => "lseek",
    Ioctl => "ioctl",
}

impl Op {
    /// Position in [`Op::ALL`].
    fn index(self) -> usize {
        self as usize
    }
}

/// One operation's counters, on cache lines of their own so that threads
/// answering different operations do not contend.
#[repr(align(64))]
struct OpCounters {
    /// Requests per bucket (not cumulative).
    buckets: [AtomicU64; BUCKETS],
    /// Sum of the durations, ns.
    sum_ns: AtomicU64,
}

impl OpCounters {
    fn new() -> OpCounters {
        OpCounters {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
        }
    }
}

/// The latency histograms of every operation of one mount.
pub struct RequestLatency {
    ops: Vec<OpCounters>,
}

impl Default for RequestLatency {
    fn default() -> RequestLatency {
        RequestLatency {
            ops: Op::ALL.iter().map(|_| OpCounters::new()).collect(),
        }
    }
}

impl std::fmt::Debug for RequestLatency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLatency").finish_non_exhaustive()
    }
}

/// Times one request; records its duration when dropped.
#[must_use = "the request is timed until the guard is dropped"]
pub struct Timer<'a> {
    latency: &'a RequestLatency,
    op: Op,
    start: Instant,
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        let ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.latency.record(self.op, ns);
    }
}

/// One operation's histogram at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct OpHistogram {
    /// The operation.
    pub op: Op,
    /// Requests per bucket, not cumulative: `buckets[i]` for bound
    /// [`BOUNDS_NS`]`[i]`, the last one above every bound.
    pub buckets: [u64; BUCKETS],
    /// Sum of the durations, ns.
    pub sum_ns: u64,
}

impl OpHistogram {
    /// Requests counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

impl RequestLatency {
    /// Starts timing a request of `op`.
    pub fn start(&self, op: Op) -> Timer<'_> {
        Timer {
            latency: self,
            op,
            start: Instant::now(),
        }
    }

    /// Counts one request of `op` that took `ns` nanoseconds.
    pub fn record(&self, op: Op, ns: u64) {
        let Some(c) = self.ops.get(op.index()) else {
            return;
        };
        let bucket = BOUNDS_NS.partition_point(|&b| b < ns);
        c.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        c.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The histograms of the operations that have seen at least one request.
    pub fn snapshot(&self) -> Vec<OpHistogram> {
        Op::ALL
            .iter()
            .zip(&self.ops)
            .map(|(&op, c)| OpHistogram {
                op,
                buckets: std::array::from_fn(|i| c.buckets[i].load(Ordering::Relaxed)),
                sum_ns: c.sum_ns.load(Ordering::Relaxed),
            })
            .filter(|h| h.count() > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_its_index_and_a_distinct_name() {
        for (i, op) in Op::ALL.iter().enumerate() {
            assert_eq!(op.index(), i);
        }
        let mut names: Vec<_> = Op::ALL.iter().map(|o| o.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Op::ALL.len());
    }

    #[test]
    fn a_duration_lands_in_the_first_bucket_whose_bound_is_not_below_it() {
        let l = RequestLatency::default();
        l.record(Op::Write, 0);
        l.record(Op::Write, 1_000); // on the bound: that bucket
        l.record(Op::Write, 1_001);
        l.record(Op::Write, 7_000);
        l.record(Op::Write, 20_000_000_000); // beyond every bound
        let s = l.snapshot();
        assert_eq!(s.len(), 1, "only ops with requests are listed");
        let h = &s[0];
        assert_eq!(h.op, Op::Write);
        assert_eq!(h.count(), 5);
        assert_eq!(h.buckets[0], 2);
        assert_eq!(h.buckets[1], 1);
        assert_eq!(h.buckets[3], 1, "7 µs is in the 10 µs bucket");
        assert_eq!(h.buckets[BUCKETS - 1], 1);
        assert_eq!(h.sum_ns, 20_000_009_001);
    }

    #[test]
    fn a_timer_records_once_when_dropped() {
        let l = RequestLatency::default();
        {
            let _t = l.start(Op::Read);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let s = l.snapshot();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].op, Op::Read);
        assert_eq!(s[0].count(), 1);
        assert!(s[0].sum_ns >= 2_000_000, "{}", s[0].sum_ns);
    }
}
