//! What a failed request says about the tier's configuration: wrong keys,
//! a missing bucket, a wrong region, an endpoint nobody answers at. Such a
//! failure gets one plain line naming the tier and what to check
//! ([`Problem::message`]) instead of object_store's error chain, whose S3
//! XML answer spans several lines.
//!
//! object_store keeps its HTTP error type private, so the status and the
//! S3 error code are read from the error's text (`status code: 403`,
//! `<Code>NoSuchBucket</Code>`); transport failures are found by their
//! public [`HttpError`] kind in the source chain.
//!
//! | answer | problem |
//! |---|---|
//! | 403 `InvalidAccessKeyId`, `SignatureDoesNotMatch`, `AccessDenied`, token codes; any 401 or 403 | access denied |
//! | 404 `NoSuchBucket` | the bucket does not exist |
//! | 400 `AuthorizationHeaderMalformed`, 301 `PermanentRedirect`, a bare redirect | wrong region |
//! | TLS handshake refuses the server's certificate (`invalid peer certificate`) | untrusted certificate |
//! | connect error or time-out | unreachable |
//!
//! None of them is retried for long: object_store retries no 4xx answer,
//! and transport errors only within the retry budget, which mkfs and the
//! opening of a tier keep short.

use object_store::client::{HttpError, HttpErrorKind};

use super::store::chain;

/// A configuration problem a failed request shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// 401 or 403: the keys are wrong or may not use the bucket; the S3
    /// error code when the answer had one.
    AccessDenied {
        /// `InvalidAccessKeyId`, `SignatureDoesNotMatch`, `AccessDenied` …
        code: Option<String>,
    },
    /// 404 `NoSuchBucket`.
    NoSuchBucket,
    /// The store signs or serves another region; its message.
    WrongRegion {
        /// The store's `<Message>`, or object_store's text.
        detail: String,
    },
    /// An https endpoint whose certificate the client does not trust (an
    /// unknown issuer: a private CA not given in `ca_file=`; a name the
    /// certificate does not cover; expired …).
    Untrusted {
        /// rustls's reason (`invalid peer certificate: UnknownIssuer` …).
        cause: String,
    },
    /// No answer: the connection failed or timed out.
    Unreachable {
        /// The innermost cause (`Connection refused (os error 111)` …).
        cause: String,
        /// Tries made (1 + retries), when the error says.
        tries: Option<usize>,
    },
}

/// How rustls words every refusal of the server's certificate.
const UNTRUSTED: &str = "invalid peer certificate";

/// The text between `<TAG>` and `</TAG>` in `text`.
fn xml_field<'a>(text: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = text.find(&open)? + open.len();
    let len = text[start..].find(&format!("</{tag}>"))?;
    Some(text[start..start + len].trim()).filter(|s| !s.is_empty())
}

/// The HTTP status in object_store's text of an error answer.
fn status(text: &str) -> Option<u16> {
    let i = text.find("status code: ")? + "status code: ".len();
    text[i..].get(..3)?.parse().ok()
}

/// `after N retries` in object_store's text → N + 1 tries.
fn tries(text: &str) -> Option<usize> {
    let i = text.find("after ")? + "after ".len();
    let rest = &text[i..];
    let n: usize = rest[..rest.find(' ')?].parse().ok()?;
    rest[rest.find(' ')?..]
        .starts_with(" retries")
        .then_some(n + 1)
}

/// The deepest source of `e`.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(s) = cur.source() {
        cur = s;
    }
    cur.to_string()
}

