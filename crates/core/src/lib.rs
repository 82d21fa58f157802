//! Terrace: a tiered file system as a library. No FUSE here: the FUSE adapter
//! (crate `terrace-fuse`) and tests drive [`Fs`] directly.
//!
//! Files form three layers (docs/design.md §1.1): *components* that know
//! nothing of `Fs` — `alloc` (free space), `log` (per-inode logs on PM),
//! `journal` (multi-log atomic commits), `inode` (DRAM state rebuilt from
//! logs), the page cache, tiers, checksum tables … — below `fs` (the
//! mounted object: open, settings); *services*, the `impl Fs` blocks —
//! `table` (inode locks), `commit` (transactions), `ops_dir` / `ops_file` /
//! `ops_tmpfile` (operations), write-back, migration, `unmount`, `fsck` … —
//! on top. `fs` and components never import a service
//! (`tests/layering.rs` checks it). The lock order is in docs/design.md §4a.

#![forbid(unsafe_code)]

pub mod acl;
pub mod alloc;
pub mod cache;
mod cache_write;
mod checksums;
pub mod clean;
pub mod clone_families;
mod commit;
pub mod counters;
pub mod data;
pub mod device_full;
pub mod dir_index;
pub mod extent_map;
pub mod extent_space;
pub mod freeze;
pub mod fs;
pub mod fsck;
pub mod inode;
pub mod inode_flags;
pub mod journal;
mod lock_order;
pub mod log;
pub mod log_migrate;
pub mod log_space;
mod log_trim;
pub mod may_wait;
pub mod migrate;
pub mod mkfs;
pub mod object_clean;
pub mod ops_clone;
pub mod ops_dir;
pub mod ops_fallocate;
pub mod ops_file;
pub mod ops_prealloc_write;
pub mod ops_privileges;
pub mod ops_read;
pub mod ops_readdir;
pub mod ops_seek;
pub mod ops_tmpfile;
pub mod ops_xattr;
pub mod placement_stats;
pub mod placement_view;
pub mod pointer_repair;
mod problem_paths;
mod read_only_lost;
pub mod read_pins;
pub mod recovery;
mod recovery_blobs;
mod recovery_problems;
mod reshare;
pub mod rules;
pub mod scrub;
pub mod service_state;
pub mod shared;
mod slot_table;
pub mod space;
pub mod status;
pub mod sums;
mod table;
#[cfg(test)]
mod test_pools;
pub mod tier;
pub mod tier_attach;
pub mod tier_detach;
pub mod tier_epoch;
pub mod tier_evacuate;
pub mod tier_identity;
pub mod tier_list;
mod tier_stamp;
pub mod trim;
pub mod types;
mod unmount;
mod worker;
pub mod writeback;

pub use fs::{AtimeMode, Fs, MountReport};
pub use mkfs::{format, FormatParams};
pub use recovery::{OpenError, Problem};
pub use types::*;
