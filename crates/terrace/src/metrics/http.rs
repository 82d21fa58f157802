//! The HTTP side of the metrics endpoint: a listening socket and one thread
//! that answers scrapes, one connection at a time.
//!
//! Only what a Prometheus scraper (or curl) needs is spoken: `GET` or
//! `HEAD` of `/metrics` (query strings ignored) gets the page, `/` a pointer
//! to it, other paths 404 and other methods 405; every answer closes the
//! connection. A client gets [`IO_TIMEOUT`] in all to send its request and
//! as long for each write of the answer (a page of a few tens of KiB: one
//! write, usually), so a stuck or trickling client delays other scrapes, and
//! the unmount, by seconds at most.
//!
//! Invariants: the socket is bound by [`Endpoint::bind`] before anything
//! else of the mount happens, and closed by [`Serving::stop`] (or when the
//! [`Serving`] is dropped), which returns only once the thread has ended —
//! no scrape runs after it. Errors of one connection end that connection,
//! never the thread.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a client may take to send its request and to read the answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest request head read (request line and headers).
const MAX_REQUEST: usize = 8 << 10;

/// The `Content-Type` of the Prometheus text format.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// A bound, not yet serving, metrics socket.
#[derive(Debug)]
pub struct Endpoint {
    listener: TcpListener,
}

/// What a scrape of `/metrics` gets: the page, or why it could not be made.
pub type Page = Result<String, String>;

impl Endpoint {
    /// Binds `addr` (the socket is close-on-exec).
    pub fn bind(addr: SocketAddr) -> io::Result<Endpoint> {
        Ok(Endpoint {
            listener: TcpListener::bind(addr)?,
        })
    }

    /// The address bound (the port chosen when asked for port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves scrapes on a thread of its own; `page` makes each answer to
    /// `/metrics`.
    pub fn serve(self, page: impl Fn() -> Page + Send + 'static) -> io::Result<Serving> {
        let waker = self.listener.try_clone()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let listener = self.listener;
        let thread = std::thread::Builder::new()
            .name("terrace-metrics".into())
            .spawn(move || accept_loop(&listener, &stopping, &page))?;
        Ok(Serving {
            waker,
            stop,
            thread: Some(thread),
        })
    }
}

/// A serving endpoint; stopped when dropped.
#[derive(Debug)]
pub struct Serving {
    /// The listening socket (shared with the thread), to wake its accept.
    waker: TcpListener,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Serving {
    /// Stops serving: closes the listening socket for new connections and
    /// waits for the thread (and a scrape it is answering) to end.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Safety: shutdown(2) on a descriptor this value owns (a duplicate of
        // the thread's); on Linux it makes a blocked accept(2) of the
        // listening socket return EINVAL.
        unsafe { libc::shutdown(self.waker.as_raw_fd(), libc::SHUT_RDWR) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.halt();
    }
}

fn accept_loop(listener: &TcpListener, stop: &AtomicBool, page: &dyn Fn() -> Page) {
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::SeqCst) {
            return;
        }
        match accepted {
            Ok((stream, _)) => {
                // A client that misbehaves only loses its own answer.
                let _ = answer(stream, page);
            }
            // Out of descriptors, a connection reset before it was
            // accepted: try again shortly.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// A parsed request line.
#[derive(Debug, PartialEq, Eq)]
pub struct RequestLine<'a> {
    /// The method.
    pub method: &'a str,
    /// The path, without a query string.
    pub path: &'a str,
}

/// The request line of a request head (`GET /metrics?x HTTP/1.1`).
pub fn request_line(head: &str) -> Option<RequestLine<'_>> {
    let line = head.lines().next()?;
    let mut words = line.split_ascii_whitespace();
    let method = words.next()?;
    let target = words.next()?;
    let version = words.next()?;
    if !version.starts_with("HTTP/") || words.next().is_some() {
        return None;
    }
    let path = target.split('?').next().unwrap_or(target);
    Some(RequestLine { method, path })
}

