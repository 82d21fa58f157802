//! [`CrashStore`]: an in-memory object store that records every PUT and
//! DELETE on a shared [`EventClock`], so crash tests can build the store a
//! crash at any moment would leave — the object tier's
//! [`CrashBlock`](crate::CrashBlock).
//!
//! # Model
//! A request takes two ticks of the clock: one when it is issued and one
//! when it is answered. A crash at clock time `t` leaves
//! - every object whose PUT was answered (with success) by `t`, minus the
//!   ones whose DELETE was answered by `t`;
//! - for each request *in flight* at `t` (issued, not yet answered — or
//!   never answered because it failed), what [`ObjectLoss`] chooses: an S3
//!   PUT is atomic, so an in-flight upload is either absent or whole (the
//!   server stored it but the answer was lost); an in-flight DELETE is
//!   either done or not.
//!
//! Requests not issued by `t` left no trace. GETs and LISTs do not tick.
//! Share the clock with [`CrashMedia`](crate::CrashMedia) (PM) and
//! [`CrashBlock`](crate::CrashBlock) (block tiers) so that one moment is a
//! crash for all media at once ([`crate::replay`]).
//!
//! The store traces from its creation; [`CrashStore::store_at_time`] gives
//! a fresh in-memory store holding the image, to open the tier again on.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, MultipartUpload, ObjectMeta, ObjectStoreExt, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, Result,
};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::replay::EventClock;

use super::wrapper::wrapping_store;

/// What a crash image keeps of the requests in flight at the crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectLoss {
    /// No in-flight PUT landed, no in-flight DELETE happened.
    InFlightLost,
    /// Every in-flight request reached the server (its answer was lost).
    InFlightDone,
    /// Each in-flight request independently landed or not, chosen by an RNG
    /// seeded with the value.
    Random(u64),
}

/// One recorded request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectEvent {
    /// A PUT of `len` bytes at `key`.
    Put { key: String, len: u64 },
    /// A DELETE of `key`.
    Delete { key: String },
}

#[derive(Clone, Debug)]
enum Op {
    Put(String, Bytes),
    Delete(String),
}

#[derive(Clone, Debug)]
struct Timed {
    op: Op,
    issued: u64,
    /// When it was answered with success; `None` while in flight (or failed).
    answered: Option<u64>,
}

#[derive(Debug)]
struct Log {
    clock: Arc<EventClock>,
    ops: Vec<Timed>,
}

impl Log {
    fn issue(&mut self, op: Op) -> usize {
        let issued = self.clock.tick();
        self.ops.push(Timed {
            op,
            issued,
            answered: None,
        });
        self.ops.len() - 1
    }

    fn answer(&mut self, i: usize) {
        self.ops[i].answered = Some(self.clock.tick());
    }

    /// Answers the oldest unanswered DELETE of `key`.
    fn answer_delete(&mut self, key: &str) {
        let i = self
            .ops
            .iter()
            .position(|t| t.answered.is_none() && matches!(&t.op, Op::Delete(k) if k == key));
        if let Some(i) = i {
            self.answer(i);
        }
    }
}

/// An in-memory object store with a crash model; see the module docs.
#[derive(Debug)]
pub struct CrashStore {
    inner: InMemory,
    log: Arc<Mutex<Log>>,
}

impl fmt::Display for CrashStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CrashStore({})", self.inner)
    }
}

impl CrashStore {
    /// An empty store whose requests tick `clock`.
    pub fn timed(clock: Arc<EventClock>) -> CrashStore {
        CrashStore {
            inner: InMemory::new(),
            log: Arc::new(Mutex::new(Log {
                clock,
                ops: Vec::new(),
            })),
        }
    }

    /// The requests so far, in the order they were issued.
    pub fn events(&self) -> Vec<ObjectEvent> {
        self.log
            .lock()
            .ops
            .iter()
            .map(|t| match &t.op {
                Op::Put(key, data) => ObjectEvent::Put {
                    key: key.clone(),
                    len: data.len() as u64,
                },
                Op::Delete(key) => ObjectEvent::Delete { key: key.clone() },
            })
            .collect()
    }

    /// Requests issued but not answered (with success) by clock time `t`.
    pub fn in_flight_at(&self, t: u64) -> usize {
        self.log
            .lock()
            .ops
            .iter()
            .filter(|o| o.issued <= t && o.answered.map_or(true, |a| a > t))
            .count()
    }

