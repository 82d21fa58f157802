//! When logs leave PM, and which ones (Ziggurat §4, log migration), as pure
//! decisions over a snapshot of PM's room.
//!
//! Data migration keeps PM's *data* under the migration threshold; logs are
//! metadata and stay on PM while there is room for them. Two situations move
//! them to a block tier:
//! - PM as a whole (data and logs) is still over the threshold after data
//!   moved: the logs of *cold* files go (unchanged for the migration age),
//!   until PM is back under the threshold;
//! - PM is short of room for metadata (free blocks beyond the promises below
//!   the metadata reserve — a burst of small files filled it): logs of any
//!   age go, until twice the reserve is free, because the alternative is
//!   operations that wait or fail with ENOSPC while the block tiers have room.
//!
//! A log moves only when its file has no data on PM and nothing cached (the
//! core checks that): otherwise the next data move or write-back would bring
//! it straight back.

/// PM's room, in blocks, as a pass sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPressure {
    /// Blocks of PM's page pool.
    pub pool_blocks: u64,
    /// Blocks of the pool in use (data and logs).
    pub used_blocks: u64,
    /// Blocks holding log pages.
    pub log_blocks: u64,
    /// Free blocks beyond those promised to write-back.
    pub free_unpromised_blocks: u64,
    /// The metadata reserve (data stops going to PM below it).
    pub reserve_blocks: u64,
    /// The migration threshold now, percent.
    pub threshold_percent: u8,
}

/// What a pass should do about logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogMigrationNeed {
    /// Nothing.
    None,
    /// Move logs of cold files until this many blocks of log pages are freed.
    Cold {
        /// Blocks to free.
        blocks: u64,
    },
    /// PM is short of room for metadata: move logs of any age until this many
    /// blocks are freed.
    Any {
        /// Blocks to free.
        blocks: u64,
    },
}

/// Decides whether logs should move, and how many blocks' worth.
pub fn log_migration_need(p: &LogPressure) -> LogMigrationNeed {
    if p.log_blocks == 0 || p.pool_blocks == 0 {
        return LogMigrationNeed::None;
    }
    if p.free_unpromised_blocks < p.reserve_blocks {
        let want = 2 * p.reserve_blocks - p.free_unpromised_blocks;
        return LogMigrationNeed::Any {
            blocks: want.min(p.log_blocks),
        };
    }
    let limit = u128::from(p.pool_blocks) * u128::from(p.threshold_percent) / 100;
    let used = u128::from(p.used_blocks);
    if used >= limit {
        let over = (used - limit) as u64;
        return LogMigrationNeed::Cold {
            blocks: over.max(1).min(p.log_blocks),
        };
    }
    LogMigrationNeed::None
}

/// Whether a file last changed at `changed_ns` is cold at `now_ns` (unchanged
/// for at least `age_ns`); with `any_age` every file is.
pub fn log_is_old_enough(now_ns: i64, changed_ns: i64, age_ns: u64, any_age: bool) -> bool {
    any_age || now_ns.saturating_sub(changed_ns) >= age_ns.min(i64::MAX as u64) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(used: u64, logs: u64, free: u64) -> LogPressure {
        LogPressure {
            pool_blocks: 1000,
            used_blocks: used,
            log_blocks: logs,
            free_unpromised_blocks: free,
            reserve_blocks: 32,
            threshold_percent: 50,
        }
    }

    #[test]
    fn logs_stay_on_pm_while_pm_is_under_its_threshold() {
        assert_eq!(
            log_migration_need(&p(400, 300, 600)),
            LogMigrationNeed::None
        );
        assert_eq!(
            log_migration_need(&p(499, 300, 501)),
            LogMigrationNeed::None
        );
    }

    #[test]
    fn cold_logs_move_by_the_amount_pm_is_over_its_threshold() {
        assert_eq!(
            log_migration_need(&p(600, 300, 400)),
            LogMigrationNeed::Cold { blocks: 100 }
        );
        // Never more than the logs hold.
        assert_eq!(
            log_migration_need(&p(900, 30, 100)),
            LogMigrationNeed::Cold { blocks: 30 }
        );
    }

    #[test]
    fn a_pm_short_of_metadata_room_moves_logs_of_any_age() {
        assert_eq!(
            log_migration_need(&p(990, 500, 10)),
            LogMigrationNeed::Any { blocks: 54 }
        );
        assert_eq!(
            log_migration_need(&p(990, 20, 10)),
            LogMigrationNeed::Any { blocks: 20 }
        );
    }

    #[test]
    fn without_logs_there_is_nothing_to_move() {
        assert_eq!(log_migration_need(&p(1000, 0, 0)), LogMigrationNeed::None);
    }

    #[test]
    fn files_are_cold_after_the_migration_age_unless_any_age_is_asked() {
        assert!(!log_is_old_enough(100, 90, 30, false));
        assert!(log_is_old_enough(120, 90, 30, false));
        assert!(log_is_old_enough(100, 99, 30, true));
        assert!(!log_is_old_enough(100, 0, u64::MAX, false));
    }
}
