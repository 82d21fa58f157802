//! Time conversion utilities for FUSE operations.

use std::convert::TryFrom;
use std::time::Duration;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

/// Converts a `SystemTime` to a tuple of (seconds, nanoseconds) since the Unix epoch.
///
/// This handles times before the Unix epoch by returning negative seconds.
/// Values that overflow `i64` are saturated to `i64::MAX` or `i64::MIN`.
pub(crate) fn time_from_system_time(system_time: &SystemTime) -> (i64, u32) {
    // Convert to signed 64-bit time with epoch at 0
    match system_time.duration_since(UNIX_EPOCH) {
        Ok(duration) => match i64::try_from(duration.as_secs()) {
            Ok(secs) => (secs, duration.subsec_nanos()),
            Err(_) => (i64::MAX, 999_999_999),
        },
        Err(before_epoch_error) => {
            let d = before_epoch_error.duration();
            let secs = d.as_secs();
            let nanos = d.subsec_nanos();

            // Minus min representable value.
            if (secs, nanos) >= (i64::MAX as u64 + 1, 0) {
                // Saturate.
                (i64::MIN, 0)
            } else if nanos == 0 {
                (-(secs as i64), 0)
            } else {
                (-(secs as i64) - 1, 1_000_000_000 - nanos)
            }
        }
    }
}

/// Converts a tuple of (seconds, nanoseconds) since the Unix epoch to a `SystemTime`.
///
/// This handles negative seconds (times before the Unix epoch) as a
/// `timespec` does: the nanoseconds count forward from the (negative)
/// second, so `(-1, 500_000_000)` is half a second before the epoch. On
/// Linux every `(i64, nanoseconds)` pair is a `SystemTime` (a `timespec`);
/// where one is not, the time falls back towards the epoch by halving until
/// it is (never a panic).
pub(crate) fn system_time_from_time(secs: i64, nsecs: u32) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(nsecs));
    if secs >= 0 {
        let whole = Duration::from_secs(secs as u64);
        UNIX_EPOCH
            .checked_add(whole)
            .and_then(|t| t.checked_add(nanos))
            .unwrap_or_else(|| latest_time(whole + nanos))
    } else {
        let whole = Duration::from_secs(secs.unsigned_abs());
        match UNIX_EPOCH.checked_sub(whole) {
            Some(t) => t + nanos,
            None => earliest_time(whole),
        }
    }
}

/// A `SystemTime` past the epoch by at most `after` (halving it until one is).
fn latest_time(mut after: Duration) -> SystemTime {
    loop {
        after /= 2;
        if let Some(t) = UNIX_EPOCH.checked_add(after) {
            return t;
        }
    }
}

/// A `SystemTime` before the epoch by at most `before` (halving it until one is).
fn earliest_time(mut before: Duration) -> SystemTime {
    loop {
        before /= 2;
        if let Some(t) = UNIX_EPOCH.checked_sub(before) {
            return t;
        }
    }
}

#[cfg(test)]
mod test {
    use std::time::Duration;
    use std::time::UNIX_EPOCH;

    use crate::time::system_time_from_time;
    use crate::time::time_from_system_time;

    #[test]
    fn negative_seconds_with_nanoseconds_count_forward_from_the_second() {
        let half_before = system_time_from_time(-1, 500_000_000);
        assert_eq!(half_before, UNIX_EPOCH - Duration::from_millis(500));
        let t = system_time_from_time(-2, 1);
        assert_eq!(t, UNIX_EPOCH - Duration::new(1, 999_999_999));
    }

    #[test]
    fn times_round_trip_through_seconds_and_nanoseconds() {
        for (secs, nanos) in [
            (0, 0),
            (1, 5),
            (-1, 500_000_000),
            (-1, 0),
            (-31_536_000, 999_999_999),
            (i64::MAX, 999_999_999),
            (i64::MIN, 0),
            (i64::MIN, 999_999_999),
        ] {
            let t = system_time_from_time(secs, nanos);
            assert_eq!(time_from_system_time(&t), (secs, nanos), "{secs}.{nanos}");
        }
    }

    #[test]
    fn test_time_from_system_time_negative() {
        let before_epoch = UNIX_EPOCH - Duration::new(1, 200_000_000);
        let (secs, nanos) = time_from_system_time(&before_epoch);
        assert_eq!((-2, 800_000_000), (secs, nanos));
    }

    #[test]
    fn test_time_from_system_time_i64_min_boundary() {
        // timespec { tv_sec: i64::MIN, tv_nsec: 0 }
        let min_system_time = UNIX_EPOCH - Duration::new(i64::MAX as u64 + 1, 0);
        let (secs, nanos) = time_from_system_time(&min_system_time);
        assert_eq!((i64::MIN, 0), (secs, nanos));

        let min_system_time_plus_eps = UNIX_EPOCH - Duration::new(i64::MAX as u64, 800_000_000);
        let (secs, nanos) = time_from_system_time(&min_system_time_plus_eps);
        assert_eq!((i64::MIN, 200_000_000), (secs, nanos));

        let min_system_time_plus_one = UNIX_EPOCH - Duration::new(i64::MAX as u64, 0);
        let (secs, nanos) = time_from_system_time(&min_system_time_plus_one);
        assert_eq!((i64::MIN + 1, 0), (secs, nanos));
    }
}
