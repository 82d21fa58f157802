//! [`FaultStore`]: wraps an object store and makes PUTs, GETs, DELETEs or
//! LISTs fail after a countdown — the object tier's `FaultBlock`.
//!
//! A PUT can fail in three ways ([`PutFault`]): refused before anything is
//! stored; stored, but the answer lost on the way back (the object exists
//! although the client saw an error — what a timeout after a successful
//! upload looks like); or answered without an ETag. Each kind of request has
//! its own countdown: `fail_puts_after(n, how)` lets the next `n` PUTs through
//! and fails every later one until [`FaultStore::heal`]. Injected errors are
//! `object_store::Error::Generic` from store `"fault"`, so they look like
//! any transport error to the code above. [`FaultStore::injected`] counts
//! them.
//!
//! [`FaultStore::hold_puts`] makes PUTs wait (a slow upload) until
//! [`FaultStore::release_puts`], so a test can act while a `sync` is in
//! flight; [`FaultStore::puts_waiting`] tells when one is.
//! [`FaultStore::hold_gets`] does the same for GETs (a store that does not
//! answer reads), with [`FaultStore::gets_waiting`].

use crate::countdown::Countdown;
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, Result,
};
use parking_lot::Mutex;

use super::wrapper::wrapping_store;

/// How an injected PUT failure looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutFault {
    /// Fails before the object is stored.
    Refuse,
    /// Stores the object, then fails (the answer is lost).
    LoseAnswer,
    /// Stores the object and answers success without an ETag.
    NoEtag,
}

/// Failures injected so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InjectedObjectFaults {
    /// Failed PUTs.
    pub puts: u64,
    /// Failed GETs.
    pub gets: u64,
    /// Failed DELETEs (per object).
    pub deletes: u64,
    /// Failed LISTs.
    pub lists: u64,
}

#[derive(Debug, Default)]
struct State {
    puts: Countdown,
    put_fault: Option<PutFault>,
    gets: Countdown,
    deletes: Countdown,
    lists: Countdown,
    injected: InjectedObjectFaults,
}

/// An object store whose requests fail after a countdown; see the module
/// docs.
#[derive(Debug)]
pub struct FaultStore {
    inner: Arc<dyn ObjectStore>,
    state: Arc<Mutex<State>>,
    /// True while PUTs are held.
    hold: tokio::sync::watch::Sender<bool>,
    /// PUTs waiting now.
    waiting: AtomicU64,
    /// True while GETs are held.
    hold_get: tokio::sync::watch::Sender<bool>,
    /// GETs waiting now.
    gets_waiting: AtomicU64,
}

fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "fault",
        source: format!("injected {what} failure").into(),
    }
}

impl FaultStore {
    /// Wraps `inner` with no failures armed.
    pub fn new(inner: Arc<dyn ObjectStore>) -> FaultStore {
        FaultStore {
            inner,
            state: Arc::new(Mutex::new(State::default())),
            hold: tokio::sync::watch::Sender::new(false),
            waiting: AtomicU64::new(0),
            hold_get: tokio::sync::watch::Sender::new(false),
            gets_waiting: AtomicU64::new(0),
        }
    }

    /// PUTs wait from now on until [`release_puts`](Self::release_puts).
    pub fn hold_puts(&self) {
        self.hold.send_replace(true);
    }

    /// Lets held and later PUTs go.
    pub fn release_puts(&self) {
        self.hold.send_replace(false);
    }

    /// PUTs waiting now.
    pub fn puts_waiting(&self) -> u64 {
        self.waiting.load(Ordering::SeqCst)
    }

    /// GETs wait from now on until [`release_gets`](Self::release_gets).
    pub fn hold_gets(&self) {
        self.hold_get.send_replace(true);
    }

    /// Lets held and later GETs go.
    pub fn release_gets(&self) {
        self.hold_get.send_replace(false);
    }

    /// GETs waiting now.
    pub fn gets_waiting(&self) -> u64 {
        self.gets_waiting.load(Ordering::SeqCst)
    }

    /// Waits while PUTs are held.
    async fn wait_if_held(&self) {
        held(&self.hold, &self.waiting).await;
    }

    /// Waits while GETs are held.
    async fn wait_if_gets_held(&self) {
        held(&self.hold_get, &self.gets_waiting).await;
    }