impl Problem {
    /// The problem `e` shows, if it is one of the module's.
    pub fn of(e: &object_store::Error) -> Option<Problem> {
        let text = chain(e);
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = cur {
            if let Some(h) = err.downcast_ref::<HttpError>() {
                let cause = root_cause(h);
                if h.kind() == HttpErrorKind::Connect && cause.contains(UNTRUSTED) {
                    return Some(Problem::Untrusted { cause });
                }
                if matches!(h.kind(), HttpErrorKind::Connect | HttpErrorKind::Timeout) {
                    return Some(Problem::Unreachable {
                        cause,
                        tries: tries(&text).or(Some(1)),
                    });
                }
                break;
            }
            cur = err.source();
        }
        let denied = matches!(
            e,
            object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }
        );
        Problem::from_text(&text, denied)
    }

    /// [`of`](Self::of) for an answer's text: `denied` when object_store
    /// already classed it 401/403.
    pub fn from_text(text: &str, denied: bool) -> Option<Problem> {
        let code = xml_field(text, "Code");
        let status = status(text);
        match code {
            Some("NoSuchBucket") => return Some(Problem::NoSuchBucket),
            Some(
                "InvalidAccessKeyId"
                | "SignatureDoesNotMatch"
                | "AccessDenied"
                | "InvalidToken"
                | "ExpiredToken"
                | "InvalidSecurity"
                | "AllAccessDisabled"
                | "AccountProblem",
            ) => {
                return Some(Problem::AccessDenied {
                    code: code.map(str::to_string),
                })
            }
            Some("AuthorizationHeaderMalformed" | "PermanentRedirect" | "InvalidRegion") => {
                let detail = xml_field(text, "Message").unwrap_or(code.unwrap_or_default());
                return Some(Problem::WrongRegion {
                    detail: detail.to_string(),
                });
            }
            _ => {}
        }
        if text.contains("Received redirect without LOCATION") {
            return Some(Problem::WrongRegion {
                detail: "the store answered with a redirect (another region's endpoint)"
                    .to_string(),
            });
        }
        if denied || matches!(status, Some(401 | 403)) {
            return Some(Problem::AccessDenied {
                code: code.map(str::to_string),
            });
        }
        None
    }

    /// The one-line message naming the tier and what to check; `request`
    /// says which request failed (`GET KEY`), for an unreachable store.
    pub fn message(&self, at: &Where<'_>, request: &str) -> String {
        let url = at.url;
        match self {
            Problem::AccessDenied { code } => {
                let why = match code.as_deref() {
                    Some("InvalidAccessKeyId") => {
                        "InvalidAccessKeyId: the store does not know the access key; "
                    }
                    Some("SignatureDoesNotMatch") => {
                        "SignatureDoesNotMatch: the secret key is wrong; "
                    }
                    Some("AccessDenied") => {
                        "AccessDenied: the key may not use this bucket or prefix; "
                    }
                    Some("ExpiredToken" | "InvalidToken") => {
                        "the session token is expired or invalid; "
                    }
                    _ => "",
                };
                let check = match at.creds {
                    Some("environment") | None => {
                        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY".to_string()
                    }
                    Some(file) => format!("the keys of {file}"),
                };
                format!("s3 tier {url}: access denied ({why}check {check})")
            }
            Problem::NoSuchBucket => format!(
                "s3 tier {url}: bucket {:?} does not exist (create it first)",
                at.bucket
            ),
            Problem::WrongRegion { detail } => format!(
                "s3 tier {url}: wrong region {:?} for this store ({}; give region=NAME in the \
                 tier URL or set AWS_REGION)",
                at.region,
                detail.trim_end_matches('.')
            ),
            Problem::Untrusted { cause } => {
                let hint = if cause.contains("UnknownIssuer") {
                    "if a private CA signed it, give ca_file=/PATH/TO/CA.pem in the tier URL"
                } else {
                    "check the server's certificate and the URL's host"
                };
                format!(
                    "s3 tier {url}: the TLS certificate of {} is not trusted: {cause} ({hint})",
                    at.endpoint
                )
            }
            Problem::Unreachable { cause, tries } => {
                let tries = match tries {
                    Some(1) => "1 try".to_string(),
                    Some(n) => format!("{n} tries"),
                    None => "tries".to_string(),
                };
                format!(
                    "s3 tier {url}: cannot reach {}: {cause} ({request}, {tries}; is the server \
                     running and the URL right?)",
                    at.endpoint
                )
            }
        }
    }
}

