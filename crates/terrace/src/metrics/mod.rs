//! Prometheus metrics of a mounted pool: `terrace mount -o
//! metrics=127.0.0.1:9464` serves them over HTTP at `/metrics`, in the
//! Prometheus text format (version 0.0.4).
//!
//! - [`parse_addr`] reads the option's address (at option parsing: a bad
//!   one is a usage error before anything is opened);
//! - [`http::Endpoint`] binds it (in the serving process, before the pool is
//!   mounted: a port in use fails the mount) and serves scrapes on a thread
//!   of its own until [`http::Serving::stop`], which the daemon calls when
//!   the FUSE session has ended, before the pool is closed;
//! - [`collect`] turns the core's status and the FUSE adapter's request
//!   latencies into metric families at each scrape.
//!
//! Invariants: every number exported is one the core or the adapter
//! measures (nothing is estimated here); counters are counts since the
//! mount (they restart at 0 with the next mount, which Prometheus treats as
//! a counter reset); a scrape takes the same snapshot `terrace status` does,
//! so it costs what a `terrace status` costs, and nothing is measured between
//! scrapes except the request latencies, which are recorded only when the
//! option is given.

pub mod collect;
pub mod http;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// What the option looks like, for messages.
pub const FORM: &str = "metrics=IP:PORT, e.g. metrics=127.0.0.1:9464 or metrics=[::1]:9464";

/// The address of `metrics=ADDR`: `IP:PORT`, `[IPv6]:PORT` or
/// `localhost:PORT`, with a port from 1 to 65535.
pub fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    let bad = |why: &str| format!("mount option \"metrics={text}\": {why}; use {FORM}");
    let addr = match text.strip_prefix("localhost:") {
        Some(port) => port
            .parse::<u16>()
            .map(|p| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), p))
            .map_err(|_| bad("the port is not a number from 1 to 65535"))?,
        None => text.parse::<SocketAddr>().map_err(|_| {
            if text.is_empty() {
                bad("no address given")
            } else if !text.contains(':') {
                bad("no port given")
            } else {
                bad("not an IP address and port")
            }
        })?,
    };
    if addr.port() == 0 {
        return Err(bad("port 0 is not a port scrapers can find"));
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_ip_and_port() {
        assert_eq!(
            parse_addr("127.0.0.1:9464").unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        assert_eq!(
            parse_addr("[::1]:9464").unwrap(),
            "[::1]:9464".parse().unwrap()
        );
        assert_eq!(
            parse_addr("0.0.0.0:80").unwrap(),
            "0.0.0.0:80".parse().unwrap()
        );
        assert_eq!(
            parse_addr("localhost:9464").unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
    }

    #[test]
    fn bad_addresses_say_what_is_wrong_and_the_form() {
        for (text, why) in [
            ("", "no address given"),
            ("9464", "no port given"),
            ("127.0.0.1", "no port given"),
            ("127.0.0.1:", "not an IP address and port"),
            ("127.0.0.1:99999", "not an IP address and port"),
            ("example.com:9464", "not an IP address and port"),
            ("::1:9464", "not an IP address and port"),
            ("localhost:x", "the port is not a number"),
            ("127.0.0.1:0", "port 0"),
        ] {
            let e = parse_addr(text).unwrap_err();
            assert!(e.contains(why), "{text:?}: {e}");
            assert!(e.contains(&format!("\"metrics={text}\"")), "{e}");
            assert!(e.contains("127.0.0.1:9464"), "{e}");
        }
    }
}
