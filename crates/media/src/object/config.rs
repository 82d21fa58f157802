//! Where an object tier lives and how to sign in: [`ObjectConfig`] and
//! [`Credentials`].
//!
//! A tier is named by one URL, `http(s)://HOST[:PORT]/BUCKET[/PREFIX]`
//! ([`ObjectConfig::from_url`]), maybe followed by options
//! `?region=…&path_style=…&credentials_file=…&profile=…&ca_file=…`
//! ([`UrlOptions`]; none of them secret, so the pool may store them). Everything else has a
//! default: the region is `region=`, else `AWS_REGION`, else `us-east-1`;
//! requests are path-style (`HOST/BUCKET/KEY`) for plain-http endpoints and
//! IP addresses — what MinIO and most local servers need — and
//! virtual-hosted (`BUCKET.HOST/KEY`) for https names, unless `path_style=`
//! says otherwise. An https endpoint's certificate must chain to a root the
//! system trusts or to one of `ca_file=` ([`ObjectConfig::root_certificates`]).
//!
//! Credentials come from the standard places only ([`Credentials::resolve`]):
//! a credentials file named in the config (with its profile), else — unless
//! the config names a profile — the environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), else the profile of the
//! config or `AWS_PROFILE` (default `default`) of
//! `AWS_SHARED_CREDENTIALS_FILE` or `~/.aws/credentials`. Terrace never
//! writes credentials anywhere, and `Debug` prints no secret.
//!
//! Parsing takes the environment as a function, so tests need not touch the
//! process's environment.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use object_store::client::{HttpConnector, ReqwestConnector};

pub use super::credentials::Credentials;

/// Region used when neither the config nor `AWS_REGION` names one.
pub const DEFAULT_REGION: &str = "us-east-1";

/// Uploads or ranged reads one operation keeps in flight at most.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// Where an object tier lives; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectConfig {
    /// `http://HOST[:PORT]` or `https://HOST[:PORT]`, no trailing slash.
    pub endpoint: String,
    /// Bucket name.
    pub bucket: String,
    /// Key prefix inside the bucket without leading or trailing `/`; empty
    /// for the bucket's root.
    pub prefix: String,
    /// Signing region.
    pub region: String,
    /// Path-style requests (`HOST/BUCKET/KEY`) instead of virtual-hosted ones.
    pub path_style: bool,
    /// A credentials file to read instead of the environment and
    /// `~/.aws/credentials`.
    pub credentials_file: Option<PathBuf>,
    /// Profile to use in a credentials file (default: `AWS_PROFILE`, else
    /// `default`).
    pub profile: Option<String>,
    /// A PEM file of root certificates to trust besides the system's (for
    /// an https endpoint signed by a private CA).
    pub ca_file: Option<PathBuf>,
    /// Requests in flight at most per `sync` or read (at least 1).
    pub concurrency: usize,
    /// Retries and timeouts of requests.
    pub network: NetworkParams,
}

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

pub(super) fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// The options of a tier URL, `?key=value&…` after the path: what the
/// pool's tier record may hold besides the address. None is secret — keys
/// are refused, they belong in the environment or a credentials file.
///
/// - `region=NAME`: the signing region (wins over `AWS_REGION`);
/// - `path_style=true|false`: path-style (`HOST/BUCKET/KEY`) or
///   virtual-hosted (`BUCKET.HOST/KEY`) requests, instead of the guess from
///   the URL;
/// - `credentials_file=/ABSOLUTE/PATH`: read the keys from this AWS-style
///   credentials file, never from the environment;
/// - `profile=NAME`: the profile to use in that file, or — without
///   `credentials_file` — in `AWS_SHARED_CREDENTIALS_FILE` or
///   `~/.aws/credentials` (the environment's keys are then not used);
/// - `ca_file=/ABSOLUTE/PATH`: a PEM file of root certificates (one or
///   more `BEGIN CERTIFICATE` blocks) that an https endpoint's certificate
///   may chain to, besides the system's roots. Read at every open of the
///   tier ([`ObjectConfig::root_certificates`]).
///
/// Values are taken as written: percent-encoding is not supported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UrlOptions {
    /// `region=`.
    pub region: Option<String>,
    /// `path_style=`.
    pub path_style: Option<bool>,
    /// `credentials_file=`.
    pub credentials_file: Option<PathBuf>,
    /// `profile=`.
    pub profile: Option<String>,
    /// `ca_file=`.
    pub ca_file: Option<PathBuf>,
}

