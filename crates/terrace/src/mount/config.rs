//! What `terrace mount` was asked to do ([`MountConfig`]): the pool, the
//! mount point, the `-o` options, and the settings given on the command
//! line or in a config file, checked as they come and as a whole.

use crate::util::{self, CliError, CliResult};
use std::path::{Path, PathBuf};
use terrace_fuse::MountOptions;

/// What `terrace mount` was asked to do.
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// The PM tier of the pool.
    pub pool: PathBuf,
    /// Where to mount.
    pub mountpoint: PathBuf,
    /// Parsed `-o` options.
    pub options: MountOptions,
    /// The `-o` arguments as given (passed on to the daemon).
    pub raw_options: Vec<String>,
    /// Settings (`key=value` options, `--dram-cache`, `--config`) as text,
    /// each checked on its own when given; [`MountConfig::finished_settings`]
    /// applies them in order and validates the result as a whole.
    pub settings: Vec<(String, String)>,
    /// Serve Prometheus metrics on this address (`-o metrics=ADDR`).
    pub metrics: Option<std::net::SocketAddr>,
    /// Detach into the background.
    pub daemon: bool,
    /// This process is the detached daemon started by `--daemon`.
    pub child: bool,
}

/// The error for an `-o` word the FUSE options refused: a known word
/// given without its value says what the value is, and an unknown word's
/// list of known options also names `metrics=` and the settings, which
/// are read here rather than by the FUSE options.
fn explain_unknown_option(part: &str, why: String) -> String {
    if part == "metrics" {
        return format!(
            "mount option \"metrics\" needs an address: use {}",
            crate::metrics::FORM
        );
    }
    if terrace_policy::Settings::key(part).is_some() {
        return format!(
            "mount option {part:?} is a setting and needs a value: {part}=VALUE \
             (`terrace set MOUNTPOINT {part}` explains it)"
        );
    }
    match why.strip_suffix(')') {
        Some(list) if why.starts_with("unknown mount option") => format!(
            "{list}, discard, nodiscard, metrics=IP:PORT, and any setting as KEY=VALUE; `terrace mount --help` explains them)"
        ),
        _ => why,
    }
}

