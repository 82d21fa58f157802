//! [`Bucket`]: the client side of an object tier — an object store, the key
//! prefix, and the small private tokio runtime that drives its requests.
//!
//! The file system core is synchronous (plain threads), the object store
//! client is async. A `Bucket` owns a multi-threaded runtime of two worker
//! threads and each operation `block_on`s it from the caller's thread, with up
//! to `concurrency` requests of one operation in flight. Calling from inside
//! a tokio runtime would panic in tokio; it is refused with an error instead.
//!
//! The store is injected as `Arc<dyn ObjectStore>`: S3 (object_store's
//! `AmazonS3`, [`Bucket::connect`]) in production, object_store's `InMemory`
//! or the fault-injecting [`FaultStore`](super::FaultStore) in tests
//! ([`Bucket::with_store`]); the code above it is the same.
//!
//! **Retries** are object_store's ([`NetworkParams`]: 5xx and 429 answers,
//! refused and reset connections, time-outs of idempotent requests — every
//! request here is one —, and a GET whose body breaks off resumes where it
//! stopped). [`Bucket::set_network`] changes them at run time: the S3
//! client is built again with the new parameters (requests in flight finish
//! with the old one). Every try passes through a watching HTTP client
//! (`client.rs`) that counts failed tries and keeps [`Bucket::failing`]
//! current from the first failed try on — so `status` says the store is
//! unreachable while a read is still retrying, not only once it gave up —
//! until a try is answered.
//!
//! Every error names the request, the object's URL and the cause with its
//! whole source chain (reqwest hides "connection refused" two levels down),
//! and maps to an [`io::ErrorKind`] (`NotFound`, `AlreadyExists`, else
//! `Other`).

use std::fmt::Write as _;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, PutMode, PutOptions, PutPayload};
use parking_lot::{Mutex, RwLock};

use super::config::{Credentials, NetworkParams, ObjectConfig, DEFAULT_CONCURRENCY};
use super::diagnose::{Problem, Where};

/// Request counters of a bucket (successful requests only, except
/// `failures`). Serialised as they are in the daemon's status (JSON).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RequestStats {
    /// PUTs (parts and the marker).
    pub puts: u64,
    /// Bytes uploaded.
    pub put_bytes: u64,
    /// GETs (ranged reads and the marker).
    pub gets: u64,
    /// Bytes downloaded.
    pub get_bytes: u64,
    /// Objects deleted.
    pub deletes: u64,
    /// LIST operations (each may be several pages).
    pub lists: u64,
    /// Requests that failed (after their retries).
    pub failures: u64,
    /// HTTP tries that failed (5xx or 429 answers, connection errors,
    /// time-outs), retried or not; S3 tiers only.
    #[serde(default)]
    pub failed_tries: u64,
    /// Of `gets`, read-ahead GETs started for sequential readers (object
    /// tiers only; `ahead.rs`), and the bytes they asked for.
    #[serde(default)]
    pub read_ahead_gets: u64,
    #[serde(default)]
    pub read_ahead_bytes: u64,
    /// Bytes reads took from read-ahead GETs instead of fetching them.
    #[serde(default)]
    pub read_ahead_taken_bytes: u64,
    /// Read-ahead GETs a read had to wait for (still in flight when it
    /// wanted them): the store is slower than the reader.
    #[serde(default)]
    pub read_ahead_waited: u64,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    puts: AtomicU64,
    put_bytes: AtomicU64,
    gets: AtomicU64,
    get_bytes: AtomicU64,
    deletes: AtomicU64,
    lists: AtomicU64,
    failures: AtomicU64,
    pub(super) failed_tries: AtomicU64,
}

pub(super) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The store has been failing requests: since when, and the last error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreFailure {
    /// When the first failing request since the last answered one failed
    /// (seconds since the epoch).
    pub since_unix: u64,
    /// The last failure's message.
    pub error: String,
}