/// The option names [`UrlOptions::parse`] knows.
pub const URL_OPTIONS: &str = "region, path_style, credentials_file, profile, ca_file";

impl UrlOptions {
    /// Parses the text after `?`; the error says which option is wrong and
    /// why (without the URL).
    pub fn parse(query: &str) -> Result<UrlOptions, String> {
        let mut o = UrlOptions::default();
        if query.is_empty() {
            return Err("an empty option list after '?'".to_string());
        }
        if query.contains(['#', '%']) || query.chars().any(|c| c.is_whitespace()) {
            return Err(
                "options may not hold '#', '%' or spaces (values are taken as written)".to_string(),
            );
        }
        for pair in query.split('&') {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("option {pair:?} is not KEY=VALUE"))?;
            if value.is_empty() {
                return Err(format!("option {key:?} has no value"));
            }
            let dup = || format!("option {key:?} given twice");
            let word = |v: &str, extra: &[u8]| {
                v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || extra.contains(&b))
            };
            match key {
                "region" => {
                    if !word(value, b"-_") {
                        return Err(format!(
                            "region {value:?} may hold only letters, digits, '-' and '_'"
                        ));
                    }
                    if o.region.replace(value.to_string()).is_some() {
                        return Err(dup());
                    }
                }
                "path_style" => {
                    let v = match value {
                        "true" => true,
                        "false" => false,
                        _ => return Err(format!("path_style={value:?}: expected true or false")),
                    };
                    if o.path_style.replace(v).is_some() {
                        return Err(dup());
                    }
                }
                "profile" => {
                    if !word(value, b"-_.") {
                        return Err(format!(
                            "profile {value:?} may hold only letters, digits, '-', '_' and '.'"
                        ));
                    }
                    if o.profile.replace(value.to_string()).is_some() {
                        return Err(dup());
                    }
                }
                "credentials_file" => {
                    if !value.starts_with('/') {
                        return Err(format!(
                            "credentials_file {value:?} is not an absolute path"
                        ));
                    }
                    if o.credentials_file.replace(PathBuf::from(value)).is_some() {
                        return Err(dup());
                    }
                }
                "ca_file" => {
                    if !value.starts_with('/') {
                        return Err(format!("ca_file {value:?} is not an absolute path"));
                    }
                    if o.ca_file.replace(PathBuf::from(value)).is_some() {
                        return Err(dup());
                    }
                }
                k if k.to_ascii_lowercase().contains("secret")
                    || k.to_ascii_lowercase().contains("key")
                    || k.to_ascii_lowercase().contains("token")
                    || k.to_ascii_lowercase().contains("password") =>
                {
                    return Err(format!(
                        "option {k:?}: keys are never stored in the pool; give them in \
                         AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a credentials_file"
                    ))
                }
                k => return Err(format!("unknown option {k:?} (known: {URL_OPTIONS})")),
            }
        }
        Ok(o)
    }
}

impl ObjectConfig {
    /// Parses `http(s)://HOST[:PORT]/BUCKET[/PREFIX][?OPTIONS]`, with the
    /// region from the options, else `AWS_REGION` (else `us-east-1`).
    pub fn from_url(url: &str) -> io::Result<ObjectConfig> {
        ObjectConfig::parse(url, &|k| std::env::var(k).ok())
    }