impl MountConfig {
    /// A foreground mount with the default options of the user running it
    /// (`suid,dev` for root, `nosuid,nodev` otherwise).
    pub fn new(pool: PathBuf, mountpoint: PathBuf) -> MountConfig {
        // Safety: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        MountConfig {
            pool,
            mountpoint,
            options: MountOptions::for_user(euid),
            raw_options: Vec::new(),
            settings: Vec::new(),
            metrics: None,
            daemon: false,
            child: false,
        }
    }

    /// Applies comma-separated `-o` arguments (options only mount(8) and
    /// fstab use are accepted and ignored: `mount_helper::mount8_only`). A
    /// unknown option, a bad value or a bad `metrics=` address is a usage
    /// error (exit status 2).
    pub fn apply_options(&mut self, opts: &[String]) -> CliResult {
        for o in opts {
            for part in o.split(',') {
                let part = part.trim();
                if crate::mount_helper::mount8_only(part) {
                    continue;
                }
                if let Some(addr) = part.strip_prefix("metrics=") {
                    let addr = crate::metrics::parse_addr(addr).map_err(CliError::usage)?;
                    self.metrics = Some(addr);
                    continue;
                }
                // ext4's names for online discard: a setting here
                // (`discard_interval_ns`), so `terrace set` can change it.
                if let Some(interval) = discard_option(part) {
                    self.add_setting("discard_interval_ns", interval)?;
                    continue;
                }
                if let Some((k, v)) = part.split_once('=') {
                    if terrace_policy::Settings::key(k).is_some() {
                        self.add_setting(k, v)?;
                        continue;
                    }
                }
                self.options
                    .apply(part)
                    .map_err(|why| CliError::usage(explain_unknown_option(part, why)))?;
            }
            self.raw_options.push(o.clone());
        }
        self.options.check().map_err(CliError::usage)
    }

    /// Adds one setting, its value parsed and range-checked now (by its
    /// key's parser) so a bad value fails at once with the key's name; rules
    /// between keys are checked on the finished settings.
    pub fn add_setting(&mut self, key: &str, value: &str) -> CliResult {
        terrace_policy::Settings::check_value(key, value).map_err(CliError::usage)?;
        self.settings.push((key.to_string(), value.to_string()));
        Ok(())
    }

    /// Adds every setting of a config file (TOML, `key = value` per setting;
    /// sizes as bytes or text such as "1M", durations as text such as "30s"
    /// (a bare number, "5", is seconds as on `-o`; a bare integer is refused:
    /// `Settings::config_text`), switches as booleans or "on"/"off"). Each
    /// value goes through its key's parser, as `-o` values do. Any problem
    /// with the file (unreadable, not TOML, an unknown key, a bad value) is
    /// a usage error (exit status 2), as a bad `-o` option is.
    pub fn add_config_file(&mut self, path: &Path) -> CliResult {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::at(path, util::os_reason(&e)).code(2))?;
        let table: std::collections::BTreeMap<String, terrace_policy::settings::ConfigValue> =
            toml::from_str(&text).map_err(|e| {
                CliError::at(
                    path,
                    format!("bad config file: {}", e.message().replace('\n', " ")),
                )
                .code(2)
            })?;
        for (key, value) in &table {
            let text = terrace_policy::Settings::config_text(key, value)
                .map_err(|e| CliError::at(path, e).code(2))?;
            self.raw_options.push(format!("{key}={text}"));
            self.settings.push((key.clone(), text));
        }
        Ok(())
    }

    /// The settings the mount will use: the defaults with every setting
    /// given (`TERRACE_S3_TIMEOUT`, config file, then `-o`, then
    /// `--dram-cache`) applied in order,
    /// validated as a whole — before anything is opened or written. Settings
    /// that do not go together are a usage error (exit status 2), as a bad
    /// value is.
    pub fn finished_settings(&self) -> CliResult<terrace_policy::Settings> {
        // TERRACE_S3_TIMEOUT first: what is given here wins over it.
        let mut given = crate::object_tier::env_settings().map_err(CliError::usage)?;
        given.extend(self.settings.iter().cloned());
        terrace_policy::Settings::default()
            .with(&given)
            .map_err(|e| CliError::usage(format!("invalid settings: {e}")))
    }
}

/// `discard_interval_ns` for the mount options `discard` (online discard
/// every 10 s, as often as ext4's `discard` batches are issued at most) and
/// `nodiscard` (off).
fn discard_option(part: &str) -> Option<&'static str> {
    match part {
        "discard" => Some(DISCARD_INTERVAL),
        "nodiscard" => Some("0"),
        _ => None,
    }
}

/// The interval `-o discard` sets.
pub const DISCARD_INTERVAL: &str = "10s";

#[cfg(test)]
mod tests {
    use super::MountConfig;

    fn refusal(opt: &str) -> String {
        let mut cfg = MountConfig::new("/p".into(), "/m".into());
        cfg.apply_options(&[opt.to_string()]).unwrap_err().msg
    }

