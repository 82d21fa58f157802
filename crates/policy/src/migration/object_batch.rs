//! How much a drain into an object tier moves at once, and in what windows.
//!
//! A drain of a block tier moves the excess over its threshold — on a busy
//! pool a few MiB per 100 ms pass. Into a block tier that is fine; into an
//! object tier each window of moves is one upload, and every contiguous run
//! of a window becomes one object (a *part*), so small excesses made objects
//! of 2–3 MiB (measured: ~370 PUTs per GiB where 16 MiB objects need 64).
//! Object stores charge and limit per request and want objects of many MiB.
//!
//! So a drain into an object tier moves at least one *object batch*: four
//! segments (a segment bounds one part), but never more than 1/8 of the
//! source tier (a small test tier must not be emptied for the sake of object
//! size), and no less than the excess itself. Its moves are made durable in
//! windows of one batch, at most [`MAX_WINDOW_BYTES`]: one upload of up to
//! four full-segment parts. The extra data that moves is the next coldest
//! data of the source tier, which would be next to go anyway: the threshold
//! works as a low-water mark a batch below the high-water mark.
//!
//! Windows end on segment ends ([`ObjectWindow`]): a window that stopped
//! mid-segment would leave the rest of that segment to the next window's
//! upload, as a second part.

/// Segments one object batch spans.
pub(super) const BATCH_SEGMENTS: u64 = 4;

/// The largest window of moves made durable by one sync (bytes).
pub(super) const MAX_WINDOW_BYTES: u64 = 64 << 20;

/// Bytes a drain of a tier of `source_capacity` bytes into an object tier of
/// `segment_bytes` segments moves, when `excess` bytes are over its
/// threshold: at least `excess`, at least one batch (four segments, capped
/// at 1/8 of the source tier).
pub fn object_drain_goal(excess: u64, source_capacity: u64, segment_bytes: u64) -> u64 {
    if excess == 0 {
        return 0;
    }
    let batch = segment_bytes
        .saturating_mul(BATCH_SEGMENTS)
        .min(source_capacity / 8);
    excess.max(batch)
}

/// The window (bytes moved between two syncs) of a drain of `goal` bytes
/// into an object tier of `segment_bytes` segments: the whole goal up to
/// [`MAX_WINDOW_BYTES`], and at least one segment, so that each upload is
/// as few, as large parts as the data allows.
pub fn object_drain_window(goal: u64, segment_bytes: u64) -> u64 {
    goal.min(MAX_WINDOW_BYTES)
        .max(segment_bytes.min(MAX_WINDOW_BYTES))
}

/// Where a window into an object tier stands: blocks pending, its size,
/// the tier's segment, and where in its segment the tier allocates next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectWindow {
    /// Blocks copied and not yet synced.
    pub pending: u64,
    /// Blocks after which the window closes (at the next segment end).
    pub window: u64,
    /// Blocks per segment (the tier's extent).
    pub segment: u64,
    /// Offset in its segment of the tier's next allocation (0: a segment
    /// start).
    pub open_offset: u64,
}

impl ObjectWindow {
    /// Blocks the next move of the window may copy at most: up to the end
    /// of the first segment at which the window is at least `window` long.
    /// Every part of an upload is a run inside one segment, so a window
    /// that ends where a segment ends leaves no partial segment for the
    /// next window to upload as a second, smaller part of it.
    pub fn next_move_limit(&self) -> u64 {
        let seg = self.segment.max(1);
        let gap = seg - self.open_offset % seg;
        let short = self.window.saturating_sub(self.pending);
        if short <= gap {
            gap
        } else {
            gap + (short - gap).div_ceil(seg) * seg
        }
    }

    /// Whether the window is due for its sync: at least `window` long and
    /// ending at a segment end, or a segment past `window` (allocations of
    /// other writers to the tier can move the segment ends).
    pub fn due(&self) -> bool {
        self.pending >= self.window
            && (self.open_offset == 0 || self.pending >= self.window + self.segment)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(pending: u64, window: u64, open_offset: u64) -> ObjectWindow {
        ObjectWindow {
            pending,
            window,
            segment: 16,
            open_offset,
        }
    }

    #[test]
    fn a_window_is_cut_at_the_first_segment_end_past_its_size() {
        // Fresh window at a segment start: exactly the window (64 = 4 segments).
        assert_eq!(w(0, 64, 0).next_move_limit(), 64);
        // Starting 5 blocks into a segment: to the end of the segment that
        // makes it at least 64 long.
        assert_eq!(w(0, 64, 5).next_move_limit(), 11 + 64);
        // Half full: the rest, rounded up to a segment end.
        assert_eq!(w(40, 64, 8).next_move_limit(), 8 + 16);
        // Already long enough but mid-segment: only to the segment end.
        assert_eq!(w(70, 64, 6).next_move_limit(), 10);
    }

    #[test]
    fn a_window_is_due_at_a_segment_end_or_a_segment_past_its_size() {
        assert!(w(64, 64, 0).due());
        assert!(!w(64, 64, 3).due());
        assert!(!w(60, 64, 0).due());
        assert!(w(80, 64, 3).due());
    }

    #[test]
    fn moves_cut_at_the_limits_end_every_window_on_a_segment_end() {
        // Simulate moves of random sizes, each cut at the limit; every sync
        // happens at a segment end.
        let mut seed = 12345u64;
        let (segment, window) = (16u64, 64u64);
        let mut offset = 7u64; // the tier starts mid-segment
        let mut pending = 0u64;
        let mut syncs = 0;
        for _ in 0..2000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let mut want = 1 + (seed >> 33) % 40;
            while want > 0 {
                let st = ObjectWindow {
                    pending,
                    window,
                    segment,
                    open_offset: offset,
                };
                let take = want.min(st.next_move_limit());
                pending += take;
                offset = (offset + take) % segment;
                want -= take;
                let st = ObjectWindow {
                    pending,
                    window,
                    segment,
                    open_offset: offset,
                };
                if st.due() {
                    assert_eq!(offset, 0, "synced mid-segment");
                    assert!(pending >= window && pending < window + segment + 16);
                    pending = 0;
                    syncs += 1;
                }
            }
        }
        assert!(syncs > 100);
    }

    const SEG: u64 = 16 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn a_small_excess_moves_a_whole_batch_of_four_segments() {
        assert_eq!(object_drain_goal(3 << 20, 64 * GIB, SEG), 4 * SEG);
    }

    #[test]
    fn a_large_excess_moves_the_excess() {
        assert_eq!(object_drain_goal(GIB, 64 * GIB, SEG), GIB);
    }

    #[test]
    fn no_excess_moves_nothing() {
        assert_eq!(object_drain_goal(0, 64 * GIB, SEG), 0);
    }

    #[test]
    fn a_small_source_tier_gives_at_most_an_eighth_of_itself() {
        // 64 MiB SSD: a batch is capped at 8 MiB, the excess still moves.
        assert_eq!(object_drain_goal(1 << 20, 64 << 20, SEG), 8 << 20);
        assert_eq!(object_drain_goal(10 << 20, 64 << 20, SEG), 10 << 20);
    }

    #[test]
    fn the_window_is_the_goal_up_to_sixty_four_mib_and_at_least_a_segment() {
        assert_eq!(object_drain_window(4 * SEG, SEG), 64 << 20);
        assert_eq!(object_drain_window(GIB, SEG), MAX_WINDOW_BYTES);
        assert_eq!(object_drain_window(1 << 20, SEG), SEG);
        assert_eq!(object_drain_window(1 << 20, 1 << 30), MAX_WINDOW_BYTES);
    }
}