/// Whether the store answers: cleared by any request that succeeds, set
/// by a failed one unless a request answered after the failed one began.
///
/// Invariant: the mark reflects the latest evidence. A try that stalled
/// through an outage and timed out after the store came back (read-ahead,
/// cleaning, an upload's retry) began before the answers that followed the
/// outage, so it does not mark a store that answers as unreachable.
#[derive(Debug, Default)]
pub(super) struct Health(std::sync::Mutex<HealthState>);

#[derive(Debug, Default)]
struct HealthState {
    failure: Option<StoreFailure>,
    /// Requests answered so far: a [`Began`] compares with it.
    answered: u64,
}

/// When a request began, in answers seen so far ([`Health::begin`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Began(u64);

impl Health {
    fn lock(&self) -> std::sync::MutexGuard<'_, HealthState> {
        // A poisoned lock only means a panic elsewhere; the value is whole.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the start of a request, for [`Health::failed`].
    pub(super) fn begin(&self) -> Began {
        Began(self.lock().answered)
    }

    /// The store answered: it is not failing.
    pub(super) fn answered(&self) {
        let mut g = self.lock();
        g.failure = None;
        g.answered += 1;
    }

    /// A request that began at `began` failed with `error`: the store is
    /// failing, unless another request was answered since `began`.
    pub(super) fn failed(&self, began: Began, error: String) {
        let mut g = self.lock();
        if g.answered != began.0 {
            return;
        }
        let since_unix = g.failure.as_ref().map_or_else(unix_now, |f| f.since_unix);
        g.failure = Some(StoreFailure { since_unix, error });
    }

    fn get(&self) -> Option<StoreFailure> {
        self.lock().failure.clone()
    }
}

/// What the bucket and its watching HTTP client share.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) counters: Counters,
    pub(super) health: Health,
}

/// Builds the store again with new network parameters (S3 only).
type Rebuild = Box<dyn Fn(&NetworkParams) -> io::Result<Arc<dyn ObjectStore>> + Send + Sync>;

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// An object store, a prefix in it, and the runtime driving requests; see
/// the module docs.
pub struct Bucket {
    /// Swapped by [`Bucket::set_network`]; each operation uses a clone.
    store: RwLock<Arc<dyn ObjectStore>>,
    /// How `store` was built again; `None` for injected stores.
    rebuild: Option<Rebuild>,
    network: Mutex<NetworkParams>,
    /// `ENDPOINT/BUCKET` (or `memory://NAME`): object URLs are `base/key`.
    base: String,
    /// Key prefix, no leading or trailing `/`, maybe empty.
    prefix: String,
    /// `Some` until dropped (see `Drop`).
    runtime: Option<tokio::runtime::Runtime>,
    concurrency: usize,
    shared: Arc<Shared>,
    /// What messages about configuration problems name (S3 only).
    site: Option<Site>,
}

/// An S3 bucket's address, region and where its keys came from, for the
/// messages of [`Problem`]s.
#[derive(Debug)]
struct Site {
    endpoint: String,
    bucket: String,
    region: String,
    creds: String,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket")
            .field("url", &self.url())
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

impl Drop for Bucket {
    /// Every operation waited for its requests, so only idle connections are
    /// left on the runtime: shut it down without waiting for them (which
    /// also works when the bucket is dropped inside another async runtime,
    /// where dropping a runtime would panic).
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// `text` on one line: an S3 error answer's XML body (several lines) cut
/// down to its code and message, other line breaks made spaces.
pub(crate) fn one_line(text: &str) -> String {
    let mut out = match (text.find("<?xml"), text.find("<Code>")) {
        (Some(i), Some(_)) => {
            let field = |tag: &str| {
                let open = format!("<{tag}>");
                let s = text.find(&open)? + open.len();
                text[s..]
                    .find(&format!("</{tag}>"))
                    .map(|n| &text[s..s + n])
            };
            format!(
                "{}{}: {}",
                &text[..i],
                field("Code").unwrap_or(""),
                field("Message").unwrap_or("")
            )
        }
        _ => text.to_string(),
    };
    out = out.replace(['\r', '\n'], " ");
    out
}

/// `e` and its sources, joined with ": " (repeats dropped).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let m = s.to_string();
        if !out.contains(&m) {
            let _ = write!(out, ": {m}");
        }
        cur = s.source();
    }
    out
}

