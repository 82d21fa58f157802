//! Credentials of an object tier: an access key, its secret and maybe a
//! session token, from the standard places only ([`Credentials::resolve`]:
//! the environment, a named file and profile, `~/.aws/credentials`), never
//! from the pool (split out of `config.rs`, which parses the tier URL).

use super::config::{invalid, ObjectConfig};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// An access key, its secret and maybe a session token.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
    /// Session token of temporary credentials.
    pub session_token: Option<String>,
    /// Where they came from, for messages (`environment`, `FILE [PROFILE]`).
    pub source: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<hidden>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<hidden>"),
            )
            .field("source", &self.source)
            .finish()
    }
}

impl Credentials {
    /// The credentials for `cfg` from the process's environment and files.
    pub fn from_env(cfg: &ObjectConfig) -> io::Result<Credentials> {
        Credentials::resolve(cfg, &|k| std::env::var(k).ok())
    }

    /// Looks in the order of the module docs; an error names every place
    /// looked at.
    pub fn resolve(
        cfg: &ObjectConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> io::Result<Credentials> {
        let profile = cfg
            .profile
            .clone()
            .or_else(|| env("AWS_PROFILE").filter(|p| !p.is_empty()))
            .unwrap_or_else(|| "default".to_string());
        if let Some(file) = &cfg.credentials_file {
            return from_file(file, &profile)?.ok_or_else(|| {
                invalid(format!(
                    "S3 credentials: no profile [{profile}] with aws_access_key_id and \
                     aws_secret_access_key in {}",
                    file.display()
                ))
            });
        }
        let var = |k: &str| env(k).filter(|v| !v.is_empty());
        // A profile named in the config means that profile's keys, not the
        // environment's.
        let env_keys = if cfg.profile.is_some() {
            (None, None)
        } else {
            (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY"))
        };
        match env_keys {
            (Some(id), Some(secret)) => {
                return Ok(Credentials {
                    access_key_id: id,
                    secret_access_key: secret,
                    session_token: var("AWS_SESSION_TOKEN"),
                    source: "environment".to_string(),
                })
            }
            (Some(_), None) | (None, Some(_)) => return Err(invalid(
                "S3 credentials: only one of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY is set"
                    .to_string(),
            )),
            (None, None) => {}
        }
        let file = match var("AWS_SHARED_CREDENTIALS_FILE") {
            Some(f) => Some(PathBuf::from(f)),
            None => var("HOME").map(|h| Path::new(&h).join(".aws/credentials")),
        };
        if let Some(file) = &file {
            if file.exists() {
                if let Some(c) = from_file(file, &profile)? {
                    return Ok(c);
                }
            }
        }
        Err(invalid(format!(
            "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or put a \
             profile [{profile}] (AWS_PROFILE) in {}",
            file.map_or_else(
                || "~/.aws/credentials".to_string(),
                |f| f.display().to_string()
            )
        )))
    }
}

/// The profile `profile` of an AWS credentials file; `None` when the file has
/// no such profile with both keys. A file that cannot be read is an error.
fn from_file(file: &Path, profile: &str) -> io::Result<Option<Credentials>> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("S3 credentials file {}: {e}", file.display()),
        )
    })?;
    Ok(
        parse_profile(&text, profile).map(|(id, secret, token)| Credentials {
            access_key_id: id,
            secret_access_key: secret,
            session_token: token,
            source: format!("{} [{profile}]", file.display()),
        }),
    )
}

/// Key id, secret and token of `[profile]` in the INI text of a credentials
/// file (`key = value` lines, `#` and `;` comments).
fn parse_profile(text: &str, profile: &str) -> Option<(String, String, Option<String>)> {
    let (mut id, mut secret, mut token) = (None, None, None);
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == profile;
            continue;
        }
        if !inside {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim().to_string();
            match k.trim() {
                "aws_access_key_id" => id = Some(v),
                "aws_secret_access_key" => secret = Some(v),
                "aws_session_token" => token = Some(v),
                _ => {}
            }
        }
    }
    Some((id?, secret?, token))
}

#[cfg(test)]
mod tests {
    use super::super::config::test_env as env;
    use super::*;

    #[test]
    fn credentials_come_from_the_environment_first() {
        let c = ObjectConfig::parse("http://h/bucket", &env(&[])).unwrap();
        let cr = Credentials::resolve(
            &c,
            &env(&[
                ("AWS_ACCESS_KEY_ID", "AK"),
                ("AWS_SECRET_ACCESS_KEY", "SK"),
                ("AWS_SESSION_TOKEN", "T"),
                ("HOME", "/nonexistent"),
            ]),
        )
        .unwrap();
        assert_eq!(
            (cr.access_key_id.as_str(), cr.secret_access_key.as_str()),
            ("AK", "SK")
        );
        assert_eq!(cr.session_token.as_deref(), Some("T"));
        let shown = format!("{cr:?}");
        assert!(!shown.contains("SK") && !shown.contains("\"T\""), "{shown}");

        let e = Credentials::resolve(&c, &env(&[("AWS_ACCESS_KEY_ID", "AK")])).unwrap_err();
        assert!(e.to_string().contains("only one of"), "{e}");
        let e = Credentials::resolve(&c, &env(&[("HOME", "/nonexistent")])).unwrap_err();
        assert!(e.to_string().contains("no S3 credentials"), "{e}");
        assert!(
            e.to_string().contains("/nonexistent/.aws/credentials"),
            "{e}"
        );
    }

    #[test]
    fn credentials_files_and_profiles() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        std::fs::write(
            home.join(".aws/credentials"),
            "# comment\n[default]\naws_access_key_id = D1\naws_secret_access_key = D2\n\n\
             [work]\n; other\naws_access_key_id=W1\naws_secret_access_key=W2\naws_session_token=W3\n\
             [half]\naws_access_key_id=H1\n",
        )
        .unwrap();
        let h = home.to_str().unwrap();
        let mut c = ObjectConfig::parse("http://h/bucket", &env(&[])).unwrap();
        let cr = Credentials::resolve(&c, &env(&[("HOME", h)])).unwrap();
        assert_eq!(cr.access_key_id, "D1");
        assert!(
            cr.source.ends_with("credentials [default]"),
            "{}",
            cr.source
        );
        let cr = Credentials::resolve(&c, &env(&[("HOME", h), ("AWS_PROFILE", "work")])).unwrap();
        assert_eq!(
            (cr.access_key_id.as_str(), cr.session_token.as_deref()),
            ("W1", Some("W3"))
        );
        // A profile without both keys is no credentials.
        let e = Credentials::resolve(&c, &env(&[("HOME", h), ("AWS_PROFILE", "half")]));
        assert!(e.is_err());
        // A file named in the config wins over the environment.
        c.credentials_file = Some(home.join(".aws/credentials"));
        c.profile = Some("work".to_string());
        let cr = Credentials::resolve(
            &c,
            &env(&[("AWS_ACCESS_KEY_ID", "E1"), ("AWS_SECRET_ACCESS_KEY", "E2")]),
        )
        .unwrap();
        assert_eq!(cr.access_key_id, "W1");
        c.profile = Some("missing".to_string());
        let e = Credentials::resolve(&c, &env(&[])).unwrap_err();
        assert!(e.to_string().contains("no profile [missing]"), "{e}");
        c.credentials_file = Some(home.join("nope"));
        let e = Credentials::resolve(&c, &env(&[])).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
