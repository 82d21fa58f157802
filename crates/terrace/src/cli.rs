//! The command line of `terrace`: its subcommands, their arguments and
//! help texts (clap definitions; `main.rs` runs what they parse into).

use crate::{mkfs, tier_cmd, util};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

const ABOUT: &str = "Terrace: a tiered file system with metadata and logs on persistent memory (PM).\n\
Files live in one pool: a PM tier (a DAX file, or a file on /dev/shm) plus optional SSD/HDD tiers, mounted through FUSE.";

const MAIN_AFTER: &str = "\
Quick start:
  terrace mkfs --tier pm:/dev/shm/pool:1G
  mkdir -p /tmp/t && terrace mount --daemon /dev/shm/pool /tmp/t
  terrace status /tmp/t
  terrace umount /tmp/t
  terrace fsck /dev/shm/pool

Run `terrace help <command>` for a command's options and examples.

Exit status: 0 success, 1 the command failed, 2 a usage error (an unknown
command, option or setting, or a bad value), found before anything changed.
mkfs, fsck, scrub, sync and migrate say more in their own help.";

#[derive(Parser, Debug)]
#[command(name = "terrace", version, about = ABOUT, long_about = ABOUT, after_long_help = MAIN_AFTER, after_help = MAIN_AFTER)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Format a new pool from one PM tier and optional SSD/HDD/S3 tiers.
    Mkfs(MkfsArgs),
    /// Mount a pool (foreground by default, --daemon to detach).
    Mount(MountArgs),
    /// Unmount cleanly: persist everything and mark the pool clean.
    Umount(UmountArgs),
    /// Show tiers, capacity, inodes, logs and counters of a mounted pool.
    Status(StatusArgs),
    /// Check (and with --repair, fix) an unmounted pool.
    Fsck(FsckArgs),
    /// Show which tier holds each part of a file (or a directory's files).
    Where(WhereArgs),
    /// List, show or change settings of a mounted pool at run time.
    Set(SetArgs),
    /// Move files' data to a tier now (by default down to the first block tier).
    Migrate(MigrateArgs),
    /// Show, set or clear per-file placement rules (pin a file or directory to a tier).
    Rule(RuleArgs),
    /// Add a tier to a pool, or remove an empty tier (mounted or not).
    Tier(TierArgs),
    /// Watch a mounted pool's I/O per tier, live (like `zpool iostat -v`).
    Iostat(IostatArgs),
    /// Read and verify every block of data on the block tiers of a mounted
    /// pool, repairing from clean copies.
    Scrub(ScrubArgs),
    /// Make every write to a mounted pool durable now (what sync(1) cannot
    /// do for a FUSE file system).
    Sync(SyncArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Write the manual pages (terrace.1, terrace-SUBCOMMAND.1) into a directory.
    #[command(hide = true)]
    Man(ManArgs),
}

