//! The wrappers every mounted tier's media goes through
//! (`Closable<PerWriterSync<_>>`, in `Arc`s; core `BlockTier::new`) pass
//! each optional `BlockMedia` method on to the object tier. A method a
//! wrapper does not forward falls back to the trait's default without a
//! word (no seal, no sweep, no read-ahead), so each one is checked here
//! through the whole chain.

use super::*;
use crate::{Closable, PerWriterSync};

#[test]
fn every_optional_method_reaches_the_object_tier_through_the_mounted_wrappers() {
    let store = new_store();
    let object =
        Arc::new(ObjectMedia::create_in(bucket(&store), UUID, 64 * BLOCK_SIZE, 8).unwrap());
    let inner: Arc<dyn BlockMedia> = object.clone();
    let m: Arc<dyn BlockMedia> = Arc::new(Closable::new(PerWriterSync::new(inner)));

    assert!(m.describe().starts_with("s3 "), "{}", m.describe());
    assert!(m.object_tier_stats().is_some(), "object_tier_stats");
    m.set_network(&NetworkParams::default()).unwrap();

    // seal / sync_sealed: a real ticket, and the upload it names.
    m.write_blocks(0, &blocks(0, 8, 1)).unwrap();
    let ticket = m.seal();
    assert_ne!(ticket, 0, "seal fell back to the default");
    m.write_blocks(8, &blocks(8, 8, 2)).unwrap();
    m.sync_sealed(ticket).unwrap();
    assert_eq!(
        object.object_stats().parts,
        1,
        "only the sealed blocks uploaded"
    );
    assert_eq!(object.object_stats().pending_bytes, 8 * BLOCK_SIZE);
    m.sync().unwrap();
    assert_eq!(
        object.object_parts().map(|p| p.len()),
        Some(2),
        "object_parts"
    );
    assert_eq!(m.object_parts().map(|p| p.len()), Some(2), "object_parts");

    // read_ahead: a GET in the background.
    m.read_ahead(0, 16);
    let start = std::time::Instant::now();
    while object.object_stats().requests.read_ahead_gets == 0 {
        assert!(
            start.elapsed().as_secs() < 10,
            "read_ahead never reached the tier"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(read(&*m, 0, 16)[..8 * BLOCK], blocks(0, 8, 1)[..]);

    // unreferenced / retain_only: the sweeps see the tier's parts.
    let keep_first = [(0u64, 8u64)];
    let would = m.unreferenced(&keep_first).expect("unreferenced");
    assert_eq!(would.parts, 1);
    // trim and delete_dead: the second part dies and goes.
    m.trim(8, 8).unwrap();
    m.delete_dead().unwrap();
    assert_eq!(
        object.object_stats().parts,
        1,
        "trim or delete_dead stopped at a wrapper"
    );
    let swept = m.retain_only(&keep_first).unwrap();
    assert!(swept.is_some(), "retain_only");
    assert_eq!(object.object_stats().parts, 1);
}