/// Status line, content type and body of the answer to `head`.
pub fn respond(head: &str, page: &dyn Fn() -> Page) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    let Some(req) = request_line(head) else {
        return ("400 Bad Request", TEXT, "bad request\n".into());
    };
    if req.method != "GET" && req.method != "HEAD" {
        return ("405 Method Not Allowed", TEXT, "only GET and HEAD\n".into());
    }
    match req.path {
        "/metrics" => match page() {
            Ok(body) => ("200 OK", CONTENT_TYPE, body),
            Err(e) => (
                "500 Internal Server Error",
                TEXT,
                format!("cannot gather the metrics: {e}\n"),
            ),
        },
        "/" => (
            "200 OK",
            TEXT,
            "Terrace metrics: GET /metrics (Prometheus text format)\n".into(),
        ),
        _ => ("404 Not Found", TEXT, "not found; try /metrics\n".into()),
    }
}

/// Reads one request from `stream` and answers it.
fn answer(mut stream: TcpStream, page: &dyn Fn() -> Page) -> io::Result<()> {
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let deadline = std::time::Instant::now() + IO_TIMEOUT;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        // A client trickling bytes gets no more time than one that is silent.
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST {
            break;
        }
    }
    let head = String::from_utf8_lossy(&head);
    let (status, content_type, body) = respond(&head, page);
    let is_head = request_line(&head).is_some_and(|r| r.method == "HEAD");
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !is_head {
        out.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&out)?;
    let _ = stream.shutdown(Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn request_lines_parse() {
        assert_eq!(
            request_line("GET /metrics?name[]=x HTTP/1.1\r\nHost: a\r\n\r\n"),
            Some(RequestLine {
                method: "GET",
                path: "/metrics"
            })
        );
        assert_eq!(request_line(""), None);
        assert_eq!(request_line("GET /metrics"), None);
        assert_eq!(request_line("GET /metrics FTP/1 x"), None);
    }

    #[test]
    fn answers_by_method_and_path() {
        let page = || Ok::<_, String>("x 1\n".to_string());
        assert_eq!(respond("GET /metrics HTTP/1.1\r\n\r\n", &page).0, "200 OK");
        assert_eq!(respond("GET /metrics HTTP/1.1\r\n\r\n", &page).2, "x 1\n");
        assert_eq!(respond("GET / HTTP/1.0\r\n\r\n", &page).0, "200 OK");
        assert_eq!(
            respond("GET /other HTTP/1.1\r\n\r\n", &page).0,
            "404 Not Found"
        );
        assert_eq!(
            respond("POST /metrics HTTP/1.1\r\n\r\n", &page).0,
            "405 Method Not Allowed"
        );
        assert_eq!(respond("garbage", &page).0, "400 Bad Request");
        let broken = || Err::<String, _>("no".to_string());
        assert_eq!(
            respond("GET /metrics HTTP/1.1\r\n\r\n", &broken).0,
            "500 Internal Server Error"
        );
    }

    #[test]
    fn serves_scrapes_until_stopped_then_the_port_is_closed() {
        let ep = Endpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = ep.local_addr().unwrap();
        let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = n.clone();
        let serving = ep
            .serve(move || Ok(format!("scrapes {}\n", seen.fetch_add(1, Ordering::SeqCst))))
            .unwrap();
        let a = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(a.starts_with("HTTP/1.1 200 OK\r\n"), "{a}");
        assert!(a.contains("Content-Type: text/plain; version=0.0.4"), "{a}");
        assert!(a.ends_with("\r\n\r\nscrapes 0\n"), "{a}");
        let b = get(addr, "HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            b.ends_with("Connection: close\r\n\r\n"),
            "HEAD has no body: {b}"
        );
        // A client that connects and says nothing does not stop the others.
        let idle = TcpStream::connect(addr).unwrap();
        drop(idle);
        assert!(get(addr, "GET /metrics HTTP/1.1\r\n\r\n").contains("scrapes 2"));
        serving.stop();
        assert!(TcpStream::connect(addr).is_err(), "still listening");
        // The address is free again.
        drop(Endpoint::bind(addr).unwrap());
    }

    #[test]
    fn a_port_in_use_is_an_error_not_a_panic() {
        let a = Endpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let e = Endpoint::bind(a.local_addr().unwrap()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    }
}
