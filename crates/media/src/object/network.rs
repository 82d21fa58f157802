//! How object-tier requests are retried and how long one may take:
//! [`NetworkParams`] (the `s3_*` settings) and object_store's retry
//! configuration made from them.

use std::time::Duration;

/// The longest wait between two tries of a request (object_store's default
/// cap), unless the retry budget is shorter.
pub const MAX_BACKOFF: Duration = Duration::from_secs(15);

/// object_store draws each wait at random between the first wait and
/// `BACKOFF_BASE` times the previous one ("decorrelated jitter"). Its default
/// base, 2, makes waits grow by only half the first wait per retry on
/// average (10 retries from 100 ms span about 3 s, so a server restart of a
/// few seconds failed requests whatever the time budget); with 4 they
/// double on average, and 10 retries span about a minute of an outage.
pub const BACKOFF_BASE: f64 = 4.0;

/// How failed requests are retried and how long one may take: the `s3_*`
/// settings (`s3_retries`, `s3_timeout_ns`, `s3_request_timeout_ns`,
/// `s3_backoff_ns`; docs/design.md §5n "Network faults").
///
/// A request is tried once and then retried — after a 5xx or 429 answer, a
/// connection refused or reset, or a time-out of an idempotent request
/// (every request of the object tier is: parts are PUT under keys never
/// used before) — up to `retries` times, while less than `retry_timeout`
/// has passed since its first try. Between tries it waits a random time
/// from `backoff` up to [`BACKOFF_BASE`] times the previous wait (twice it
/// on average), at most [`max_backoff`](Self::max_backoff). One try may
/// take `request_timeout`
/// (connecting, sending, and the whole answer). So a request that keeps
/// failing fails after at most [`bound`](Self::bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetworkParams {
    /// Retries of a failed request (0: none).
    pub retries: usize,
    /// No retry starts later than this after the first try.
    pub retry_timeout: Duration,
    /// Time limit of one try (connect, request and the whole answer).
    pub request_timeout: Duration,
    /// The first wait before a retry.
    pub backoff: Duration,
}

impl Default for NetworkParams {
    /// The settings' defaults: up to 100 retries within 180 s (the time
    /// ends them, not the count), 30 s a try, the first wait 100 ms.
    fn default() -> NetworkParams {
        NetworkParams {
            retries: 100,
            retry_timeout: Duration::from_secs(180),
            request_timeout: Duration::from_secs(30),
            backoff: Duration::from_millis(100),
        }
    }
}

impl NetworkParams {
    /// The longest wait between two tries: [`MAX_BACKOFF`], or the retry
    /// budget if shorter (never below the first wait).
    pub fn max_backoff(&self) -> Duration {
        MAX_BACKOFF.min(self.retry_timeout).max(self.backoff)
    }

    /// The longest a failing request takes before it fails: the last retry
    /// starts before `retry_timeout` plus one wait has passed, and takes at
    /// most `request_timeout`.
    pub fn bound(&self) -> Duration {
        if self.retries == 0 {
            return self.request_timeout;
        }
        self.retry_timeout + self.max_backoff() + self.request_timeout
    }

    /// object_store's retry configuration for these parameters.
    pub(crate) fn retry_config(&self) -> object_store::RetryConfig {
        object_store::RetryConfig {
            max_retries: self.retries,
            retry_timeout: self.retry_timeout,
            backoff: object_store::BackoffConfig {
                init_backoff: self.backoff,
                max_backoff: self.max_backoff(),
                base: BACKOFF_BASE,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_bounds_follow_the_budget_the_wait_cap_and_one_try() {
        let d = NetworkParams::default();
        assert_eq!(d.max_backoff(), MAX_BACKOFF);
        assert_eq!(d.bound(), Duration::from_secs(180 + 15 + 30));
        let short = NetworkParams {
            retries: 100,
            retry_timeout: Duration::from_secs(4),
            request_timeout: Duration::from_secs(2),
            backoff: Duration::from_millis(50),
        };
        assert_eq!(short.max_backoff(), Duration::from_secs(4));
        assert_eq!(short.bound(), Duration::from_secs(4 + 4 + 2));
        let none = NetworkParams {
            retries: 0,
            ..short
        };
        assert_eq!(none.bound(), Duration::from_secs(2), "one try only");
        let r = short.retry_config();
        assert_eq!((r.max_retries, r.retry_timeout), (100, short.retry_timeout));
        assert_eq!(r.backoff.init_backoff, Duration::from_millis(50));
        assert_eq!(r.backoff.max_backoff, Duration::from_secs(4));
        assert_eq!(r.backoff.base, BACKOFF_BASE);
    }
}