    /// [`from_url`](Self::from_url) with the environment given as a function.
    pub fn parse(url: &str, env: &dyn Fn(&str) -> Option<String>) -> io::Result<ObjectConfig> {
        let bad = |why: &str| {
            invalid(format!(
                "object tier URL {url:?}: {why} (expected http(s)://HOST[:PORT]/BUCKET[/PREFIX][?OPTIONS])"
            ))
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
        if scheme != "http" && scheme != "https" {
            return Err(bad(&format!("scheme {scheme:?} is not http or https")));
        }
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        if rest.contains(['#', '@', '\\']) || rest.chars().any(|c| c.is_whitespace()) {
            return Err(bad("fragment, user info, backslash or space not allowed"));
        }
        let opts = match query {
            Some(q) => UrlOptions::parse(q).map_err(|why| bad(&why))?,
            None => UrlOptions::default(),
        };
        let (authority, path) = rest.split_once('/').ok_or_else(|| bad("no bucket"))?;
        let (host, port) = split_host_port(authority).map_err(|why| bad(&why))?;
        let path = path.trim_end_matches('/');
        let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
        check_bucket(bucket).map_err(|why| bad(&why))?;
        if prefix
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
            && !prefix.is_empty()
        {
            return Err(bad("prefix has an empty, '.' or '..' component"));
        }
        if !prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
        {
            return Err(bad(
                "prefix may hold only letters, digits, '-', '_', '.' and '/'",
            ));
        }
        let ip = host.starts_with('[') || host.parse::<std::net::Ipv4Addr>().is_ok();
        let endpoint = match port {
            Some(p) => format!("{scheme}://{host}:{p}"),
            None => format!("{scheme}://{host}"),
        };
        Ok(ObjectConfig {
            endpoint,
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            region: opts
                .region
                .or_else(|| env("AWS_REGION").filter(|r| !r.is_empty()))
                .unwrap_or_else(|| DEFAULT_REGION.to_string()),
            path_style: opts
                .path_style
                .unwrap_or(scheme == "http" || ip || host == "localhost"),
            credentials_file: opts.credentials_file,
            profile: opts.profile,
            ca_file: opts.ca_file,
            concurrency: DEFAULT_CONCURRENCY,
            network: NetworkParams::default(),
        })
    }

    /// The tier's URL, `ENDPOINT/BUCKET[/PREFIX]` (no credentials).
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("{}/{}", self.endpoint, self.bucket)
        } else {
            format!("{}/{}/{}", self.endpoint, self.bucket, self.prefix)
        }
    }

    /// The root certificates of `ca_file=` (none without it), to trust
    /// besides the system's. The file must be readable and hold at least one
    /// PEM certificate; the error is one line, `s3 tier URL: ca_file PATH:
    /// why`.
    pub fn root_certificates(&self) -> io::Result<Vec<object_store::Certificate>> {
        let Some(file) = &self.ca_file else {
            return Ok(Vec::new());
        };
        let at = || format!("s3 tier {}: ca_file {}", self.url(), file.display());
        let pem = std::fs::read(file)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: cannot read it: {e}", at())))?;
        let certs = object_store::Certificate::from_pem_bundle(&pem).map_err(|e| {
            invalid(format!(
                "{}: not a PEM certificate file ({})",
                at(),
                super::store::chain(&e)
            ))
        })?;
        if certs.is_empty() {
            return Err(invalid(format!(
                "{}: holds no PEM certificate (no -----BEGIN CERTIFICATE----- block)",
                at()
            )));
        }
        // A block of base64 that is no certificate passes the PEM parse and
        // fails only when a client adds it to its roots: make one now.
        for (i, c) in certs.iter().enumerate() {
            let options = object_store::ClientOptions::new().with_root_certificate(c.clone());
            if let Err(e) = ReqwestConnector::default().connect(&options) {
                let mut cause: &dyn std::error::Error = &e;
                while let Some(s) = cause.source() {
                    cause = s;
                }
                return Err(invalid(format!(
                    "{}: certificate {} of {} cannot be used ({cause})",
                    at(),
                    i + 1,
                    certs.len()
                )));
            }
        }
        Ok(certs)
    }

    /// The endpoint object_store's builder wants: the bucket's own host for
    /// virtual-hosted requests.
    pub(crate) fn bucket_endpoint(&self) -> String {
        if self.path_style {
            return self.endpoint.clone();
        }
        match self.endpoint.split_once("://") {
            Some((scheme, host)) => format!("{scheme}://{}.{host}", self.bucket),
            None => self.endpoint.clone(),
        }
    }
}

/// `HOST[:PORT]` → host and port; `[v6]:port` keeps its brackets.
fn split_host_port(authority: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if authority.starts_with('[') {
        match authority.find(']') {
            Some(i) => {
                let (h, rest) = authority.split_at(i + 1);
                match rest.strip_prefix(':') {
                    Some(p) => (h, Some(p)),
                    None if rest.is_empty() => (h, None),
                    None => return Err("junk after an IPv6 address".to_string()),
                }
            }
            None => return Err("unclosed '['".to_string()),
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err("no host".to_string());
    }
    let host_ok = host.starts_with('[')
        || host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    if !host_ok {
        return Err(format!(
            "host {host:?} has characters a host name cannot have"
        ));
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return Err(format!("port {p:?} is not a number from 1 to 65535")),
        },
    };
    Ok((host, port))
}

