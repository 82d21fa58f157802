//! What the campaign counts, and how errors are named in its report.

use super::*;

/// What the campaign counted (summed over rounds).
#[derive(Debug, Default, Clone)]
pub(crate) struct Counts {
    pub(crate) rounds: u64,
    pub(crate) ops: u64,
    pub(crate) ssd_read_faults: u64,
    pub(crate) ssd_write_faults: u64,
    pub(crate) ssd_sync_faults: u64,
    /// Syncs that failed once with the unsynced writes lost (Linux's
    /// buffered-file fsync error).
    pub(crate) ssd_lost_syncs: u64,
    pub(crate) pm_poisoned_reads: u64,
    /// Operations that returned an error, by errno.
    pub(crate) op_errors: BTreeMap<i32, u64>,
    /// The same, by operation.
    pub(crate) op_errors_by_op: BTreeMap<&'static str, u64>,
    /// Reads served wrong bytes from poisoned PM (the known gap).
    pub(crate) pm_poison_served: u64,
    /// Acknowledged bytes that did not read back after a remount.
    pub(crate) bytes_lost: u64,
    /// Bytes a successful read returned that the model does not allow.
    pub(crate) wrong_bytes: u64,
    pub(crate) panics: u64,
    /// Crash images and clean remounts checked.
    pub(crate) crash_remounts: u64,
    pub(crate) clean_remounts: u64,
    /// Acknowledged bytes compared after crash remounts, and all bytes
    /// after clean remounts.
    pub(crate) bytes_checked: u64,
    /// Crash images mounted while the SSD failed: mounted, refused.
    pub(crate) faulty_mounts: u64,
    pub(crate) faulty_mounts_refused: u64,
    /// Scrub reports: blocks flagged bad (reads that failed) and repaired.
    pub(crate) scrub_bad: u64,
    pub(crate) scrub_repaired: u64,
    /// Anything else that broke a promise: fsck problems, refused mounts,
    /// an unmount that failed with healthy media, a file unreadable with
    /// healthy media, a namespace that differs.
    pub(crate) failures: Vec<String>,
}

impl Counts {
    pub(crate) fn faults(&self) -> u64 {
        self.ssd_read_faults
            + self.ssd_write_faults
            + self.ssd_sync_faults
            + self.ssd_lost_syncs
            + self.pm_poisoned_reads
    }

    pub(crate) fn errors(&self) -> u64 {
        self.op_errors.values().sum()
    }

    pub(crate) fn summary(&self, base: u64) -> String {
        let errs: Vec<String> = self
            .op_errors
            .iter()
            .map(|(e, n)| format!("{} {n}", errno_name(*e)))
            .collect();
        format!(
            "base seed {base}, {} rounds, {} ops: faults injected {} \
             (ssd read {}, write {}, sync {}, sync losing writes {}; pm poisoned reads {}), operations that \
             returned an error {} ({}; by operation: {}), bytes lost {}, wrong bytes served {}, panics {}; \
             remounts checked {} crash + {} clean ({} MiB compared) + {} under read faults \
             ({} refused), scrub flagged {} repaired {}, \
             pm poison served {} (PM data has no checksum), other failures {}",
            self.rounds,
            self.ops,
            self.faults(),
            self.ssd_read_faults,
            self.ssd_write_faults,
            self.ssd_sync_faults,
            self.ssd_lost_syncs,
            self.pm_poisoned_reads,
            self.errors(),
            errs.join(", "),
            self.op_errors_by_op
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.bytes_lost,
            self.wrong_bytes,
            self.panics,
            self.crash_remounts,
            self.clean_remounts,
            self.bytes_checked >> 20,
            self.faulty_mounts + self.faulty_mounts_refused,
            self.faulty_mounts_refused,
            self.scrub_bad,
            self.scrub_repaired,
            self.pm_poison_served,
            self.failures.len()
        )
    }

    /// The counts as one JSON object, in the order of [`Counts::summary`].
    pub(crate) fn json(&self, base: u64) -> String {
        fn object(fields: Vec<(String, String)>) -> String {
            let fields: Vec<String> = fields
                .into_iter()
                .map(|(k, v)| format!("\"{k}\":{v}"))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        let n = |k: &str, v: u64| (k.to_string(), v.to_string());
        let by_errno = self.op_errors.iter().map(|(e, v)| n(&errno_name(*e), *v));
        let by_op = self.op_errors_by_op.iter().map(|(k, v)| n(k, *v));
        object(vec![
            n("base_seed", base),
            n("rounds", self.rounds),
            n("ops", self.ops),
            n("faults_injected", self.faults()),
            n("ssd_read_faults", self.ssd_read_faults),
            n("ssd_write_faults", self.ssd_write_faults),
            n("ssd_sync_faults", self.ssd_sync_faults),
            n("ssd_lost_syncs", self.ssd_lost_syncs),
            n("pm_poisoned_reads", self.pm_poisoned_reads),
            n("op_errors", self.errors()),
            ("op_errors_by_errno".into(), object(by_errno.collect())),
            ("op_errors_by_op".into(), object(by_op.collect())),
            n("bytes_lost", self.bytes_lost),
            n("wrong_bytes", self.wrong_bytes),
            n("panics", self.panics),
            n("crash_remounts", self.crash_remounts),
            n("clean_remounts", self.clean_remounts),
            n("bytes_checked", self.bytes_checked),
            n("faulty_mounts", self.faulty_mounts),
            n("faulty_mounts_refused", self.faulty_mounts_refused),
            n("scrub_bad", self.scrub_bad),
            n("scrub_repaired", self.scrub_repaired),
            n("pm_poison_served", self.pm_poison_served),
            n("failures", self.failures.len() as u64),
        ])
    }
}

pub(crate) fn errno_name(e: i32) -> String {
    match e {
        libc::EIO => "EIO".into(),
        libc::ENOSPC => "ENOSPC".into(),
        libc::EAGAIN => "EAGAIN".into(),
        libc::ENOENT => "ENOENT".into(),
        libc::EEXIST => "EEXIST".into(),
        libc::EINVAL => "EINVAL".into(),
        SETTING_REFUSED => "setting refused".into(),
        e => format!("errno{e}"),
    }
}
