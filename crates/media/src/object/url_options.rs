//! The options of a tier URL (`?region=…&path_style=…&credentials_file=…
//! &profile=…&ca_file=…`): [`UrlOptions`] and their parser.

use std::path::PathBuf;

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
///   tier ([`ObjectConfig::root_certificates`](super::ObjectConfig::root_certificates)).
/// - `sign_payload=true|false`: sign each upload's body with its SHA-256
///   (SigV4 signed payload), so that the store refuses a body damaged on
///   the way, or send `UNSIGNED-PAYLOAD`. Default: signed over plain http,
///   unsigned over https (TLS already protects the body, and hashing every
///   uploaded byte cost a quarter of the daemon's CPU during a migration to
///   MinIO); see docs/design.md §5n "Signing".
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
    /// `sign_payload=`.
    pub sign_payload: Option<bool>,
}

/// The option names [`UrlOptions::parse`] knows.
pub const URL_OPTIONS: &str =
    "region, path_style, credentials_file, profile, ca_file, sign_payload";

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
            match key {
                "region" => set_once(&mut o.region, word(key, value, "-_")?, key)?,
                "path_style" => set_once(&mut o.path_style, boolean(key, value)?, key)?,
                "sign_payload" => set_once(&mut o.sign_payload, boolean(key, value)?, key)?,
                "profile" => set_once(&mut o.profile, word(key, value, "-_.")?, key)?,
                "credentials_file" => {
                    set_once(&mut o.credentials_file, absolute(key, value)?, key)?
                }
                "ca_file" => set_once(&mut o.ca_file, absolute(key, value)?, key)?,
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

/// Stores the value of option `key` in `slot`, which must be empty: an
/// option may be given once.
fn set_once<T>(slot: &mut Option<T>, value: T, key: &str) -> Result<(), String> {
    match slot.replace(value) {
        Some(_) => Err(format!("option {key:?} given twice")),
        None => Ok(()),
    }
}

/// The value of option `key` if it holds only letters, digits and the
/// bytes of `extra`.
fn word(key: &str, value: &str, extra: &str) -> Result<String, String> {
    if value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || extra.as_bytes().contains(&b))
    {
        return Ok(value.to_string());
    }
    let quoted: Vec<String> = extra.chars().map(|c| format!("'{c}'")).collect();
    let (last, rest) = quoted.split_last().expect("extra bytes allowed");
    let allowed = match rest {
        [] => last.clone(),
        _ => format!("{} and {last}", rest.join(", ")),
    };
    Err(format!(
        "{key} {value:?} may hold only letters, digits, {allowed}"
    ))
}

/// The value of option `key`, `true` or `false`.
fn boolean(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("{key}={value:?}: expected true or false")),
    }
}

/// The value of option `key` as a path, which must be absolute.
fn absolute(key: &str, value: &str) -> Result<PathBuf, String> {
    if !value.starts_with('/') {
        return Err(format!("{key} {value:?} is not an absolute path"));
    }
    Ok(PathBuf::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_named_with_what_is_allowed() {
        let e = |q: &str| UrlOptions::parse(q).unwrap_err();
        assert_eq!(
            e("region=a/b"),
            "region \"a/b\" may hold only letters, digits, '-' and '_'"
        );
        assert_eq!(
            e("profile=a/b"),
            "profile \"a/b\" may hold only letters, digits, '-', '_' and '.'"
        );
        assert_eq!(
            e("credentials_file=x"),
            "credentials_file \"x\" is not an absolute path"
        );
        assert_eq!(e("ca_file=x"), "ca_file \"x\" is not an absolute path");
        assert_eq!(e("profile=p&profile=q"), "option \"profile\" given twice");
        assert_eq!(
            e("path_style=true&path_style=false"),
            "option \"path_style\" given twice"
        );
        assert_eq!(
            e("sign_payload=yes"),
            "sign_payload=\"yes\": expected true or false"
        );
    }
}
