//! The root certificates of `ca_file=`: read, parsed as PEM and each tried
//! in a client, with one-line errors ([`ObjectConfig::root_certificates`]).

use std::io;

use object_store::client::{HttpConnector, ReqwestConnector};

use super::config::{invalid, ObjectConfig};

impl ObjectConfig {
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
}

#[cfg(test)]
mod tests {
    use super::super::config::test_env as env;
    use super::super::url_options::{UrlOptions, URL_OPTIONS};
    use super::*;
    use std::path::Path;

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
}
