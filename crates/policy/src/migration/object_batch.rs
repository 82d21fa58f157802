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

#[cfg(test)]
mod tests {
    use super::*;

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