    /// The objects (key → content) a crash at clock time `t` leaves.
    pub fn objects_at_time(&self, t: u64, loss: ObjectLoss) -> BTreeMap<String, Bytes> {
        let log = self.log.lock();
        let mut rng = match loss {
            ObjectLoss::Random(seed) => Some(StdRng::seed_from_u64(seed)),
            _ => None,
        };
        let mut objects = BTreeMap::new();
        for o in log.ops.iter().filter(|o| o.issued <= t) {
            let done = match o.answered {
                Some(a) if a <= t => true,
                _ => match (&mut rng, loss) {
                    (Some(rng), _) => rng.gen_bool(0.5),
                    (None, ObjectLoss::InFlightDone) => true,
                    (None, _) => false,
                },
            };
            if !done {
                continue;
            }
            match &o.op {
                Op::Put(k, data) => {
                    objects.insert(k.clone(), data.clone());
                }
                Op::Delete(k) => {
                    objects.remove(k);
                }
            }
        }
        objects
    }

    /// A new in-memory store holding the objects a crash at clock time `t`
    /// leaves ([`objects_at_time`](Self::objects_at_time)).
    pub fn store_at_time(&self, t: u64, loss: ObjectLoss) -> Arc<InMemory> {
        let store = Arc::new(InMemory::new());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime");
        for (k, data) in self.objects_at_time(t, loss) {
            rt.block_on(store.put(&Path::from(k), PutPayload::from(data)))
                .expect("a put into memory");
        }
        store
    }
}

wrapping_store!(CrashStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let data = Bytes::from(payload.clone());
        let i = self
            .log
            .lock()
            .issue(Op::Put(location.as_ref().to_string(), data));
        // Let the other requests of the batch be issued first: several
        // uploads in flight at once, as on a real store.
        tokio::task::yield_now().await;
        let r = self.inner.put_opts(location, payload, opts).await;
        if r.is_ok() {
            self.log.lock().answer(i);
        }
        r
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        _opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        Err(object_store::Error::NotImplemented {
            operation: format!("multipart upload to {location} in a CrashStore"),
            implementer: "CrashStore".into(),
        })
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let (issue, answer) = (Arc::clone(&self.log), Arc::clone(&self.log));
        let input = locations
            .map(move |p| {
                if let Ok(p) = &p {
                    issue.lock().issue(Op::Delete(p.as_ref().to_string()));
                }
                p
            })
            .boxed();
        self.inner
            .delete_stream(input)
            .map(move |r| {
                if let Ok(p) = &r {
                    answer.lock().answer_delete(p.as_ref());
                }
                r
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Bucket;

    #[test]
    fn a_crash_keeps_answered_puts_and_deletes_and_chooses_for_those_in_flight() {
        let clock = Arc::new(EventClock::new());
        let store = Arc::new(CrashStore::timed(clock.clone()));
        let b = Bucket::with_store(store.clone(), "memory://crash", "p").unwrap();
        let t0 = clock.now();
        assert!(b.put_all(vec![("p/a".into(), Bytes::from_static(b"aa").into())])[0].is_ok());
        let t_a = clock.now();
        assert!(b.put_all(vec![("p/b".into(), Bytes::from_static(b"bb").into())])[0].is_ok());
        assert!(b.delete_all(vec!["p/a".into()]).is_empty());
        let end = clock.now();
        assert_eq!(end - t0, 6, "two ticks per request");
        let keys =
            |t, loss| -> Vec<String> { store.objects_at_time(t, loss).into_keys().collect() };
        assert!(keys(t0, ObjectLoss::InFlightDone).is_empty());
        // The PUT of a issued, not answered: absent or whole.
        assert!(keys(t0 + 1, ObjectLoss::InFlightLost).is_empty());
        assert_eq!(keys(t0 + 1, ObjectLoss::InFlightDone), ["p/a"]);
        assert_eq!(store.in_flight_at(t0 + 1), 1);
        assert_eq!(keys(t_a, ObjectLoss::InFlightLost), ["p/a"]);
        // The DELETE of a in flight: done or not.
        assert_eq!(keys(end - 1, ObjectLoss::InFlightLost), ["p/a", "p/b"]);
        assert_eq!(keys(end - 1, ObjectLoss::InFlightDone), ["p/b"]);
        let seen: std::collections::BTreeSet<usize> = (0..32)
            .map(|s| keys(end - 1, ObjectLoss::Random(s)).len())
            .collect();
        assert_eq!(seen, [1, 2].into_iter().collect());
        assert_eq!(keys(end, ObjectLoss::InFlightLost), ["p/b"]);
        // The image as a store of its own.
        let img = Bucket::with_store(
            store.store_at_time(end, ObjectLoss::InFlightLost),
            "memory://img",
            "p",
        )
        .unwrap();
        assert_eq!(img.get("p/b").unwrap().unwrap(), Bytes::from_static(b"bb"));
        assert!(img.get("p/a").unwrap().is_none());
        assert_eq!(store.events().len(), 3);
    }
}
