//! Making writes durable and deleting what is dead: `sync` uploads the
//! pending blocks as new parts that enter the index only when all landed
//! (rules 1 and 2 of the module docs), then deletes dead parts; `reclaim`,
//! `retain` and `orphans` sweep parts no block reads from (rule 3).

use std::io;
use std::sync::Arc;

use object_store::PutPayload;

use super::buffer::BlockBuffer;
use super::{ObjectMedia, Orphan, PartKey, SweepReport};
use crate::block::BLOCK_SIZE;

impl ObjectMedia {
    /// The body of `BlockMedia::sync`: uploads the pending and sealed
    /// blocks, then deletes dead parts (a failed delete does not fail the
    /// sync: it is retried later).
    pub(super) fn sync_pending(&self) -> io::Result<()> {
        self.sync_taking(|st| {
            let mut all = std::mem::take(&mut st.pending);
            let sealed = std::mem::take(&mut st.sealed);
            all.fill_gaps(&sealed, &[]);
            all
        })
    }

    /// The body of `BlockMedia::sync_sealed`: uploads the sealed blocks
    /// only.
    pub(super) fn sync_sealed_only(&self) -> io::Result<()> {
        self.sync_taking(|st| std::mem::take(&mut st.sealed))
    }

    /// The body of `BlockMedia::seal`: the pending blocks join the sealed
    /// ones (newer over older).
    pub(super) fn seal_pending(&self) {
        let mut st = self.state.lock();
        let mut newer = std::mem::take(&mut st.pending);
        let older = std::mem::take(&mut st.sealed);
        newer.fill_gaps(&older, &[]);
        st.sealed = newer;
    }

    /// Uploads what `take` hands over (rule 2 of the module docs), then
    /// deletes dead parts.
    fn sync_taking(&self, take: impl FnOnce(&mut super::State) -> BlockBuffer) -> io::Result<()> {
        let _g = self.sync_lock.lock();
        let batch = {
            let mut st = self.state.lock();
            let b = take(&mut st);
            if b.is_empty() {
                None
            } else {
                let b = Arc::new(b);
                st.inflight = Some(Arc::clone(&b));
                st.trims_in_flight.clear();
                Some(b)
            }
        };
        if let Some(batch) = batch {
            let result = self.upload(&batch);
            let mut st = self.state.lock();
            st.inflight = None;
            let trims = std::mem::take(&mut st.trims_in_flight);
            match result {
                Ok(()) => {
                    for (b, n) in trims {
                        st.index.trim(b, n);
                    }
                }
                Err(e) => {
                    // Keep the data for the next sync, except blocks written
                    // again (sealed or pending since) or trimmed meanwhile.
                    // (`fill_gaps` keeps what `sealed` holds, the newer.)
                    let mut restored = std::mem::take(&mut st.sealed);
                    restored.fill_gaps(&batch, &trims);
                    st.sealed = restored;
                    return Err(e);
                }
            }
        }
        // Failures stay queued for the next sync or reclaim.
        let _ = self.delete_dead();
        self.stats.record_sync();
        Ok(())
    }

    /// Deletes every dead part (and stray object); fails if any delete
    /// failed (those stay queued).
    pub fn reclaim(&self) -> io::Result<SweepReport> {
        let _g = self.sync_lock.lock();
        self.delete_dead()
    }

    /// Given every block run `(first block, blocks)` the pool's committed
    /// log references, treats every other block as trimmed and deletes every
    /// part left without a used block — the orphans of uploads whose commit
    /// never happened — together with any other dead part. Call it once
    /// recovery knows the committed runs, before new writes (at mount).
    pub fn retain(&self, used: &[(u64, u64)]) -> io::Result<SweepReport> {
        let _g = self.sync_lock.lock();
        self.state.lock().index.retain(used);
        self.delete_dead()
    }

    /// The parts [`retain`](Self::retain) would delete as orphans, without
    /// deleting anything (for fsck).
    pub fn orphans(&self, used: &[(u64, u64)]) -> Vec<Orphan> {
        let st = self.state.lock();
        st.index
            .orphans(used)
            .into_iter()
            .map(|p| Orphan {
                key: self.key(&p.key),
                block: p.start,
                blocks: p.count(),
            })
            .collect()
    }