impl Bucket {
    /// Connects to the S3 endpoint of `cfg` with credentials from the standard
    /// places ([`Credentials::from_env`]). Makes no request.
    pub fn connect(cfg: &ObjectConfig) -> io::Result<Bucket> {
        let creds = Credentials::from_env(cfg)?;
        Bucket::connect_with(cfg, creds)
    }

    /// [`connect`](Self::connect) with the credentials given.
    pub fn connect_with(cfg: &ObjectConfig, creds: Credentials) -> io::Result<Bucket> {
        let shared = Arc::new(Shared::default());
        let site = Site {
            endpoint: cfg.endpoint.clone(),
            bucket: cfg.bucket.clone(),
            region: cfg.region.clone(),
            creds: creds.source.clone(),
        };
        // Read once: a rebuild with other retries trusts the same roots.
        let roots = cfg.root_certificates()?;
        let rebuild: Rebuild = {
            let (cfg, shared) = (cfg.clone(), Arc::clone(&shared));
            Box::new(move |net: &NetworkParams| {
                super::client::s3(&cfg, &creds, &roots, net, &shared)
            })
        };
        let store = rebuild(&cfg.network)?;
        let base = format!("{}/{}", cfg.endpoint, cfg.bucket);
        let mut b = Bucket::assemble(store, &base, &cfg.prefix, shared)?;
        b.rebuild = Some(rebuild);
        *b.network.get_mut() = cfg.network;
        b.concurrency = cfg.concurrency.max(1);
        b.site = Some(site);
        Ok(b)
    }

    /// A bucket over any object store: `base` names it in messages (object
    /// URLs are `base/key`), keys live under `prefix`.
    pub fn with_store(store: Arc<dyn ObjectStore>, base: &str, prefix: &str) -> io::Result<Bucket> {
        Bucket::assemble(store, base, prefix, Arc::default())
    }