/// S3's bucket naming rules (the part that matters for addressing).
fn check_bucket(bucket: &str) -> Result<(), String> {
    let ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && bucket
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && bucket
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if bucket.is_empty() {
        Err("no bucket".to_string())
    } else if ok {
        Ok(())
    } else {
        Err(format!(
            "bucket {bucket:?} is not 3-63 lowercase letters, digits, '.' or '-'"
        ))
    }
}

/// An environment of `vars` only, for the tests of URLs and credentials.
#[cfg(test)]
pub(super) fn test_env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: std::collections::HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| m.get(k).cloned()
}

#[cfg(test)]
mod tests {
    use super::test_env as env;
    use super::*;
    use std::path::Path;

    #[test]
    fn urls_parse_into_endpoint_bucket_and_prefix() {
        let c = ObjectConfig::parse("http://127.0.0.1:9000/pool/tiers/cold/", &env(&[])).unwrap();
        assert_eq!(c.endpoint, "http://127.0.0.1:9000");
        assert_eq!(c.bucket, "pool");
        assert_eq!(c.prefix, "tiers/cold");
        assert_eq!(c.region, "us-east-1");
        assert!(c.path_style);
        assert_eq!(c.url(), "http://127.0.0.1:9000/pool/tiers/cold");
        assert_eq!(c.bucket_endpoint(), "http://127.0.0.1:9000");

        let c = ObjectConfig::parse(
            "https://s3.example.com/my-bucket",
            &env(&[("AWS_REGION", "eu-west-1")]),
        )
        .unwrap();
        assert_eq!((c.bucket.as_str(), c.prefix.as_str()), ("my-bucket", ""));
        assert_eq!(c.region, "eu-west-1");
        assert!(!c.path_style, "https names are virtual-hosted");
        assert_eq!(c.bucket_endpoint(), "https://my-bucket.s3.example.com");

        let c = ObjectConfig::parse("https://[::1]:9443/b12", &env(&[])).unwrap();
        assert!(c.path_style, "IP addresses are path-style");
        assert_eq!(c.endpoint, "https://[::1]:9443");
        let c = ObjectConfig::parse("https://10.0.0.1/b12", &env(&[])).unwrap();
        assert!(c.path_style);
    }

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

    #[test]
    fn url_options_set_region_path_style_and_credentials() {
        let c = ObjectConfig::parse(
            "http://127.0.0.1:9000/bkt/a/b?region=eu-west-1&path_style=false&profile=work.1\
             &credentials_file=/etc/terrace/s3.cred",
            &env(&[("AWS_REGION", "us-west-2")]),
        )
        .unwrap();
        assert_eq!(
            c.url(),
            "http://127.0.0.1:9000/bkt/a/b",
            "options are not the address"
        );
        assert_eq!((c.bucket.as_str(), c.prefix.as_str()), ("bkt", "a/b"));
        assert_eq!(c.region, "eu-west-1", "the URL wins over AWS_REGION");
        assert!(
            !c.path_style,
            "path_style=false wins over the guess for http"
        );
        assert_eq!(c.profile.as_deref(), Some("work.1"));
        assert_eq!(
            c.credentials_file.as_deref(),
            Some(Path::new("/etc/terrace/s3.cred"))
        );
        assert_eq!(c.bucket_endpoint(), "http://bkt.127.0.0.1:9000");
        // path_style=true for an https name; any order; no prefix.
        let c = ObjectConfig::parse(
            "https://s3.example.com/bkt?path_style=true&region=x",
            &env(&[]),
        )
        .unwrap();
        assert!(c.path_style);
        assert_eq!((c.region.as_str(), c.prefix.as_str()), ("x", ""));
        assert_eq!(c.credentials_file, None);
        assert_eq!(
            UrlOptions::parse("profile=p").unwrap(),
            UrlOptions {
                profile: Some("p".into()),
                ..UrlOptions::default()
            }
        );
    }