    /// Deletes the dead parts and strays; the caller holds `sync_lock`.
    fn delete_dead(&self) -> io::Result<SweepReport> {
        let (dead, stray) = {
            let st = self.state.lock();
            (st.index.dead_parts(), st.stray.clone())
        };
        if dead.is_empty() && stray.is_empty() {
            return Ok(SweepReport::default());
        }
        let mut keys: Vec<String> = dead.iter().map(|p| self.key(&p.key)).collect();
        keys.extend(stray.iter().cloned());
        let total = keys.len();
        let mut failed = self.bucket.delete_all(keys);
        let failed_keys: std::collections::HashSet<String> =
            failed.iter().map(|(k, _)| k.clone()).collect();
        let mut report = SweepReport::default();
        {
            let mut st = self.state.lock();
            for p in &dead {
                if !failed_keys.contains(&self.key(&p.key)) && st.index.forget(p.key.seq) {
                    st.uploaded.remove(&p.key.seq);
                    report.parts += 1;
                    report.bytes += p.count() * BLOCK_SIZE;
                }
            }
            st.stray
                .retain(|k| failed_keys.contains(k) || !stray.contains(k));
        }
        if failed.is_empty() {
            return Ok(report);
        }
        let (_, e) = failed.swap_remove(0);
        Err(io::Error::new(
            e.kind(),
            format!(
                "{} of {total} deletes failed (kept for the next try), first: {e}",
                failed_keys.len()
            ),
        ))
    }

    /// Uploads `batch`; on success the parts are visible in the index.
    /// Each body is the batch's own buffers, sliced (no copy).
    fn upload(&self, batch: &Arc<BlockBuffer>) -> io::Result<()> {
        // Runs of consecutive blocks inside one segment: one part each.
        let runs = batch.segment_runs(self.segment_blocks);
        let parts: Vec<(PartKey, u64)> = {
            let mut st = self.state.lock();
            runs.iter()
                .map(|&(start, n, _)| {
                    let seq = st.next_seq;
                    st.next_seq += 1;
                    let key = PartKey {
                        seq,
                        segment: start / self.segment_blocks,
                        first: (start % self.segment_blocks) as u32,
                        count: n as u32,
                    };
                    (key, start)
                })
                .collect()
        };
        let objects: Vec<(String, PutPayload)> = parts
            .iter()
            .zip(runs)
            .map(|((k, _), (_, _, pieces))| (self.key(k), PutPayload::from_iter(pieces)))
            .collect();
        let keys: Vec<String> = objects.iter().map(|(k, _)| k.clone()).collect();
        let results = self.bucket.put_all(objects);
        let failures = results.iter().filter(|r| r.is_err()).count();
        if let Some(Err(first)) = results.into_iter().find(|r| r.is_err()) {
            // Nothing becomes visible; what landed is deleted (or kept as
            // stray for the next try).
            let failed = self.bucket.delete_all(keys);
            self.state
                .lock()
                .stray
                .extend(failed.into_iter().map(|(k, _)| k));
            return Err(io::Error::new(
                first.kind(),
                format!(
                    "s3 sync of {} blocks in {} parts to {}: {failures} PUTs failed, \
                     nothing made durable; first: {first}",
                    batch.blocks(),
                    parts.len(),
                    self.bucket.url()
                ),
            ));
        }
        let now = unix_now();
        let mut st = self.state.lock();
        for (k, start) in parts {
            st.uploaded.insert(k.seq, now);
            if let Err(why) = st.index.insert(k, start) {
                // Cannot happen (numbers only grow); keep the object as an
                // orphan rather than panic.
                return Err(io::Error::other(format!(
                    "s3 {}: part {k} not indexed: {why}",
                    self.bucket.url()
                )));
            }
        }
        Ok(())
    }
}

/// Seconds since the epoch (0 before it).
pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