    fn assemble(
        store: Arc<dyn ObjectStore>,
        base: &str,
        prefix: &str,
        shared: Arc<Shared>,
    ) -> io::Result<Bucket> {
        let prefix = prefix.trim_matches('/').to_string();
        if !prefix.is_empty() {
            Path::parse(&prefix).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("object prefix {prefix:?}: {}", chain(&e)),
                )
            })?;
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("terrace-s3")
            .enable_all()
            .build()
            .map_err(|e| io::Error::new(e.kind(), format!("s3 {base}: no runtime: {e}")))?;
        Ok(Bucket {
            store: RwLock::new(store),
            rebuild: None,
            network: Mutex::new(NetworkParams::default()),
            base: base.trim_end_matches('/').to_string(),
            prefix,
            runtime: Some(runtime),
            concurrency: DEFAULT_CONCURRENCY,
            shared,
            site: None,
        })
    }

    /// A new, empty in-memory store (tests), named `memory://NAME`.
    pub fn in_memory(name: &str, prefix: &str) -> io::Result<Bucket> {
        Bucket::with_store(
            Arc::new(InMemory::new()),
            &format!("memory://{name}"),
            prefix,
        )
    }

    /// The store (to open the same objects again, or inspect them in tests).
    pub fn store(&self) -> Arc<dyn ObjectStore> {
        Arc::clone(&self.store.read())
    }

    /// The retry and time-out parameters in use (an injected store has its
    /// own; these are then only recorded).
    pub fn network(&self) -> NetworkParams {
        *self.network.lock()
    }

    /// Uses `net` from the next request on: an S3 client is built again
    /// with it (requests in flight finish with the old one). Nothing changes
    /// on error.
    pub fn set_network(&self, net: NetworkParams) -> io::Result<()> {
        let mut cur = self.network.lock();
        if *cur == net {
            return Ok(());
        }
        if let Some(rebuild) = &self.rebuild {
            let store = rebuild(&net)?;
            *self.store.write() = store;
        }
        *cur = net;
        Ok(())
    }

    /// `ENDPOINT/BUCKET[/PREFIX]`.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            self.base.clone()
        } else {
            format!("{}/{}", self.base, self.prefix)
        }
    }

    /// The base (`ENDPOINT/BUCKET`) passed at construction.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Key prefix (maybe empty).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Requests in flight at most per operation.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Sets [`concurrency`](Self::concurrency) (at least 1).
    pub fn set_concurrency(&mut self, n: usize) {
        self.concurrency = n.max(1);
    }

    /// `Some` while the store fails requests (until one succeeds).
    pub fn failing(&self) -> Option<StoreFailure> {
        self.shared.health.get()
    }

    /// Request counters so far.
    pub fn request_stats(&self) -> RequestStats {
        let c = &self.shared.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RequestStats {
            puts: l(&c.puts),
            put_bytes: l(&c.put_bytes),
            gets: l(&c.gets),
            get_bytes: l(&c.get_bytes),
            deletes: l(&c.deletes),
            lists: l(&c.lists),
            failures: l(&c.failures),
            failed_tries: l(&c.failed_tries),
            ..RequestStats::default()
        }
    }

    /// The configuration problem `e` shows (S3 only; see `diagnose`).
    fn problem(&self, e: &object_store::Error) -> Option<Problem> {
        self.site.as_ref().and_then(|_| Problem::of(e))
    }

    /// The error for request `op` on `key`: a configuration problem's
    /// one-line message (`s3 tier URL: access denied (…)`), else the
    /// request, the object's URL and the cause.
    fn error(&self, op: &str, key: &str, e: &object_store::Error, began: Began) -> io::Error {
        add(&self.shared.counters.failures, 1);
        if let (Some(p), Some(site)) = (self.problem(e), &self.site) {
            let url = self.url();
            let at = Where {
                url: &url,
                endpoint: &site.endpoint,
                bucket: &site.bucket,
                region: &site.region,
                creds: Some(&site.creds),
            };
            let msg = p.message(&at, &format!("{op} {key}"));
            if !matches!(p, Problem::Unreachable { .. }) {
                // The watched client cleared the mark at the answer, which
                // is itself the problem: marked whatever came before. An
                // unreachable store's mark names the last try already.
                self.shared
                    .health
                    .failed(self.shared.health.begin(), msg.clone());
            }
            return io::Error::other(msg);
        }
        let kind = match e {
            object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
            object_store::Error::AlreadyExists { .. } => io::ErrorKind::AlreadyExists,
            _ => io::ErrorKind::Other,
        };
        let msg = format!("s3 {op} {}/{key}: {}", self.base, one_line(&chain(e)));
        if kind == io::ErrorKind::Other {
            // NotFound and AlreadyExists are answers: the store is there.
            self.shared.health.failed(began, msg.clone());
        }
        io::Error::new(kind, msg)
    }

    /// Runs `fut` on the runtime from this (non-async) thread.
    fn block_on<T>(&self, fut: impl std::future::Future<Output = io::Result<T>>) -> io::Result<T> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(io::Error::other(format!(
                "s3 {}: called from inside an async runtime (the object tier blocks; call it from a plain thread)",
                self.url()
            )));
        }
        match &self.runtime {
            Some(rt) => rt.block_on(fut),
            None => Err(io::Error::other(format!(
                "s3 {}: runtime shut down",
                self.url()
            ))),
        }
    }

    fn path(key: &str) -> io::Result<Path> {
        Path::parse(key).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("object key {key:?}: {}", chain(&e)),
            )
        })
    }

    /// Uploads each `(key, data)`, up to `concurrency` at once; one result
    /// per object, in order. A PUT counts as done only when the store
    /// answered success with an ETag.
    pub(crate) fn put_all(&self, objects: Vec<(String, PutPayload)>) -> Vec<io::Result<()>> {
        let n = objects.len();
        let store = self.store();
        let store = &store;
        let uploads = stream::iter(objects.into_iter().map(|(key, data)| async move {
            let began = self.shared.health.begin();
            let len = data.content_length() as u64;
            let path = Bucket::path(&key)?;
            // Each PUT is a task of the runtime's worker threads: building
            // a request hashes its body (SigV4 signs the payload's SHA-256),
            // and polled here every body of the batch was hashed on this
            // one thread.
            let store = Arc::clone(store);
            let put =
                tokio::spawn(
                    async move { store.put_opts(&path, data, PutOptions::default()).await },
                );
            let put = match put.await {
                Ok(r) => r,
                Err(e) => {
                    add(&self.shared.counters.failures, 1);
                    return Err(io::Error::other(format!(
                        "s3 PUT {}/{key}: the upload task failed: {e}",
                        self.base
                    )));
                }
            };
            match put {
                Ok(r) if r.e_tag.as_deref().is_some_and(|t| !t.is_empty()) => {
                    self.shared.health.answered();
                    add(&self.shared.counters.puts, 1);
                    add(&self.shared.counters.put_bytes, len);
                    Ok(())
                }
                Ok(_) => {
                    add(&self.shared.counters.failures, 1);
                    let msg = format!(
                        "s3 PUT {}/{key}: the store answered without an ETag; \
                         the object does not count as stored",
                        self.base
                    );
                    self.shared.health.failed(began, msg.clone());
                    Err(io::Error::other(msg))
                }
                Err(e) => Err(self.error("PUT", &key, &e, began)),
            }
        }))
        .buffered(self.concurrency)
        .collect::<Vec<io::Result<()>>>();
        match self.block_on(async { Ok(uploads.await) }) {
            Ok(v) => v,
            Err(e) => (0..n)
                .map(|_| Err(io::Error::new(e.kind(), e.to_string())))
                .collect(),
        }
    }

    /// Uploads `data` to `key` only if no object is there (`If-None-Match:
    /// *`); `AlreadyExists` otherwise.
    pub(crate) fn put_new(&self, key: &str, data: Bytes) -> io::Result<()> {
        let len = data.len() as u64;
        let path = Bucket::path(key)?;
        let began = self.shared.health.begin();
        self.block_on(async {
            let opts = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            match self
                .store()
                .put_opts(&path, PutPayload::from(data), opts)
                .await
            {
                Ok(_) => {
                    self.shared.health.answered();
                    add(&self.shared.counters.puts, 1);
                    add(&self.shared.counters.put_bytes, len);
                    Ok(())
                }
                Err(e) => Err(self.error("PUT", key, &e, began)),
            }
        })
    }

    /// The whole object at `key`; `None` when there is none.
    pub(crate) fn get(&self, key: &str) -> io::Result<Option<Bytes>> {
        let path = Bucket::path(key)?;
        let began = self.shared.health.begin();
        self.block_on(async {
            let r = match self.store().get_opts(&path, GetOptions::default()).await {
                Ok(r) => r,
                // A missing key, not a missing bucket.
                Err(e @ object_store::Error::NotFound { .. }) if self.problem(&e).is_none() => {
                    return Ok(None)
                }
                Err(e) => return Err(self.error("GET", key, &e, began)),
            };
            let b = r
                .bytes()
                .await
                .map_err(|e| self.error("GET", key, &e, began))?;
            self.shared.health.answered();
            add(&self.shared.counters.gets, 1);
            add(&self.shared.counters.get_bytes, b.len() as u64);
            Ok(Some(b))
        })
    }

    /// Byte ranges of objects, up to `concurrency` requests at once; the
    /// results in order. A short answer is an error.
    pub(crate) fn get_ranges(&self, reqs: Vec<(String, Range<u64>)>) -> io::Result<Vec<Bytes>> {
        let store = self.store();
        let store = &store;
        let fut = stream::iter(reqs.into_iter().map(|(key, range)| async move {
            let began = self.shared.health.begin();
            let path = Bucket::path(&key)?;
            let want = range.end - range.start;
            let opts = GetOptions {
                range: Some(GetRange::Bounded(range.clone())),
                ..GetOptions::default()
            };
            let r = store
                .get_opts(&path, opts)
                .await
                .map_err(|e| self.error("GET", &key, &e, began))?;
            let b = r
                .bytes()
                .await
                .map_err(|e| self.error("GET", &key, &e, began))?;
            if b.len() as u64 != want {
                add(&self.shared.counters.failures, 1);
                let msg = format!(
                    "s3 GET {}/{key} bytes {}..{}: got {} bytes, wanted {want}",
                    self.base,
                    range.start,
                    range.end,
                    b.len()
                );
                self.shared.health.failed(began, msg.clone());
                return Err(io::Error::other(msg));
            }
            self.shared.health.answered();
            add(&self.shared.counters.gets, 1);
            add(&self.shared.counters.get_bytes, want);
            Ok(b)
        }))
        .buffered(self.concurrency)
        .try_collect::<Vec<Bytes>>();
        self.block_on(fut)
    }

    /// Starts a ranged GET of `range` of object `key` on the runtime and
    /// returns at once; `slot` gets the answer (read-ahead, `ahead.rs`). A
    /// GET that succeeds is counted as a GET at its answer; a failed one
    /// when a read takes its error ([`Bucket::get_error`]).
    pub(crate) fn spawn_get(&self, key: &str, range: Range<u64>, slot: Arc<super::ahead::Slot>) {
        let path = match Bucket::path(key) {
            Ok(p) => p,
            Err(e) => {
                return slot.fill(Err(Arc::new(object_store::Error::Generic {
                    store: "read-ahead",
                    source: Box::new(e),
                })))
            }
        };
        let Some(rt) = &self.runtime else {
            return slot.fill(Err(Arc::new(object_store::Error::Generic {
                store: "read-ahead",
                source: "runtime shut down".into(),
            })));
        };
        let store = self.store();
        let shared = Arc::clone(&self.shared);
        rt.spawn(async move {
            let want = range.end - range.start;
            let opts = GetOptions {
                range: Some(GetRange::Bounded(range)),
                ..GetOptions::default()
            };
            let r = match store.get_opts(&path, opts).await {
                Ok(r) => r.bytes().await,
                Err(e) => Err(e),
            };
            if let Ok(b) = &r {
                if b.len() as u64 == want {
                    shared.health.answered();
                    add(&shared.counters.gets, 1);
                    add(&shared.counters.get_bytes, want);
                }
            }
            slot.fill(r.map_err(Arc::new));
        });
    }

    /// The error of a failed read-ahead GET of `key` for the read that
    /// waited for it (counted and reported as a failed GET of its own).
    pub(crate) fn get_error(&self, key: &str, e: &object_store::Error) -> io::Error {
        // The read takes the error now: it counts as failing now.
        self.error("GET", key, e, self.shared.health.begin())
    }

    /// Deletes the objects at `keys` (a missing one counts as deleted); the
    /// keys whose delete failed, with the error.
    pub(crate) fn delete_all(&self, keys: Vec<String>) -> Vec<(String, io::Error)> {
        let mut failed = Vec::new();
        let mut paths = Vec::with_capacity(keys.len());
        for k in keys {
            match Bucket::path(&k) {
                Ok(p) => paths.push(p),
                Err(e) => failed.push((k, e)),
            }
        }
        if paths.is_empty() {
            return failed;
        }
        let asked: Vec<Path> = paths.clone();
        let began = self.shared.health.begin();
        let fut = async {
            let input = stream::iter(paths.into_iter().map(Ok)).boxed();
            Ok(self.store().delete_stream(input).collect::<Vec<_>>().await)
        };
        let results = match self.block_on(fut) {
            Ok(r) => r,
            Err(e) => {
                let m = e.to_string();
                failed.extend(
                    asked
                        .iter()
                        .map(|p| (p.to_string(), io::Error::other(m.clone()))),
                );
                return failed;
            }
        };
        // The stream answers each path; errors carry the path in the error only,
        // so match answers to requests by what succeeded.
        let mut done: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut errors = Vec::new();
        for r in results {
            match r {
                Ok(p) => {
                    done.insert(p.to_string());
                }
                Err(object_store::Error::NotFound { path, .. }) => {
                    done.insert(path);
                }
                Err(e) => errors.push(e),
            }
        }
        if !done.is_empty() {
            self.shared.health.answered();
        }
        add(&self.shared.counters.deletes, done.len() as u64);
        let first_error = errors.into_iter().next();
        for p in asked {
            let k = p.to_string();
            if !done.contains(&k) {
                let e = match &first_error {
                    Some(e) => self.error("DELETE", &k, e, began),
                    None => io::Error::other(format!(
                        "s3 DELETE {}/{k}: no answer for this key",
                        self.base
                    )),
                };
                failed.push((k, e));
            }
        }
        failed
    }

    /// Every object under the prefix: key, size and last-modified time
    /// (seconds since the epoch; 0 if before it).
    pub(crate) fn list(&self) -> io::Result<Vec<(String, u64, u64)>> {
        let prefix = if self.prefix.is_empty() {
            None
        } else {
            Some(Bucket::path(&self.prefix)?)
        };
        let began = self.shared.health.begin();
        self.block_on(async {
            let metas = self
                .store()
                .list(prefix.as_ref())
                .map_ok(|m| {
                    let modified = u64::try_from(m.last_modified.timestamp()).unwrap_or(0);
                    (m.location.to_string(), m.size, modified)
                })
                .try_collect::<Vec<_>>()
                .await
                .map_err(|e| self.error("LIST", &format!("{}/", self.prefix), &e, began))?;
            self.shared.health.answered();
            add(&self.shared.counters.lists, 1);
            Ok(metas)
        })
    }
}