    #[test]
    fn a_word_that_needs_a_value_says_which_value() {
        let e = refusal("metrics");
        assert!(
            e.contains("needs an address") && e.contains("metrics=IP:PORT"),
            "{e}"
        );
        let e = refusal("sync_threshold_bytes");
        assert!(
            e.contains("is a setting and needs a value: sync_threshold_bytes=VALUE"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_word_lists_metrics_and_settings_among_the_known() {
        let e = refusal("metrcs=1.2.3.4:5");
        assert!(
            e.starts_with("unknown mount option \"metrcs=1.2.3.4:5\""),
            "{e}"
        );
        assert!(
            e.contains(", metrics=IP:PORT, and any setting as KEY=VALUE"),
            "{e}"
        );
        assert!(
            e.contains("noacl,"),
            "the FUSE options are still listed: {e}"
        );
        assert!(e.ends_with("explains them)"), "{e}");
        assert!(e.contains(", discard, nodiscard,"), "{e}");
    }

    /// `cfg` with a config file holding `toml` added.
    fn with_config_file(cfg: &mut MountConfig, toml: &str) -> crate::util::CliResult {
        let dir = std::env::temp_dir().join(format!(
            "terrace-config-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("terrace.toml");
        std::fs::write(&path, toml).unwrap();
        let r = cfg.add_config_file(&path);
        std::fs::remove_dir_all(&dir).unwrap();
        r
    }

    /// A bare number means seconds for a duration in the config file as in
    /// `-o` (and `terrace set`): `writeback_age_ns = "5"` is
    /// `-o writeback_age_ns=5`, 5 s; `writeback_age_ns = 5`, which gave 5 ns,
    /// is refused with its unit asked for.
    #[test]
    fn the_config_file_reads_values_as_o_does() {
        for (key, bare) in [("writeback_age_ns", "5"), ("migration_age_ns", "30")] {
            let mut o = MountConfig::new("/p".into(), "/m".into());
            o.apply_options(&[format!("{key}={bare}")]).unwrap();
            let mut file = MountConfig::new("/p".into(), "/m".into());
            with_config_file(&mut file, &format!("{key} = \"{bare}\"\n")).unwrap();
            let (o, file) = (
                o.finished_settings().unwrap(),
                file.finished_settings().unwrap(),
            );
            assert_eq!(file, o, "{key}");
            assert_eq!(o.get(key).unwrap(), format!("{bare}s"));
            let mut bad = MountConfig::new("/p".into(), "/m".into());
            let e = with_config_file(&mut bad, &format!("{key} = {bare}\n")).unwrap_err();
            assert_eq!(e.code, 2, "{}", e.msg);
            assert!(e.msg.contains("needs its unit"), "{}", e.msg);
            assert!(bad.settings.is_empty());
        }
        // Sizes: an integer is bytes, as a bare number on `-o` is.
        let mut file = MountConfig::new("/p".into(), "/m".into());
        with_config_file(&mut file, "sync_threshold_bytes = 8192\n").unwrap();
        assert_eq!(file.finished_settings().unwrap().sync_threshold_bytes, 8192);
    }

    /// A bad config file is bad input, as a bad `-o` option is: exit
    /// status 2, whatever is wrong with it.
    #[test]
    fn a_bad_config_file_is_a_usage_error() {
        for toml in [
            "sync_treshold = 4096\n",
            "this is = = not toml\n",
            "migration_threads = 5000\n",
            "log_migration = 3\n",
        ] {
            let mut cfg = MountConfig::new("/p".into(), "/m".into());
            let e = with_config_file(&mut cfg, toml).unwrap_err();
            assert_eq!(e.code, 2, "{toml}: {}", e.msg);
        }
        let mut cfg = MountConfig::new("/p".into(), "/m".into());
        let e = cfg
            .add_config_file(std::path::Path::new("/nonexistent/terrace.toml"))
            .unwrap_err();
        assert_eq!(e.code, 2, "{}", e.msg);
        // Keys that do not go together, from the file and `-o`: the same.
        let mut cfg = MountConfig::new("/p".into(), "/m".into());
        with_config_file(&mut cfg, "nvmfs_dirty_high_percent = 40\n").unwrap();
        cfg.apply_options(&["nvmfs_dirty_low_percent=60".to_string()])
            .unwrap();
        let e = cfg.finished_settings().unwrap_err();
        assert_eq!(e.code, 2, "{}", e.msg);
    }

    #[test]
    fn discard_turns_online_discard_on_every_10_s_and_nodiscard_off() {
        let mut cfg = MountConfig::new("/p".into(), "/m".into());
        cfg.apply_options(&["rw,discard".to_string()]).unwrap();
        let s = cfg.finished_settings().unwrap();
        assert_eq!(s.discard_interval_ns, 10_000_000_000);
        cfg.apply_options(&["nodiscard".to_string()]).unwrap();
        assert_eq!(cfg.finished_settings().unwrap().discard_interval_ns, 0);
        let mut cfg = MountConfig::new("/p".into(), "/m".into());
        cfg.apply_options(&["discard_interval_ns=1m".to_string()])
            .unwrap();
        assert_eq!(
            cfg.finished_settings().unwrap().discard_interval_ns,
            60_000_000_000
        );
        assert_eq!(
            MountConfig::new("/p".into(), "/m".into())
                .finished_settings()
                .unwrap()
                .discard_interval_ns,
            0,
            "off by default"
        );
    }
}
