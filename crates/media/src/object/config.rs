//! Where an object tier lives and how to sign in: [`ObjectConfig`] and
//! [`Credentials`].
//!
//! A tier is named by one URL, `http(s)://HOST[:PORT]/BUCKET[/PREFIX]`
//! ([`ObjectConfig::from_url`]), maybe followed by options
//! `?region=…&path_style=…&credentials_file=…&profile=…&ca_file=…&sign_payload=…`
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
//!
//! This file parses the URL into an [`ObjectConfig`]; the URL's options are
//! in `url_options.rs`, the `ca_file=` certificates in `certificates.rs`,
//! the credentials in `credentials.rs` and the retries and time-outs
//! ([`NetworkParams`]) in `network.rs`.

use std::io;
use std::path::PathBuf;

pub use super::credentials::Credentials;
pub use super::network::{NetworkParams, BACKOFF_BASE, MAX_BACKOFF};
pub use super::url_options::{UrlOptions, URL_OPTIONS};

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
    /// Sign upload bodies (SigV4 signed payload) instead of sending
    /// `UNSIGNED-PAYLOAD` (`sign_payload=`; default: signed over plain http,
    /// where nothing else lets the store refuse a body damaged on the way;
    /// unsigned over https, where TLS does).
    pub sign_payload: bool,
    /// Requests in flight at most per `sync` or read (at least 1).
    pub concurrency: usize,
    /// Retries and timeouts of requests.
    pub network: NetworkParams,
}

pub(super) fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
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
            sign_payload: opts.sign_payload.unwrap_or(scheme == "http"),
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
        assert!(
            c.sign_payload,
            "over plain http bodies are signed unless asked"
        );
        // path_style=true for an https name; any order; no prefix.
        let c = ObjectConfig::parse(
            "https://s3.example.com/bkt?path_style=true&region=x&sign_payload=true",
            &env(&[]),
        )
        .unwrap();
        assert!(c.path_style);
        assert!(c.sign_payload);
        let plain = ObjectConfig::parse("https://s3.example.com/bkt", &env(&[])).unwrap();
        assert!(
            !plain.sign_payload,
            "over https TLS covers the body: unsigned"
        );
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