/// A bucket at `url` with made-up keys said to come from `source`, and
/// `retries` retries 1 ms apart of 5 s tries: for tests against local
/// servers (the HTTP client's and the diagnoses').
#[cfg(test)]
pub(super) fn test_bucket(url: &str, retries: usize, source: &str) -> Bucket {
    use std::time::Duration;
    let mut cfg = ObjectConfig::parse(url, &|_| None).unwrap();
    cfg.network = NetworkParams {
        retries,
        retry_timeout: Duration::from_secs(30),
        request_timeout: Duration::from_secs(5),
        backoff: Duration::from_millis(1),
    };
    let creds = Credentials {
        access_key_id: "id".into(),
        secret_access_key: "secret".into(),
        session_token: None,
        source: source.into(),
    };
    Bucket::connect_with(&cfg, creds).unwrap()
}

#[cfg(test)]
mod health_tests {
    use super::Health;

    #[test]
    fn a_failure_marks_the_store_until_an_answer_clears_it_and_keeps_its_first_time() {
        let h = Health::default();
        h.failed(h.begin(), "first".into());
        let first = h.get().expect("marked");
        h.failed(h.begin(), "second".into());
        let second = h.get().expect("still marked");
        assert_eq!(
            (second.since_unix, second.error.as_str()),
            (first.since_unix, "second")
        );
        h.answered();
        assert_eq!(h.get(), None);
    }

    #[test]
    fn a_request_that_began_before_an_answer_does_not_mark_the_store_when_it_fails_late() {
        let h = Health::default();
        let stalled = h.begin(); // began during an outage
        h.failed(h.begin(), "timed out".into());
        let later = h.begin(); // began after the store came back
        h.answered(); // the store answered again
        h.failed(stalled, "the stalled try timed out at last".into());
        assert_eq!(
            h.get(),
            None,
            "old evidence must not mark a store that answers"
        );
        h.failed(later, "began before the answer too".into());
        assert_eq!(h.get(), None);
        h.failed(h.begin(), "a fresh failure".into());
        assert!(
            h.get().is_some(),
            "a failure after the answer marks it again"
        );
    }
}
