//! Terrace's policies: where a write goes, how hot a file is, and the settings
//! that tune them.
//!
//! Every policy here is a pure function of a *snapshot of observations*: the
//! caller (the core file system) gathers what it knows — how much data was
//! written since the last `fsync`, the counter of the write entry being
//! overwritten, how much PM is free, which block tiers exist — into plain
//! values, and the policy returns a decision. Nothing in this crate does I/O,
//! reads a clock (times are passed in, in nanoseconds), takes a lock or keeps
//! global state, so each policy is unit-tested on synthetic snapshots without a
//! mount, and two policies can be compared on the same snapshot.
//!
//! The modules, one per concern (in the spirit of mergerfs' one-file-per-policy
//! layout):
//!
//! - [`sync_predictor`]: Ziggurat's synchronicity predictor (§4): is this file
//!   about to be `fsync`ed? Per-file state, plus the accuracy counters the paper
//!   reports.
//! - [`size_predictor`]: Ziggurat's write-size predictor (§4): the counter kept
//!   in each write entry, and whether a write is "large and stable".
//! - [`placement`]: the placement decision (PM, a block tier through the DRAM
//!   cache, or a block tier written through) and the policies that make it,
//!   looked up by name with [`placement_policy`].
//! - [`amtime`]: a file's average modification time over its blocks (Ziggurat
//!   §5.1), updated incrementally; the migration profiler sorts files by it.
//! - [`settings`]: every tunable in one key/value registry serving the command
//!   line, the config file and run-time changes.
//!
//! Where the papers (Ziggurat, FAST'19, and its slides) and the authors' code
//! disagree, each module says which one it follows and why.

#![warn(missing_docs, unreachable_pub)]

pub mod amtime;
pub mod placement;
pub mod settings;
pub mod size_predictor;
pub mod sync_predictor;

pub use amtime::Amtime;
pub use placement::{
    placement_policy, placement_policy_names, Placement, PlacementPolicy, TierRule,
    WriteObservation, PM_TIER,
};
pub use settings::Settings;
pub use size_predictor::{is_large, next_counter, predecessor, SizeParams};
pub use sync_predictor::{SyncAccuracy, SyncParams, SyncPredictor};