/// What a [`Problem::message`] names.
#[derive(Clone, Copy, Debug)]
pub struct Where<'a> {
    /// `ENDPOINT/BUCKET[/PREFIX]`.
    pub url: &'a str,
    /// `http(s)://HOST[:PORT]`.
    pub endpoint: &'a str,
    /// Bucket name.
    pub bucket: &'a str,
    /// Signing region.
    pub region: &'a str,
    /// Where the keys came from (`environment`, `FILE [PROFILE]`).
    pub creds: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::super::store::{test_bucket, Bucket};
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn answer(status: &str, code: &str) -> String {
        format!(
            "Generic S3 error: Error performing list request: Error performing GET \
             http://127.0.0.1:9000/bkt?list-type=2 in 1.2ms - Server returned non-2xx status \
             code: {status}: <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
             <Message>The message.</Message><BucketName>bkt</BucketName></Error>"
        )
    }

    const AT: Where<'static> = Where {
        url: "http://127.0.0.1:9000/bkt/p",
        endpoint: "http://127.0.0.1:9000",
        bucket: "bkt",
        region: "us-east-1",
        creds: Some("environment"),
    };

    #[test]
    fn s3_error_codes_map_to_problems() {
        for code in [
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "AccessDenied",
        ] {
            assert_eq!(
                Problem::from_text(&answer("403 Forbidden", code), false),
                Some(Problem::AccessDenied {
                    code: Some(code.to_string())
                })
            );
        }
        assert_eq!(
            Problem::from_text(&answer("404 Not Found", "NoSuchBucket"), false),
            Some(Problem::NoSuchBucket)
        );
        assert_eq!(
            Problem::from_text(&answer("404 Not Found", "NoSuchKey"), false),
            None
        );
        assert!(matches!(
            Problem::from_text(
                &answer("400 Bad Request", "AuthorizationHeaderMalformed"),
                false
            ),
            Some(Problem::WrongRegion { .. })
        ));
        // A 403 without a body (HEAD) or a code this module does not know.
        assert_eq!(
            Problem::from_text(
                "Server returned non-2xx status code: 403 Forbidden: ",
                false
            ),
            Some(Problem::AccessDenied { code: None })
        );
        assert_eq!(
            Problem::from_text("whatever", true),
            Some(Problem::AccessDenied { code: None })
        );
        assert_eq!(
            Problem::from_text(&answer("503 Service Unavailable", "SlowDown"), false),
            None
        );
        assert_eq!(
            tries("GET x in 3s, after 2 retries, max_retries: 2"),
            Some(3)
        );
        assert_eq!(tries("GET x in 3s - refused"), None);
    }

    /// A one-answer HTTP server on 127.0.0.1: every request gets `status`
    /// with an S3 error body of `code`; counts the requests.
    fn canned_server(status: &'static str, code: &'static str) -> (u16, Arc<AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(AtomicUsize::new(0));
        let n = Arc::clone(&seen);
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { return };
                n.fetch_add(1, Ordering::SeqCst);
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && c.read(&mut b).unwrap_or(0) == 1 {
                    head.push(b[0]);
                }
                let body = format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
                     <Message>Canned {code}.</Message><BucketName>bkt</BucketName></Error>"
                );
                let _ = write!(
                    c,
                    "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (port, seen)
    }

    fn bucket_at(port: u16, retries: usize) -> Bucket {
        let url = format!("http://127.0.0.1:{port}/bkt/pre");
        test_bucket(&url, retries, "environment")
    }

    /// object_store's real errors for real HTTP answers map to the
    /// problems, on one line, at once (no retries of a 4xx).
    #[test]
    fn answers_of_a_server_become_one_line_problems_without_retries() {
        let cases = [
            ("403 Forbidden", "InvalidAccessKeyId", "access denied (InvalidAccessKeyId: the store does not know the access key; check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"),
            ("403 Forbidden", "SignatureDoesNotMatch", "access denied (SignatureDoesNotMatch: the secret key is wrong;"),
            ("403 Forbidden", "AccessDenied", "access denied (AccessDenied:"),
            ("404 Not Found", "NoSuchBucket", "bucket \"bkt\" does not exist (create it first)"),
            ("400 Bad Request", "AuthorizationHeaderMalformed", "wrong region \"us-east-1\" for this store (Canned AuthorizationHeaderMalformed;"),
        ];
        for (status, code, want) in cases {
            let (port, seen) = canned_server(status, code);
            let b = bucket_at(port, 5);
            let t0 = Instant::now();
            for e in [
                b.list().unwrap_err(),
                b.get("pre/terrace-tier.json").unwrap_err(),
            ] {
                let m = e.to_string();
                let url = format!("s3 tier http://127.0.0.1:{port}/bkt/pre: ");
                assert!(m.starts_with(&url) && m.contains(want), "{code}: {m}");
                assert!(!m.contains('\n'), "{m}");
            }
            assert_eq!(seen.load(Ordering::SeqCst), 2, "{code}: not retried");
            assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
            assert!(b.failing().is_some(), "counts as a failing store");
        }
        // A missing key is no problem: `get` says there is none.
        let (port, _) = canned_server("404 Not Found", "NoSuchKey");
        assert_eq!(bucket_at(port, 5).get("pre/k").unwrap(), None);
        // Any other failure keeps the request and the cause, on one line.
        let (port, _) = canned_server("409 Conflict", "OperationAborted");
        let m = bucket_at(port, 0).list().unwrap_err().to_string();
        assert!(m.starts_with("s3 LIST http://"), "{m}");
        assert!(
            m.contains("OperationAborted: Canned OperationAborted."),
            "{m}"
        );
        assert!(!m.contains('\n') && !m.contains("<?xml"), "{m}");
    }

    #[test]
    fn an_endpoint_nobody_listens_on_is_unreachable_after_the_retries() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let m = bucket_at(port, 2).list().unwrap_err().to_string();
        let want = format!(
            "s3 tier http://127.0.0.1:{port}/bkt/pre: cannot reach http://127.0.0.1:{port}: "
        );
        assert!(m.starts_with(&want), "{m}");
        assert!(m.to_lowercase().contains("connection refused"), "{m}");
        assert!(m.contains("(LIST pre/, 3 tries;"), "{m}");
    }

    #[test]
    fn messages_are_one_line_and_say_what_to_check() {
        let denied = Problem::AccessDenied {
            code: Some("SignatureDoesNotMatch".into()),
        };
        let m = denied.message(&AT, "GET k");
        assert_eq!(
            m,
            "s3 tier http://127.0.0.1:9000/bkt/p: access denied (SignatureDoesNotMatch: the \
             secret key is wrong; check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
        );
        let from_file = Where {
            creds: Some("/etc/terrace/s3.cred [default]"),
            ..AT
        };
        let m = denied.message(&from_file, "GET k");
        assert!(
            m.ends_with("check the keys of /etc/terrace/s3.cred [default])"),
            "{m}"
        );
        assert_eq!(
            Problem::NoSuchBucket.message(&AT, "GET k"),
            "s3 tier http://127.0.0.1:9000/bkt/p: bucket \"bkt\" does not exist (create it first)"
        );
        let m = Problem::Unreachable {
            cause: "Connection refused (os error 111)".into(),
            tries: Some(3),
        }
        .message(&AT, "LIST p/");
        assert_eq!(
            m,
            "s3 tier http://127.0.0.1:9000/bkt/p: cannot reach http://127.0.0.1:9000: Connection \
             refused (os error 111) (LIST p/, 3 tries; is the server running and the URL right?)"
        );
        let https = Where {
            url: "https://127.0.0.1:9443/bkt/p",
            endpoint: "https://127.0.0.1:9443",
            ..AT
        };
        let m = Problem::Untrusted {
            cause: "invalid peer certificate: UnknownIssuer".into(),
        }
        .message(&https, "LIST p/");
        assert_eq!(
            m,
            "s3 tier https://127.0.0.1:9443/bkt/p: the TLS certificate of https://127.0.0.1:9443 \
             is not trusted: invalid peer certificate: UnknownIssuer (if a private CA signed it, \
             give ca_file=/PATH/TO/CA.pem in the tier URL)"
        );
        let m = Problem::Untrusted {
            cause: "invalid peer certificate: certificate not valid for name \"10.0.0.1\"".into(),
        }
        .message(&https, "LIST p/");
        assert!(
            m.ends_with("(check the server's certificate and the URL's host)"),
            "{m}"
        );
        let m = Problem::WrongRegion {
            detail: "the region is wrong; expecting 'us-east-1'.".into(),
        }
        .message(&AT, "GET k");
        assert!(m.contains("wrong region \"us-east-1\""), "{m}");
        assert!(m.contains("expecting 'us-east-1';"), "{m}");
        for p in [
            denied,
            Problem::NoSuchBucket,
            Problem::Unreachable {
                cause: "x".into(),
                tries: None,
            },
        ] {
            assert!(!p.message(&AT, "GET k").contains('\n'));
        }
    }
}