    /// The next `n` PUTs succeed; every later one fails as `how` says until
    /// [`heal`](Self::heal).
    pub fn fail_puts_after(&self, n: u64, how: PutFault) {
        let mut s = self.state.lock();
        s.puts = Countdown::After(n);
        s.put_fault = Some(how);
    }

    /// The next `n` GETs succeed, later ones fail.
    pub fn fail_gets_after(&self, n: u64) {
        self.state.lock().gets = Countdown::After(n);
    }

    /// The next `n` object deletes succeed, later ones fail.
    pub fn fail_deletes_after(&self, n: u64) {
        self.state.lock().deletes = Countdown::After(n);
    }

    /// The next `n` LISTs succeed, later ones fail.
    pub fn fail_lists_after(&self, n: u64) {
        self.state.lock().lists = Countdown::After(n);
    }

    /// Disarms every countdown.
    pub fn heal(&self) {
        let mut s = self.state.lock();
        let injected = s.injected;
        *s = State {
            injected,
            ..State::default()
        };
    }

    /// Failures injected so far.
    pub fn injected(&self) -> InjectedObjectFaults {
        self.state.lock().injected
    }

    /// Whether this PUT fails, and how.
    fn put_fails(&self) -> Option<PutFault> {
        let mut s = self.state.lock();
        if s.puts.tick() {
            s.injected.puts += 1;
            s.put_fault
        } else {
            None
        }
    }

    fn get_fails(&self) -> bool {
        let mut s = self.state.lock();
        let f = s.gets.tick();
        s.injected.gets += u64::from(f);
        f
    }
}

/// Waits while `hold` says so, counted in `waiting` meanwhile.
async fn held(hold: &tokio::sync::watch::Sender<bool>, waiting: &AtomicU64) {
    let mut rx = hold.subscribe();
    if *rx.borrow() {
        waiting.fetch_add(1, Ordering::SeqCst);
        // Err only if the sender is gone, and it lives in the store.
        let _ = rx.wait_for(|held| !*held).await;
        waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl fmt::Display for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

wrapping_store!(FaultStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.wait_if_held().await;
        match self.put_fails() {
            None => self.inner.put_opts(location, payload, opts).await,
            Some(PutFault::Refuse) => Err(injected("PUT")),
            Some(PutFault::LoseAnswer) => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(injected("PUT answer"))
            }
            Some(PutFault::NoEtag) => {
                let mut r = self.inner.put_opts(location, payload, opts).await?;
                r.e_tag = None;
                Ok(r)
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        if self.put_fails().is_some() {
            return Err(injected("multipart PUT"));
        }
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.wait_if_gets_held().await;
        if self.get_fails() {
            return Err(injected("GET"));
        }
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.wait_if_gets_held().await;
        if self.get_fails() {
            return Err(injected("GET"));
        }
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        // The input is decided object by object as the inner store takes it;
        // the refused ones are answered (with errors) once it is done.
        let state = Arc::clone(&self.state);
        let refused: Arc<Mutex<Vec<Path>>> = Arc::default();
        let noted = Arc::clone(&refused);
        let input = locations
            .filter_map(move |p| {
                let out = match p {
                    Ok(p) => {
                        let mut s = state.lock();
                        if s.deletes.tick() {
                            s.injected.deletes += 1;
                            noted.lock().push(p);
                            None
                        } else {
                            Some(Ok(p))
                        }
                    }
                    Err(e) => Some(Err(e)),
                };
                futures_util::future::ready(out)
            })
            .boxed();
        let done = self.inner.delete_stream(input);
        let tail = futures_util::stream::once(async move { std::mem::take(&mut *refused.lock()) })
            .flat_map(|v| {
                futures_util::stream::iter(
                    v.into_iter()
                        .map(|p| Err(injected(&format!("DELETE of {p}")))),
                )
            });
        done.chain(tail).boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let fail = {
            let mut s = self.state.lock();
            let f = s.lists.tick();
            s.injected.lists += u64::from(f);
            f
        };
        if fail {
            return futures_util::stream::once(async { Err(injected("LIST")) }).boxed();
        }
        self.inner.list(prefix)
    }
});
