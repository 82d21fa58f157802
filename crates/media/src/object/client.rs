//! The S3 client of an object tier: object_store's `AmazonS3` for the
//! tier's URL and credentials, with the retries and time-outs of
//! [`NetworkParams`], every HTTP try passing through [`WatchedClient`].
//! An https endpoint is verified against the system's roots plus those of
//! the tier's `ca_file=` (`ClientOptions::with_root_certificate`).
//!
//! The watched client sees each try, retries included (object_store
//! retries above it): a 5xx or 429 answer or a transport error (refused,
//! reset, timed out) counts as a failed try and marks the store failing
//! with that try's message; any other answer — success, but also 404 or
//! 412: the store answered — clears the mark. So the mark is set from the
//! first failed try of an outage and cleared by the first answered one.

use std::io;
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::{Certificate, ClientOptions, ObjectStore};

use super::config::{Credentials, NetworkParams, ObjectConfig};
use super::store::{add, chain, Shared};

/// The S3 client for `cfg` with `net`, every try watched (module docs),
/// trusting `roots` ([`ObjectConfig::root_certificates`]) besides the
/// system's roots.
pub(super) fn s3(
    cfg: &ObjectConfig,
    creds: &Credentials,
    roots: &[Certificate],
    net: &NetworkParams,
    shared: &Arc<Shared>,
) -> io::Result<Arc<dyn ObjectStore>> {
    let http = cfg.endpoint.starts_with("http://");
    let mut options = ClientOptions::new()
        .with_allow_http(http)
        .with_timeout(net.request_timeout)
        .with_connect_timeout(net.request_timeout.min(CONNECT_TIMEOUT));
    for c in roots {
        options = options.with_root_certificate(c.clone());
    }
    let mut builder = AmazonS3Builder::new()
        .with_endpoint(cfg.bucket_endpoint())
        .with_bucket_name(&cfg.bucket)
        .with_region(&cfg.region)
        .with_access_key_id(&creds.access_key_id)
        .with_secret_access_key(&creds.secret_access_key)
        .with_allow_http(http)
        .with_virtual_hosted_style_request(!cfg.path_style)
        .with_unsigned_payload(!cfg.sign_payload)
        .with_retry(net.retry_config())
        .with_client_options(options)
        .with_http_connector(WatchingConnector(Arc::clone(shared)));
    if let Some(token) = &creds.session_token {
        builder = builder.with_token(token);
    }
    let s3 = builder.build().map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("s3 {}: cannot set up the client: {}", cfg.url(), chain(&e)),
        )
    })?;
    Ok(Arc::new(s3))
}

/// Time limit of opening a connection (object_store's default), or of the
/// whole try if that is shorter.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Makes reqwest clients whose tries are watched ([`WatchedClient`]).
#[derive(Debug)]
struct WatchingConnector(Arc<Shared>);

impl HttpConnector for WatchingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(WatchedClient {
            inner,
            shared: Arc::clone(&self.0),
        }))
    }
}

/// An HTTP client that notes each try: a 5xx or 429 answer or a transport
/// error counts as a failed try and marks the store failing (unless another
/// request was answered since this one began); any other answer but a
/// success (404, 412 …: the store answered) clears that. A success is noted
/// by the operation once the body is in.
#[derive(Debug)]
struct WatchedClient {
    inner: HttpClient,
    shared: Arc<Shared>,
}

#[async_trait::async_trait]
impl HttpService for WatchedClient {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let what = format!("s3 {} {}", req.method(), req.uri());
        let began = self.shared.health.begin();
        let r = self.inner.execute(req).await;
        match &r {
            Ok(resp) if resp.status().is_server_error() || resp.status().as_u16() == 429 => {
                add(&self.shared.counters.failed_tries, 1);
                let msg = format!("{what}: answered {}", resp.status());
                self.shared.health.failed(began, msg);
            }
            // The operation notes a success once the body is in: a body that
            // stalls then fails as a request that began at `began`.
            Ok(resp) if resp.status().is_success() => {}
            Ok(_) => self.shared.health.answered(),
            Err(e) => {
                add(&self.shared.counters.failed_tries, 1);
                self.shared
                    .health
                    .failed(began, format!("{what}: {}", chain(e)));
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::{test_bucket, Bucket};
    use super::*;
    use std::time::{Duration, Instant};

    /// A bucket on a port nobody listens on (connections are refused at
    /// once), with `retries`.
    fn dead_bucket(retries: usize) -> Bucket {
        test_bucket("http://127.0.0.1:1/dead-bucket", retries, "test")
    }

    #[test]
    fn a_ca_file_is_read_when_the_client_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ca.pem");
        let url = format!("https://127.0.0.1:1/tls-bucket?ca_file={}", f.display());
        let cfg = ObjectConfig::parse(&url, &|_| None).unwrap();
        let creds = Credentials {
            access_key_id: "id".into(),
            secret_access_key: "secret".into(),
            session_token: None,
            source: "test".into(),
        };
        let Err(e) = Bucket::connect_with(&cfg, creds.clone()) else {
            panic!("no file: connected");
        };
        assert!(
            e.to_string().starts_with(&format!(
                "s3 tier https://127.0.0.1:1/tls-bucket: ca_file {}: cannot read it",
                f.display()
            )),
            "{e}"
        );
        // Base64 that is no certificate.
        std::fs::write(
            &f,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let Err(e) = Bucket::connect_with(&cfg, creds) else {
            panic!("junk: connected");
        };
        assert!(
            e.to_string().contains("certificate 1 of 1 cannot be used"),
            "{e}"
        );
    }

    #[test]
    fn every_failed_try_is_counted_and_marks_the_store_failing() {
        let b = dead_bucket(2);
        assert!(b.failing().is_none());
        let e = b.get("some-key").unwrap_err();
        assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
        let st = b.request_stats();
        assert_eq!((st.failed_tries, st.failures), (3, 1), "1 try + 2 retries");
        let f = b.failing().expect("failing");
        assert!(
            f.error.contains("127.0.0.1:1/dead-bucket/some-key"),
            "{f:?}"
        );
    }

    #[test]
    fn set_network_rebuilds_the_client_with_the_new_retries() {
        let b = dead_bucket(0);
        b.get("k").unwrap_err();
        assert_eq!(b.request_stats().failed_tries, 1, "no retry");
        let mut net = b.network();
        net.retries = 4;
        b.set_network(net).unwrap();
        assert_eq!(b.network(), net);
        let t0 = Instant::now();
        b.get("k").unwrap_err();
        assert_eq!(b.request_stats().failed_tries, 1 + 5, "1 try + 4 retries");
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    }
}