    #[test]
    fn a_profile_in_the_url_wins_over_the_environment_keys() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("creds");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id=D1\naws_secret_access_key=D2\n\
             [work]\naws_access_key_id=W1\naws_secret_access_key=W2\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let keys = [
            ("AWS_ACCESS_KEY_ID", "E1"),
            ("AWS_SECRET_ACCESS_KEY", "E2"),
            ("AWS_SHARED_CREDENTIALS_FILE", f),
        ];
        let c = ObjectConfig::parse("http://h/bucket?profile=work", &env(&[])).unwrap();
        let cr = Credentials::resolve(&c, &env(&keys)).unwrap();
        assert_eq!(cr.access_key_id, "W1");
        assert_eq!(cr.source, format!("{f} [work]"));
        // Without a profile in the URL the environment comes first.
        let c = ObjectConfig::parse("http://h/bucket", &env(&[])).unwrap();
        assert_eq!(
            Credentials::resolve(&c, &env(&keys)).unwrap().access_key_id,
            "E1"
        );
        // credentials_file= alone: its [default], whatever the environment.
        let c = ObjectConfig::parse(&format!("http://h/bucket?credentials_file={f}"), &env(&[]))
            .unwrap();
        let cr = Credentials::resolve(&c, &env(&keys)).unwrap();
        assert_eq!(cr.access_key_id, "D1");
        // A profile the file lacks is an error naming both.
        let c = ObjectConfig::parse("http://h/bucket?profile=nope", &env(&[])).unwrap();
        let e = Credentials::resolve(&c, &env(&keys)).unwrap_err();
        assert!(
            e.to_string().contains("[nope]") && e.to_string().contains(f),
            "{e}"
        );
    }

    /// A self-signed CA (EC P-256, valid until 2126), for `ca_file=` tests.
    const TEST_CA: &str = "-----BEGIN CERTIFICATE-----\n\
     MIIBlTCCATugAwIBAgIUR67oKL78lPOjnt2KPN3wOIpFRF8wCgYIKoZIzj0EAwIw\n\
     HzEdMBsGA1UEAwwUVGVycmFjZSB1bml0LXRlc3QgQ0EwIBcNMjYxMTI3MTAzMjI1\n\
     WhgPMjEyNjExMDMxMDMyMjVaMB8xHTAbBgNVBAMMFFRlcnJhY2UgdW5pdC10ZXN0\n\
     IENBMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEDLLjAqTJiEGBBveTNf4JIMsp\n\
     iuMlIDMHDHBi+Sw7PArg1sPNrPVAkkyZbiBZcFJDXsc5xF7aobHyxcbiglqwYaNT\n\
     MFEwHQYDVR0OBBYEFNraekh6I3uqOo+r/VktmcWuTXeBMB8GA1UdIwQYMBaAFNra\n\
     ekh6I3uqOo+r/VktmcWuTXeBMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwID\n\
     SAAwRQIgYaeMe2oAYdH8xr0XhRpyehWjfN140+DYRCC8O6RvDTwCIQCrpD22ibHh\n\
     /j0omEACkD9+y6qi2QBPXg5lYNz/dT3pDg==\n\
     -----END CERTIFICATE-----\n";

    #[test]
    fn ca_file_is_an_absolute_path_and_not_the_address() {
        let c = ObjectConfig::parse(
            "https://127.0.0.1:9443/bkt/p?ca_file=/etc/terrace/ca.pem&region=r1",
            &env(&[]),
        )
        .unwrap();
        assert_eq!(c.ca_file.as_deref(), Some(Path::new("/etc/terrace/ca.pem")));
        assert_eq!(c.url(), "https://127.0.0.1:9443/bkt/p");
        assert_eq!(c.region, "r1");
        assert!(c.path_style, "an IP address stays path-style");
        assert_eq!(
            UrlOptions::parse("ca_file=/a/b.pem").unwrap(),
            UrlOptions {
                ca_file: Some("/a/b.pem".into()),
                ..UrlOptions::default()
            }
        );
        let c = ObjectConfig::parse("https://h/bucket", &env(&[])).unwrap();
        assert_eq!(c.ca_file, None);
        assert!(c.root_certificates().unwrap().is_empty(), "no file: none");
        for (q, why) in [
            (
                "ca_file=ca.pem",
                "ca_file \"ca.pem\" is not an absolute path",
            ),
            ("ca_file=./ca.pem", "not an absolute path"),
            ("ca_file=~/ca.pem", "not an absolute path"),
            ("ca_file=", "has no value"),
            ("ca_file=/a&ca_file=/b", "\"ca_file\" given twice"),
            ("ca_file=/a b", "spaces"),
        ] {
            let e = ObjectConfig::parse(&format!("https://h/bucket?{q}"), &env(&[])).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            assert!(e.to_string().contains(why), "{q}: {e}");
        }
        assert!(URL_OPTIONS.contains("ca_file"));
    }

    #[test]
    fn ca_file_must_be_readable_and_hold_a_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str| {
            let f = dir.path().join(name);
            ObjectConfig::parse(
                &format!("https://127.0.0.1:9443/bkt/p?ca_file={}", f.display()),
                &env(&[]),
            )
            .unwrap()
        };
        let one_line = |e: &io::Error, file: &str, why: &str| {
            let m = e.to_string();
            let head = format!(
                "s3 tier https://127.0.0.1:9443/bkt/p: ca_file {}: ",
                dir.path().join(file).display()
            );
            assert!(m.starts_with(&head) && m.contains(why), "{m}");
            assert!(!m.contains('\n'), "{m}");
        };
        // One certificate; two (a bundle), with text around them.
        std::fs::write(dir.path().join("ca.pem"), TEST_CA).unwrap();
        assert_eq!(at("ca.pem").root_certificates().unwrap().len(), 1);
        std::fs::write(
            dir.path().join("bundle.pem"),
            format!("subject=CN = one\n{TEST_CA}\n# two\n{TEST_CA}"),
        )
        .unwrap();
        assert_eq!(at("bundle.pem").root_certificates().unwrap().len(), 2);
        // Missing.
        let e = at("missing.pem").root_certificates().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        one_line(&e, "missing.pem", "cannot read it:");
        // A directory is not readable as a file.
        std::fs::create_dir(dir.path().join("dir.pem")).unwrap();
        let e = at("dir.pem").root_certificates().unwrap_err();
        one_line(&e, "dir.pem", "cannot read it:");
        // No certificate: empty, text, only a private key.
        for (name, text) in [
            ("empty.pem", ""),
            ("text.pem", "not a certificate\n"),
            (
                "key.pem",
                "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n",
            ),
        ] {
            std::fs::write(dir.path().join(name), text).unwrap();
            let e = at(name).root_certificates().unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            one_line(&e, name, "holds no PEM certificate");
        }
        // A certificate block that is not base64.
        std::fs::write(
            dir.path().join("broken.pem"),
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = at("broken.pem").root_certificates().unwrap_err();
        one_line(&e, "broken.pem", "not a PEM certificate file");
        // Base64 that is no certificate (the second of two blocks).
        std::fs::write(
            dir.path().join("junk.pem"),
            format!("{TEST_CA}-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
        )
        .unwrap();
        let e = at("junk.pem").root_certificates().unwrap_err();
        one_line(&e, "junk.pem", "certificate 2 of 2 cannot be used (");
    }

    #[test]
    fn bad_urls_are_refused_with_the_reason() {
        let cases = [
            ("s3://bucket/x", "scheme"),
            ("127.0.0.1:9000/bucket", "no scheme"),
            ("http://127.0.0.1:9000", "no bucket"),
            ("http://127.0.0.1:9000/", "no bucket"),
            ("http://:9000/bucket", "no host"),
            ("http://h:99999/bucket", "port"),
            ("http://h:/bucket", "port"),
            ("http://h:0/bucket", "port"),
            ("http://h/Bucket", "bucket"),
            ("http://h/ab", "bucket"),
            ("http://h/-ab", "bucket"),
            ("http://h/bucket//x", "prefix"),
            ("http://h/bucket/a/../b", "prefix"),
            ("http://h/bucket/a%20b", "prefix may hold only"),
            ("http://h/bucket/tier:1", "prefix may hold only"),
            ("http://h/bucket?x=1", "unknown option \"x\""),
            ("http://h/bucket?", "empty option list"),
            ("http://h/bucket?region", "not KEY=VALUE"),
            ("http://h/bucket?region=", "has no value"),
            ("http://h/bucket?region=a&region=b", "given twice"),
            ("http://h/bucket?region=eu west", "spaces"),
            ("http://h/bucket?region=eu%2Dwest", "'%'"),
            ("http://h/bucket?region=a/b", "region \"a/b\""),
            ("http://h/bucket?path_style=yes", "expected true or false"),
            ("http://h/bucket?profile=a/b", "profile \"a/b\""),
            (
                "http://h/bucket?credentials_file=s3.cred",
                "not an absolute path",
            ),
            (
                "http://h/bucket?aws_secret_access_key=x",
                "never stored in the pool",
            ),
            ("http://h/bucket?access_key=x", "never stored in the pool"),
            ("http://h/bucket#frag", "fragment"),
            ("http://user:pw@h/bucket", "user info"),
            ("http://h_x/bucket", "host"),
            ("http://[::1/bucket", "'['"),
        ];
        for (url, why) in cases {
            let e = ObjectConfig::parse(url, &env(&[])).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            let m = e.to_string();
            assert!(
                m.contains(why) && m.contains("expected http(s)://"),
                "{url}: {m}"
            );
        }
    }
}