const COMPLETIONS_AFTER: &str = "\
Prints the script on stdout; where it goes depends on the shell (`make
install` puts them there):

Examples:
  terrace completions bash > /usr/share/bash-completion/completions/terrace
  terrace completions zsh  > /usr/local/share/zsh/site-functions/_terrace
  terrace completions fish > ~/.config/fish/completions/terrace.fish
  source <(terrace completions bash)       # this bash session only";

#[derive(Args, Debug)]
#[command(after_help = COMPLETIONS_AFTER)]
pub(crate) struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub(crate) struct ManArgs {
    /// Directory to write the pages into (created if missing).
    pub(crate) dir: PathBuf,
}

const SCRUB_AFTER: &str = "\
Reads every block of file data on the block tiers (SSD, HDD) of a mounted pool
-- primary locations and NVMFS clean copies -- and checks it against the crc32c
stored with it, while the pool stays in use. A damaged clean copy is dropped
(the data on PM is intact; a new copy is made later); damaged data whose clean
copy is good is replaced by the copy. Damage with no good copy is listed (file
and offset): reads of it fail with EIO until the range is rewritten. PM data is
not checksummed. The scrub runs in the daemon; this command follows it with a
progress bar (Ctrl-C stops following, not the scrub; `terrace status` shows it).

Exit status: 0 nothing damaged is left, 1 damage was not repaired, 2 the scrub
could not run.

Examples:
  terrace scrub /mnt/terrace
  terrace scrub --rate 100M /mnt/terrace     # at most 100 MiB/s of reads
  terrace scrub --no-repair --json /mnt/terrace";

#[derive(Args, Debug)]
#[command(after_help = SCRUB_AFTER)]
pub(crate) struct ScrubArgs {
    /// Where the pool is mounted.
    pub(crate) mountpoint: PathBuf,
    /// Read at most this many bytes per second (K/M/G; default: no limit).
    #[arg(long, value_name = "SIZE")]
    pub(crate) rate: Option<String>,
    /// Only report damage, repair nothing.
    #[arg(long)]
    pub(crate) no_repair: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// No progress bar (there is none without a terminal either).
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

const SYNC_AFTER: &str = "\
Writes back every write the pool's DRAM cache holds (asynchronous writes bound
for a block tier) and syncs the devices; when it returns, everything written
through the mount before it started is durable. sync(1) and syncfs(2) cannot
do this for Terrace: the kernel sends them to no FUSE daemon (only to
virtiofs). Without it, cached writes become durable at their file's
fsync/fdatasync, the write-back within writeback_age_ns (5 s by default), or
unmount. Writes to PM, O_SYNC/O_DSYNC writes and writes predicted synchronous
are durable when they return anyway.

Exit status: 0 everything is durable, 1 the write-back failed (the error is
printed; the data stays cached and is tried again), 2 bad command line.

Examples:
  terrace sync /mnt/terrace
  cp -r /data /mnt/terrace/backup && terrace sync /mnt/terrace";

#[derive(Args, Debug)]
#[command(after_help = SYNC_AFTER)]
pub(crate) struct SyncArgs {
    /// Where the pool is mounted.
    pub(crate) mountpoint: PathBuf,
}

const RULE_AFTER: &str = "\
A rule pins a file to one tier, overriding automatic placement and migration:
its writes go to that tier, background migration never moves it off, and data
it already has elsewhere is moved there by the migration thread (when the tier
has room). A rule on a directory is inherited by the files and directories
created in it afterwards; with -r it is also set on (or, with auto, cleared
from) every file and directory already below it, one at a time (each change
is atomic, the walk as a whole is not; symbolic links are not followed). Rules are stored in the pool (the xattr
user.terrace.rule) and survive remounts; `auto` removes one.

Without TIER, the rule of PATH is shown; for a directory, then the rules
below it, one `PATH: TIER` line each (symbolic links are not followed). Files
and directories whose rule is the one of the directory they are in (those
created after the directory was pinned inherit it) are not listed one by one
but counted under the line of that directory; --all lists each of them too.
`terrace rule MOUNTPOINT` (or with `--list`) lists every rule of the pool.

Examples:
  terrace rule /mnt/terrace/db/wal.log pm        # keep the WAL on PM
  terrace rule /mnt/terrace/archive hdd          # new files in archive/ go to HDD
  terrace rule -r /mnt/terrace/db pm             # db/ and every file already in it on PM
  terrace rule /mnt/terrace/db/wal.log           # show
  terrace rule /mnt/terrace --list               # list every rule
  terrace rule /mnt/terrace/archive auto         # back to automatic placement
  setfattr -n user.terrace.rule -v ssd FILE      # the same with setfattr";

const IOSTAT_AFTER: &str = "\
Every INTERVAL seconds (default 1), one table: per tier (0:pm, 1:ssd, ...) the
device read and write requests and bytes per second and the syncs per second;
for each object (S3) tier the GETs, PUTs and deletes it sent to its store and
their bytes per second; then for the whole mount the reads and writes applications made through it,
migration down (to slower tiers) and up (reverse migration), and the share of
block-tier reads the DRAM cache served. All are rates over the interval, from
the daemon's counters. Runs until Ctrl-C, or COUNT tables.

Examples:
  terrace iostat /mnt/terrace            # every second
  terrace iostat /mnt/terrace 5 12       # every 5 s for a minute
  terrace iostat /mnt/terrace 1 --json   # one JSON object per line";

#[derive(Args, Debug)]
#[command(after_help = IOSTAT_AFTER)]
pub(crate) struct IostatArgs {
    /// Where the pool is mounted.
    pub(crate) mountpoint: PathBuf,
    /// Seconds between tables (0.01 to 86400).
    #[arg(default_value_t = 1.0)]
    pub(crate) interval: f64,
    /// Stop after this many tables.
    pub(crate) count: Option<u64>,
    /// One JSON object per interval instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args, Debug)]
#[command(after_help = RULE_AFTER)]
pub(crate) struct RuleArgs {
    /// A file or directory on a Terrace mount.
    pub(crate) path: PathBuf,
    /// pm, ssd, hdd, a tier id, or auto (no rule). Omit to show the rule
    /// (and, for a directory, the rules below it).
    pub(crate) tier: Option<String>,
    /// List the rule of PATH and every rule below it (what omitting TIER
    /// does; `terrace rule MOUNTPOINT --list` lists every rule of the pool).
    #[arg(long, conflicts_with = "tier")]
    pub(crate) list: bool,
    /// With a listing: one line for every ruled file and directory, also
    /// those that only share the rule of the directory they are in (by
    /// default counted under it).
    #[arg(long, conflicts_with = "tier")]
    pub(crate) all: bool,
    /// With TIER on a directory: set (or, with auto, clear) the rule of
    /// every file and directory already below it too, not only of the
    /// directory (whose rule new files inherit).
    #[arg(short, long, requires = "tier")]
    pub(crate) recursive: bool,
}

const MIGRATE_AFTER: &str = "\
Moves the data of the given files (or of every file under the given
directories; the whole mount when no PATH is given) to one tier now. Without --to, data goes down to the first block tier (ssd);
--to pm brings it up. Background migration does the same by itself when a
tier passes its threshold (pm: migration_threshold, dynamic from 50 to 90 %;
a block tier with a tier below it: migration_block_threshold, 90 %); this
command is for doing it by hand. Each file moves crash-safely: a crash
leaves it where it was or where it was going, never both or neither. A file
that a rule pins to another tier (`terrace rule`) is left there and named on
stderr: the rule would bring its data back at once; clear it first with
`terrace rule PATH auto`. A file whose data does not fit in the room the
target has for it (on pm: up to its forced mark, migration_forced_percent)
is left whole where it was and fails with how much room there is. Data moved
up to pm stays there only while pm is below its migration threshold:
past it, background migration moves the coldest data down again, and the
command says so; `terrace rule PATH pm` keeps a file on pm.

--defragment then rewrites, in file order, the data each file has on the
target tier where it is fragmented (in runs of less than 256 KiB on average).
Block tiers never overwrite in place, so a file rewritten at random offsets
and migrated piece by piece lies scattered over the tier, and reading it
sequentially is random on the device; after --defragment it lies in
consecutive runs of at least an extent. It costs one more write of that data
to the tier (its old blocks become dead space that extent recycling
reclaims), needs room there for a second copy of it (a file without is left
as it was and named on stderr), and is crash-safe like any move. Not for pm
or s3 tiers.

Progress: on a terminal, a bar on stderr counts the bytes that actually move
(the data of the files not yet on the target tier; files already there are
skipped) and ends at 100 %. Without a terminal there is no bar. At the end one
line on stdout sums up what moved, from how many files, in how long and how
fast; --quiet prints neither. The first 10 files that fail are named on
stderr, the rest counted. If the daemon dies or stops answering, migrate stops
with one error: what moved stays moved, the rest stays where it was.

Exit status: 0 everything moved (files left where rules pin them
included), 1 some file failed or the daemon stopped, 2 bad command line.

Examples:
  terrace migrate /mnt/terrace                      # everything down to ssd
  terrace migrate /mnt/terrace /mnt/terrace/archive # one directory
  terrace migrate --to pm /mnt/terrace /mnt/terrace/db/index
  terrace migrate --defragment /mnt/terrace /mnt/terrace/db   # and rewrite scattered data in order";

#[derive(Args, Debug)]
#[command(after_help = MIGRATE_AFTER)]
pub(crate) struct MigrateArgs {
    /// Where the pool is mounted (a file or directory inside the mount also
    /// works: it is then the first PATH).
    pub(crate) mountpoint: PathBuf,
    /// Files or directories on that mount (default: all of it).
    pub(crate) paths: Vec<PathBuf>,
    /// Target tier: pm, ssd, hdd, s3 or a tier id (default: the first block tier).
    #[arg(long, value_name = "TIER")]
    pub(crate) to: Option<String>,
    /// No progress bar and no summary line (errors are still printed).
    #[arg(short, long)]
    pub(crate) quiet: bool,
    /// Then rewrite each file's fragmented data on the target tier in file
    /// order (block tiers only; see below).
    #[arg(long)]
    pub(crate) defragment: bool,
}

const SET_AFTER: &str = "\
Without KEY, lists every setting with its value and meaning. With KEY, shows
that setting; with KEY and VALUE, changes it at once for the mounted pool.
Sizes take K/M/G/T (binary units), durations ns/us/ms/s/m/h (a bare number
is seconds). Settings are not stored in the pool: they reset at the next mount.
`policy` is short for migration_policy, with or without VALUE.

Examples:
  terrace set /mnt/terrace
  terrace set /mnt/terrace placement_policy
  terrace set /mnt/terrace placement_policy pm-only
  terrace set /mnt/terrace sync_threshold_bytes 4M
  terrace set /mnt/terrace size_counter_threshold 2
  terrace set /mnt/terrace policy nvmfs      # short for migration_policy";

#[derive(Args, Debug)]
#[command(after_help = SET_AFTER)]
pub(crate) struct SetArgs {
    /// Where the pool is mounted.
    pub(crate) mountpoint: PathBuf,
    /// A setting's name.
    pub(crate) key: Option<String>,
    /// Its new value.
    pub(crate) value: Option<String>,
}

const WHERE_AFTER: &str = "\
For a file on a Terrace mount: where its data lies, then the bytes held by
each tier (total). By default extents that follow each other in the file on
the same tier are shown as one run (offset, length, tier, how many extents it
joins); --all lists every extent with its block address on the tier and the
write-size predictor's counter. Data cached in DRAM and not yet written back
shows as tier dram; NVMFS clean copies as <tier>-copy (summed apart).

For a directory: the data of every regular file below it (recursively, not
following symbolic links), summed by tier.

The listing comes from the mount's daemon and is complete however many
extents a file has. When the daemon cannot be asked, the read-only xattr
user.terrace.extents is read instead; it holds about 2,700 extents at most,
and a listing cut there says so and exits with status 1. The same information,
on one line, is in the read-only xattr user.terrace.tiers:
  getfattr -n user.terrace.tiers FILE

--json prints one object: for a file its size, \"extents\" (every extent),
\"runs\" (the coalesced view), \"bytes_per_tier\", \"rule\" and \"access\"; for a
directory \"files\", \"size\", \"extents\" (a count) and \"bytes_per_tier\".

Examples:
  terrace where /mnt/terrace/db/wal.log
  terrace where --all /mnt/terrace/db/wal.log
  terrace where /mnt/terrace/archive
  terrace where --json /mnt/terrace/big.img";

#[derive(Args, Debug)]
#[command(after_help = WHERE_AFTER)]
pub(crate) struct WhereArgs {
    /// A file or directory on a Terrace mount.
    pub(crate) path: PathBuf,
    /// List every extent (with its block and counter) instead of runs of
    /// adjacent extents on the same tier.
    #[arg(long)]
    pub(crate) all: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

const MKFS_AFTER: &str = "\
Tiers:
  --tier KIND:PATH:SIZE names one tier. KIND is pm, ssd, hdd or s3; PATH is a file
  (created sparse if absent) or a block device; SIZE takes K, M, G or T
  (binary units) and may be left out for an existing file or device to use all
  of it. Exactly one pm tier is required (at least 1M); ssd/hdd tiers need at
  least 16M. Sizes must be multiples of 4K. PATH may contain ':' (the part after
  the last ':' is the size unless the whole rest names an existing file).

  The pm tier holds all metadata (superblocks, journal, inode table, logs) and
  the hot data. Block tiers (ssd, hdd) hold file data: large asynchronous
  writes go to them directly (see placement_policy), cold data migrates down
  to them when PM fills and back up when it is rewritten, through a DRAM page
  cache; their data blocks are checksummed (terrace scrub), and the logs of
  cold files can move there too. Ordered as given: the first block tier is
  the first one data migrates to. Tiers go from fastest to slowest (pm, ssd,
  hdd, s3), as `terrace tier add` keeps them: every ssd tier comes before
  the hdd tiers.

  --tier s3:http(s)://HOST[:PORT]/BUCKET[/PREFIX][:SIZE] adds an object tier
  (S3 or a compatible store) as the coldest tier: last, after at least one
  ssd or hdd tier. It gets data only by migration (terrace migrate --to s3,
  or background migration down), in 16 MiB objects. A trailing :SIZE counts
  only after the path (http://127.0.0.1:9000/b has none, .../b/p:2T is 2T).
  SIZE is virtual (default 1T): it bounds the pool's DRAM tables for the tier
  (about 40 bytes per 16 MiB extent, plus 4 bytes per 4 KiB block of data
  stored there). mkfs refuses a prefix that holds a tier already. Credentials
  come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or ~/.aws/credentials
  (never stored); the region from AWS_REGION. A mount retries failed S3
  requests by the settings s3_retries, s3_timeout_ns, s3_request_timeout_ns
  and s3_backoff_ns (-o, config file, terrace set); TERRACE_S3_TIMEOUT=SECONDS
  changes the default retry budget (mkfs: 10 s).

Space:
  A tier file must fit in the free space of the file system holding it (what
  the file already holds counts; tiers on the same file system are added up),
  though it is created sparse. A pm tier larger than that is always refused:
  PM is mapped, and a write to a page the file system cannot back kills the
  daemon; for the same reason each read-write mount has the file system
  allocate the whole pm tier first (on tmpfs: its memory), and refuses when
  it cannot. A block tier larger than that is refused unless --force, which
  creates it sparse anyway (thin provisioning: its writes fail with ENOSPC
  once the file system fills). Block devices are used up to their size. A pm
  tier on tmpfs larger than the memory available (RAM and swap) gets a
  warning: tmpfs, which may be larger than RAM, keeps its pages in memory.

Inodes:
  mkfs sizes the first inode table. By default it has one slot per 16 KiB
  of PM plus one per 64 KiB of block tiers (at least 64), but at most one
  per 2 KiB of PM: each slot takes 128 bytes of PM, so the table starts
  within 1/16 of PM (e.g. 256M PM alone: 16,384 slots; with a 4G SSD:
  81,920). Slot 0 is reserved: files get one inode fewer than there are
  slots, and mkfs prints that count, as `terrace status` does (\"inodes:
  16383 (16,384 slots; slot 0 is reserved)\"). When its slots run out, the
  mounted pool grows the table by a quarter at a time into PM's free space:
  up to a quarter of PM (32 slots per 4 KiB; the setting inode_max_percent
  changes that share, at mount or with `terrace set`), at most 1,572,864
  more; it never shrinks. Each file in use also needs log space on PM (256
  bytes or more) while its log is there.
  --inodes N sets the first size (N slots, N - 1 inodes).

Safety:
  mkfs never formats any tier of a mounted pool (its PM file or a block-tier
  image or device: the daemon holds a lock on each) nor a mounted device, with
  or without --force. It refuses to overwrite an unmounted Terrace pool or
  tier (naming the pool), or a file or device that holds ext2/3/4, XFS, btrfs
  or swap, unless --force is given.

Exit status: 0 formatted, 2 bad command line (a tier spec, size, tier order,
--inodes or --extent-size that cannot work), 1 anything else (a target in
use, holding data, or without room).

Examples:
  # A 1 GiB pool with its PM tier emulated on /dev/shm:
  terrace mkfs --tier pm:/dev/shm/pool:1G

  # PM plus an SSD image file and an HDD partition (whole device):
  terrace mkfs --tier pm:/dev/pmem0 --tier ssd:/var/lib/terrace/ssd.img:64G --tier hdd:/dev/sdb1

  # Reformat an existing pool with 1 million inode slots:
  terrace mkfs --force --inodes 1000000 --tier pm:/dev/shm/pool:4G";

const TIER_AFTER: &str = "\
Given a mount point (or the pm tier of a mounted pool), the daemon makes the
change at once, with no unmount; given an unmounted pool, this command does.
Tiers go from fastest to slowest (pm, ssd, hdd, s3): `add` appends a tier
after the last one when that order still holds (an s3 tier must come last,
after an ssd or hdd tier); block tiers take the pool's extent size, and a
new tier's id is one above the last tier's. `remove` removes a tier named
by id or kind (by default the last one; never pm): it stops placing data
there, moves the files' data on it to the next tier below (the last tier's
to the nearest tier above, else pm), showing progress, then removes it. It
is refused, before anything moves, when the data would not fit there or a
placement rule names the tier (change the rule first), and when a deleted
file still open keeps its log there.
Clean copies kept on it are dropped (their data stays where it is). The
other tiers keep their ids, so the pool's ids may skip the removed one. On
a mounted pool nothing new lands on the tier while its removal runs. The
superblock is written last, so an interrupted command leaves the pool as it
was. A removed file tier's header is wiped (the file may then be deleted);
an object tier's prefix keeps its marker.

Examples:
  # A pool made with PM only gets an SSD tier:
  terrace tier add /dev/shm/pool ssd:/var/lib/terrace/ssd.img:64G
  # ... and an object tier behind it:
  terrace tier add /dev/shm/pool s3:http://127.0.0.1:9000/bucket/pool
  # Remove the last tier again (its data moves up first):
  terrace tier remove /dev/shm/pool
  # The same on the mounted pool, while it serves files:
  terrace tier remove /mnt/terrace
  # Retire the SSD of a pm+ssd+hdd pool (its data moves to the hdd):
  terrace tier remove /mnt/terrace ssd";

#[derive(Args, Debug)]
#[command(after_help = TIER_AFTER)]
pub(crate) struct TierArgs {
    #[command(subcommand)]
    pub(crate) action: TierAction,
}

#[derive(Subcommand, Debug)]
pub(crate) enum TierAction {
    /// Append a tier (KIND:PATH:SIZE as for mkfs) to a pool, mounted or not.
    ///
    /// Given a mount point (or the pm tier of a mounted pool), the daemon
    /// formats the tier and attaches it at once: it takes data from then on,
    /// with no unmount. Given an unmounted pool, its superblock is changed
    /// here. Either way the tier must be slower than (or as fast as) the
    /// pool's last tier, and an s3 tier comes last.
    Add {
        /// A mount point, or the pool (the path of its pm tier).
        #[arg(value_name = "MOUNTPOINT|POOL")]
        pool: PathBuf,
        /// The new tier as KIND:PATH[:SIZE], e.g. ssd:/data/ssd.img:64G or
        /// s3:http://127.0.0.1:9000/bucket/prefix.
        #[arg(value_name = "KIND:PATH[:SIZE]", value_parser = tier_cmd::TierArg::parse)]
        tier: tier_cmd::TierArg,
        /// Overwrite what the tier file holds; allow a tier file larger than
        /// the free space of its file system.
        #[arg(long)]
        force: bool,
    },
    /// Remove a pool's tier (by default its last), mounted or not, moving
    /// its data to the other tiers first.
    ///
    /// Given a mount point (or the pm tier of a mounted pool), the daemon
    /// stops placing data on the tier, moves the files' data there to the
    /// next tier below it (the last tier's to the nearest tier above, or
    /// pm), moves the inode logs of cold files kept there to the next block
    /// tier (or back to pm), drops the clean copies kept there, checks that
    /// nothing else is stored on it and removes it, with no unmount; the
    /// command shows the move's progress and waits for it however long it
    /// takes. Given an unmounted pool, this command does the same in its own
    /// process. Any tier but pm may go, unless a placement rule names it,
    /// the other tiers lack the room for its data (refused before anything
    /// moves, saying how much is needed), or a deleted file still open
    /// keeps its inode log there. A refused or failed removal leaves
    /// the tier in use (data moved so far stays moved); the other tiers
    /// keep their ids.
    Remove {
        /// A mount point, or the pool (the path of its pm tier).
        #[arg(value_name = "MOUNTPOINT|POOL")]
        pool: PathBuf,
        /// The tier to remove: its id (as `terrace status` shows it) or its
        /// kind (ssd, hdd, s3) when the pool has one tier of that kind.
        /// Default: the last tier.
        #[arg(value_name = "TIER")]
        tier: Option<String>,
    },
}

#[derive(Args, Debug)]
#[command(after_help = MKFS_AFTER)]
pub(crate) struct MkfsArgs {
    /// A tier as KIND:PATH:SIZE (repeat for each tier), e.g. pm:/dev/shm/pool:1G.
    #[arg(long = "tier", value_name = "KIND:PATH:SIZE", required = true, value_parser = mkfs::parse_tier)]
    pub(crate) tiers: Vec<mkfs::TierSpec>,
    /// Number of inode slots (default, or 0: one per 16 KiB of PM plus one
    /// per 64 KiB of block tiers, at most one per 2 KiB of PM; see below).
    #[arg(long, value_name = "N")]
    pub(crate) inodes: Option<u64>,
    /// Extent size of the SSD/HDD tiers (power of two, 4K to 1G).
    #[arg(long, value_name = "SIZE", default_value = "512K", value_parser = util::parse_size)]
    pub(crate) extent_size: u64,
    /// Overwrite an existing pool or file system; allow a block-tier file
    /// larger than the free space of its file system.
    #[arg(long)]
    pub(crate) force: bool,
}

const MOUNT_AFTER: &str = "\
POOL is the path of the pool's pm tier; its superblock names the other tiers,
which must be present with matching tier headers (pool, id, kind, size) and
at least their recorded size (a truncated or replaced image is refused); the
daemon locks every tier file while it serves the pool. The mount point must be an
existing directory that is not already a mount point.

By default terrace serves the mount in the foreground until Ctrl-C, SIGTERM,
`terrace umount MOUNTPOINT` or `umount MOUNTPOINT`; every way persists the pool
and marks it clean. With --daemon it detaches, waits until the mount is live
and returns; the daemon logs to /run/terrace/<mountpoint>.log (kept across
unmounts; renamed to .log.old past 1 MiB). Its lines also go to the system log
(/dev/log: journald or syslog, tag terrace) when there is one.

Mount options (-o, comma-separated, repeatable):
  allow_other     let all users access the file system (FUSE option)
  allow_root      let root access it too
  ro              read-only mount: nothing is written to any tier; a pool
                  that was not cleanly unmounted is served as recovery
                  will leave it, recovered in memory only (the next
                  read-write mount recovers it on media); migrate and set
                  are refused
  norecovery      (or noload) only with ro, which never recovers a pool on
                  media; accepted for scripts written for ext4 and XFS
  acl, noacl      POSIX ACLs (setfacl/getfacl), on by default as on ext4
  selinux_labels  store the security.selinux attribute as ext4 does; off by
                  default, where it is not supported (EOPNOTSUPP), so `ls -l`
                  stops asking every file for it (a host with SELinux
                  enabled labels a FUSE mount itself and never asks)
  relatime        reads update the access time when it is not after the last
                  change, or is a day old (the default, as on Linux)
  strictatime     every read updates the access time
  noatime         reads never update access times (nodiratime, lazytime
                  are accepted; directories get no access time from reads)
  nosuid, nodev   ignore set-user-ID bits / device nodes (the default when
                  not mounted by root; root gets suid, dev, as with mount(8))
  noexec          forbid executing programs
  sync, dirsync   synchronous (directory) updates
  threads=N       FUSE request threads (default 2)
  poll_us=N       after a reply, poll for the next request up to N µs when
                  requests come back to back, saving a wake-up (default 50;
                  0 = never poll)
  writeback_cache the kernel's writeback cache (default off): write() lands
                  in the kernel's pages and reaches the pool at fsync, close,
                  O_SYNC/O_DSYNC or the kernel's write-back — small writes
                  cost a memory copy, but a killed daemon loses what was not
                  yet written back and write() is no longer atomic
                  (no_writeback_cache: off)
  discard         online discard: free extents of the SSD/HDD tiers are
                  discarded in the background, at most every 10 s (BLKDISCARD
                  on a device, a punched hole in a tier file), as fstrim does
                  on demand; nodiscard (the default) leaves it to fstrim.
                  Same as discard_interval_ns=10s (0: off)
  fill_after_write=auto|always|never
                  when a file written through a write-only descriptor
                  (128 KiB to 128 MiB, not O_DIRECT) is closed, copy its
                  bytes into the kernel's page cache so the next reader is
                  served from memory; auto (default) does so while later
                  readers use at least half of the fills
  metrics=IP:PORT serve Prometheus metrics at http://IP:PORT/metrics while
                  mounted (per-tier capacity, use and I/O, migration, cache,
                  predictor accuracy, errors, FUSE request latencies), e.g.
                  metrics=127.0.0.1:9464; a port in use fails the mount
  KEY=VALUE       any setting listed by `terrace set MOUNTPOINT`, e.g.
                  sync_threshold_bytes=4M, placement_policy=pm-only
  default_permissions is always on: the kernel checks permissions.

Settings can also come from a config file (--config FILE, TOML with one
`key = value` per setting) and change at run time with `terrace set`.
Every value goes through its key's parser and range check wherever it comes
from, and means the same everywhere: a bare number is bytes for a size and
seconds for a duration (writeback_age_ns = \"5\" in the file is 5 s, as
-o writeback_age_ns=5 is). In the file a duration is a string, best with
its unit (\"5s\", \"500ms\"; a bare TOML integer is refused, 0 aside), a size
may be an integer (bytes) and a switch true or false. Then the finished
settings (config file, then -o, then --dram-cache, a later value of a key
winning) are validated as a whole — rules between keys such as
nvmfs_dirty_low_percent < nvmfs_dirty_high_percent, in any order — before
the pool is opened: a bad setting writes nothing. A bad value, a bad or
unreadable config file or an unknown key exits 2, as a bad -o option does.
--dram-cache SIZE bounds the DRAM page cache in front of the block tiers
(default 256M; same as -o dram_cache_bytes=SIZE).

Examples:
  terrace mount /dev/shm/pool /mnt/terrace                 # foreground
  terrace mount --daemon /dev/shm/pool /mnt/terrace        # background
  terrace mount --daemon -o allow_other,noatime /dev/shm/pool /mnt/terrace
  terrace mount --daemon -o metrics=127.0.0.1:9464 /dev/shm/pool /mnt/terrace";

#[derive(Args, Debug)]
#[command(after_help = MOUNT_AFTER)]
pub(crate) struct MountArgs {
    /// The pool: path of its pm tier.
    pub(crate) pool: PathBuf,
    /// An existing directory to mount on.
    pub(crate) mountpoint: PathBuf,
    /// Mount options, comma-separated (see below).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub(crate) options: Vec<String>,
    /// Bound of the DRAM page cache for block-tier data (e.g. 512M, 2G).
    #[arg(long, value_name = "SIZE")]
    pub(crate) dram_cache: Option<String>,
    /// Settings from a TOML file (one `key = value` per setting).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Detach into the background once mounted.
    #[arg(long, conflicts_with = "foreground")]
    pub(crate) daemon: bool,
    /// Stay in the foreground (the default).
    #[arg(long)]
    pub(crate) foreground: bool,
    /// Internal: run as the detached daemon started by --daemon.
    #[arg(long, hide = true)]
    pub(crate) foreground_child: bool,
}

const UMOUNT_AFTER: &str = "\
Asks the daemon serving MOUNTPOINT to unmount: the FUSE mount goes away, the
pool is persisted and marked clean, and the daemon exits; terrace umount
returns when all of that is done. If files are still open the unmount fails
with \"target is busy\"; --lazy detaches the mount point at once and lets the
daemon finish when the last file closes.

If no daemon answers (it was killed), the mount point is unmounted anyway and a
warning says the pool was not marked clean: the next mount recovers it.

Examples:
  terrace umount /mnt/terrace
  terrace umount --lazy /mnt/terrace";

#[derive(Args, Debug)]
#[command(after_help = UMOUNT_AFTER)]
pub(crate) struct UmountArgs {
    /// Where the pool is mounted.
    pub(crate) mountpoint: PathBuf,
    /// Detach now even if busy; the daemon finishes when the last file closes.
    #[arg(short, long)]
    pub(crate) lazy: bool,
}

const STATUS_AFTER: &str = "\
Shows the pool's id and media, each tier's capacity and use, inodes in use,
log space, data blocks, whether the pool was cleanly unmounted before this
mount, what recovery did, and I/O counters since mount.

FRAG, per block tier, is NVMFS's extent use: the fewest extents that could
hold the tier's data over the extents that do hold it (100% = no
fragmentation; the cleaner recycles extents when it falls below 80%), and
\"-\" for a tier that holds no data. A block tier with dead blocks (freed
inside extents that still hold data: SSD and HDD tiers are written
non-overwrite) gets a line saying how much; `df` does not count them as
free, and extent recycling reclaims them before a write would get ENOSPC.

Anyone may ask for the status; only root and the user who mounted the pool
may change it (set, migrate, scrub, umount).

--json prints the same as one JSON object (the fields of the core's Status,
plus \"pid\", \"mountpoint\" and \"pool\").

Examples:
  terrace status /mnt/terrace
  terrace status --json /mnt/terrace | jq .inodes_used";

#[derive(Args, Debug)]
#[command(after_help = STATUS_AFTER)]
pub(crate) struct StatusArgs {
    /// Where the pool is mounted.
    pub(crate) mountpoint: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

const FSCK_AFTER: &str = "\
Checks an unmounted pool without writing to it: superblocks, every inode slot
and log entry checksum, log chains, reachability from the root, link counts and
block ownership (no block owned twice, no leak). Orphan inodes and open journal
transactions left by a crash are reported; mount handles them by itself.

--repair fixes what can be fixed safely. It first rolls back open journal
transactions (as mount would) and clears unreadable journal slots. Then it
corrects a word linking a log (its head, tail or next page) that is one or two
bits off, which loses nothing; otherwise it truncates unreadable logs to their
last good entry and frees broken inode slots. Files and directories that only
those named are kept in /lost+found as #INODE (made when missing, mode 0700).
Last, it removes directory entries that point nowhere, corrects link counts
and frees the other orphans (files unlinked while open, creates a crash cut
short).

Shows a progress bar on large pools. Refuses a mounted pool.
Exit status: 0 clean, 1 problems remain, 2 cannot check (not a pool, mounted, …).

Examples:
  terrace fsck /dev/shm/pool
  terrace fsck --repair /dev/shm/pool
  terrace fsck --data /dev/shm/pool
  terrace fsck --json /dev/shm/pool";

#[derive(Args, Debug)]
#[command(after_help = FSCK_AFTER)]
pub(crate) struct FsckArgs {
    /// The pool: path of its pm tier.
    pub(crate) pool: PathBuf,
    /// Fix what can be fixed safely.
    #[arg(long)]
    pub(crate) repair: bool,
    /// Also read every block of file data on the block tiers and verify its
    /// checksum (damaged blocks are problems; takes as long as reading them).
    #[arg(long)]
    pub(crate) data: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// No progress bar (there is none without a terminal either).
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

#[cfg(test)]
mod tests {
    /// `-o ro` of a pool that was not cleanly unmounted serves it recovered
    /// in memory (since 2026-12-07): the help no longer says it is refused.
    #[test]
    fn the_mount_help_says_ro_serves_an_unclean_pool_recovered_in_memory() {
        let ro: String = super::MOUNT_AFTER
            .split("\n  ro ")
            .nth(1)
            .and_then(|rest| rest.split("\n  norecovery").next())
            .expect("an ro entry")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(!ro.contains("refused: mount it read-write"), "{ro}");
        assert!(
            ro.contains("not cleanly unmounted is served as recovery will leave it, recovered in memory only"),
            "{ro}"
        );
    }

    /// The mkfs help explains why mkfs prints one inode fewer than the
    /// formula's slots.
    #[test]
    fn the_mkfs_help_says_slot_0_is_reserved() {
        let text = super::MKFS_AFTER
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(text.contains("Slot 0 is reserved"), "{text}");
        assert!(text.contains("(N slots, N - 1 inodes)"), "{text}");
    }

    /// The mount help says how config-file values read and that a bad
    /// config file exits 2.
    #[test]
    fn the_mount_help_says_a_bare_number_is_seconds_in_the_config_file_too() {
        let text = super::MOUNT_AFTER
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            text.contains(
                "writeback_age_ns = \"5\" in the file is 5 s, as -o writeback_age_ns=5 is"
            ),
            "{text}"
        );
        assert!(text.contains("a bare TOML integer is refused"), "{text}");
        assert!(
            text.contains("config file or an unknown key exits 2"),
            "{text}"
        );
    }
}
