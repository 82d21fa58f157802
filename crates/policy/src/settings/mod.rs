//! Every tunable of the policies in one key/value registry.
//!
//! **To add a setting**: a field in [`Settings`] (`typed.rs`) and a row in
//! [`KEYS`] (`keys.rs`); see [Adding a setting](#adding-a-setting).
//!
//! One table, [`KEYS`], declares every key once: its name, its kind (the
//! type, the parser and the accepted range), its default and its help text,
//! and how it is read from and stored into [`Settings`]. The three ways of
//! changing settings — the command line (`-o key=value`), the config file
//! (TOML, one `key = value` per setting) and run-time changes (`terrace set
//! MOUNTPOINT KEY VALUE`) — go through it, so a key means the same thing and
//! accepts the same values everywhere. Values are text in [`Settings::set`]
//! and [`Settings::get`] (sizes like `1M`, durations like `30s`), and `get`
//! returns text that `set` accepts back. A value is read the same way from
//! every source, by its key's parser ([`Kind::parse`]): a bare number is
//! bytes for a size and seconds for a duration. In a config file a size may
//! also be a TOML integer (bytes) and a switch a boolean; a duration is
//! text with its unit (`"30s"`; a TOML integer other than 0 is refused, as
//! it meant ns before 2026-12-07); [`Settings::config_text`] turns a config
//! value into the key's text.
//!
//! Checking happens in two steps, whatever the source:
//! 1. each value is parsed and range-checked on its own by its key's kind
//!    ([`Settings::check_value`]);
//! 2. the finished settings — every value given applied, in any order — are
//!    checked as a whole once by [`Settings::validate`]: every value in its
//!    range again, then the rules that tie keys together (see [`RULES`]:
//!    `nvmfs_dirty_low_percent` below `nvmfs_dirty_high_percent`).
//!
//! [`Settings::with`] does both for a batch (a mount's `-o` options and
//! config file together: `-o nvmfs_dirty_low_percent=30,nvmfs_dirty_high_percent=40`
//! is accepted in either order), and [`Settings::set`] for one key (applied to
//! a copy, validated, then swapped in: on error nothing changes).
//!
//! Settings are values; the components they tune (predictor parameters, the
//! placement and migration policy objects) are built from them with
//! [`Settings::sync_params`], [`Settings::size_params`],
//! [`Settings::placement`], [`Settings::migration_params`],
//! [`Settings::migration`], [`Settings::nvmfs_params`] and
//! [`Settings::cleaner_params`].
//!
//! # Adding a setting
//!
//! A setting is declared in two places (the unit tests check that each row is
//! declared once, that its default is valid and that its range fits its
//! field):
//! 1. a field in [`Settings`] (`typed.rs`), with its placeholder in
//!    `Settings::default` (the real default comes from the table);
//! 2. its row in [`KEYS`] (`keys.rs`): name (the field's), kind, default and
//!    help text — `num_key!`/`name_key!` for plain fields, a hand-written
//!    [`Key`] otherwise.
//!
//! If it tunes a component, pass it on in that component's conversion
//! (`Settings::sync_params` … in `typed.rs`); if it must agree with other
//! keys, add a [`Rule`] to [`RULES`] (`keys.rs`). Nothing else changes: the
//! command line, the config file, `terrace set` and the checks read the table.
//!
//! # Files
//!
//! - `keys.rs`: the declarative table — [`Key`], [`KEYS`], [`Rule`], [`RULES`].
//! - `kind.rs`: a key's [`Kind`] (parser, range, text form) and its [`Value`].
//! - `units.rs`: text forms of sizes, durations, percentages and thresholds
//!   ([`parse_size`], [`format_size`], …).
//! - `typed.rs`: the typed [`Settings`] struct and the component parameters
//!   built from it.
//! - `registry.rs`: reading and changing [`Settings`] through the table
//!   (`get`, `set`, `with`, `validate`, `check_value`, `config_text`).
//! - `config.rs`: config-file values ([`ConfigValue`]) and deserializing
//!   [`Settings`] from a config file.

mod config;
mod keys;
mod kind;
mod registry;
mod typed;
mod units;

pub use config::ConfigValue;
pub use keys::{Key, Rule, KEYS, RULES};
pub use kind::{Kind, Value};
pub use typed::Settings;
pub use units::{format_duration, format_size, parse_duration, parse_size, parse_threshold};

#[cfg(test)]
mod tests;
