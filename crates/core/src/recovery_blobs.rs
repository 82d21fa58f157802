//! Reading log blobs from the block tiers during the mount scan
//! (`recovery.rs`): log migration packs the logs of cold inodes into blobs
//! on a block tier (design.md §3.6), and the scan reads each back through
//! a one-block-run memory, since packed blobs of consecutive inodes share
//! blocks. Every number read from the image is checked against the device
//! before it is used: a crafted image with valid CRCs may carry any. A
//! blob that fails its checks gives what still reads of it
//! (`LogBlob::salvage`); what that leaves of the inode's attributes and
//! data is judged here ([`attributes_lost`], [`data_may_be_lost`]).

use crate::inode::Inode;
use crate::types::{FileType, Ino};
use std::sync::Arc;
use terrace_format::{LogBlob, PhysBlock, TierId, BLOCK_SIZE};
use terrace_media::BlockMedia;

/// The block-tier devices a scan may read logs from: `(tier id, device)`.
pub type TierDevices = [(u8, Arc<dyn BlockMedia>)];

/// The blocks the scan read last for a log blob. Packed blobs share
/// blocks, and log migration packs them in inode order, so the next inode's
/// blob is mostly in the block just read: a pool of 546,000 small files
/// with their logs on the SSD read every block a dozen times (one device
/// read per inode) and took over a minute to mount (xfstests generic/558).
#[derive(Default)]
pub(crate) struct BlobBlocks {
    /// (tier, first block, blocks) of `buf`.
    at: Option<(TierId, PhysBlock, u64)>,
    buf: Vec<u8>,
}

/// Why a log blob could not be read whole, and what of it could.
#[derive(Debug)]
pub(crate) struct BlobError {
    /// What is wrong, for the scan's problem list.
    pub what: String,
    /// The entries whose own checksums hold, when the blob's header is
    /// intact and names the inode ([`LogBlob::salvage`]); `None` when the
    /// blob could not be read or its header is damaged.
    pub salvaged: Option<terrace_format::SalvagedBlob>,
}

impl BlobError {
    fn unreadable(what: String) -> BlobError {
        BlobError {
            what,
            salvaged: None,
        }
    }
}

/// Reads the log blob of inode `ino` (slot generation `generation`) that
/// its slot places on tier `tier`, `offset` bytes into `block`, `bytes`
/// long. `Ok(None)`: the tier's device was not given.
pub(crate) fn read_log_blob(
    tiers: &TierDevices,
    last: &mut BlobBlocks,
    ino: Ino,
    generation: u32,
    (tier, block, offset, bytes): (TierId, PhysBlock, u64, u64),
) -> Result<Option<LogBlob>, BlobError> {
    let Some((_, dev)) = tiers.iter().find(|(id, _)| *id == tier.get()) else {
        return Ok(None);
    };
    let blocks = (offset + bytes).div_ceil(BLOCK_SIZE);
    if block == PhysBlock::ZERO || !fits_within(block, blocks, PhysBlock(dev.blocks())) {
        return Err(BlobError::unreadable(format!(
            "log blob at block {block} of tier {tier} lies outside the device"
        )));
    }
    if last.at != Some((tier, block, blocks)) {
        last.at = None;
        last.buf.resize((blocks * BLOCK_SIZE) as usize, 0);
        dev.read_blocks(block.get(), &mut last.buf).map_err(|e| {
            BlobError::unreadable(format!("log blob on tier {tier} at block {block}: {e}"))
        })?;
        last.at = Some((tier, block, blocks));
    }
    let b = &last.buf[offset as usize..];
    LogBlob::decode(b, bytes, ino, generation)
        .map(Some)
        .map_err(|e| {
            let salvaged = LogBlob::salvage(b, bytes, ino, generation);
            let what = match &salvaged {
                Some(s) => format!(
                    "log blob on tier {tier} at block {block}: {e}; entries lost: {}, read: {}",
                    s.lost,
                    s.entries.len()
                ),
                None => format!("log blob on tier {tier} at block {block}: {e}"),
            };
            BlobError { what, salvaged }
        })
}

/// Whether a blob of `bytes` bytes starting `offset` bytes into its first
/// block lies where a blob may: one that does not start a block is packed
/// with others, and lies inside its block (format version 11).
pub(crate) fn blob_fits_its_place(offset: u64, bytes: u64) -> bool {
    offset == 0
        || offset
            .checked_add(bytes)
            .is_some_and(|end| end <= BLOCK_SIZE)
}

/// Whether `blocks` blocks from `first` end at or before `end`, without
/// overflow (a crafted image with a valid CRC may carry any numbers).
pub(crate) fn fits_within(first: PhysBlock, blocks: u64, end: PhysBlock) -> bool {
    first.checked_end(blocks).is_some_and(|last| last <= end)
}

/// Why the data of a file whose blob was read only in part
/// ([`LogBlob::salvage`](terrace_format::LogBlob::salvage)) may be
/// incomplete, if it may: a lost entry could have mapped data, and the
/// file would then read zeros there. A blob's data entries are block-tier
/// writes, each with Sums entries for its blocks, so one lost entry is
/// known not to be data when every salvaged checksum still has its write;
/// it may be when a checksum lost its write, when the file has data but no
/// checksums were read (the lost entry may be the write of a pool older
/// than checksums), or when more than one entry was lost. A symlink's
/// target is its data: any loss counts.
pub(crate) fn data_may_be_lost(
    inode: &Inode,
    salvaged: &terrace_format::SalvagedBlob,
) -> Option<String> {
    use terrace_format::Entry;
    if salvaged.lost == 0 || !matches!(inode.kind, FileType::Regular | FileType::Symlink) {
        return None;
    }
    let mapped = |tier: TierId, block: u64| {
        salvaged.entries.iter().any(|e| match e {
            Entry::Write(w) => {
                w.wflags & terrace_format::WRITE_FLAG_ZERO == 0
                    && w.tier == tier
                    && (w.block.get()..w.block.get() + u64::from(w.blocks)).contains(&block)
            }
            Entry::Copy(c) => {
                c.tier == tier
                    && (c.block.get()..c.block.get() + u64::from(c.blocks)).contains(&block)
            }
            _ => false,
        })
    };
    let mut sums = 0;
    let mut orphan = false;
    for e in &salvaged.entries {
        if let Entry::Sums { tier, block, crcs } = e {
            sums += 1;
            orphan |= (0..crcs.len() as u64).any(|k| !mapped(*tier, block.get() + k));
        }
    }
    let has_data = inode.attr.size > 0
        || salvaged
            .entries
            .iter()
            .any(|e| matches!(e, Entry::Write(_)));
    let may =
        inode.kind == FileType::Symlink || salvaged.lost >= 2 || orphan || (sums == 0 && has_data);
    may.then(|| {
        format!(
            "{} log entries lost: the file's data may be incomplete; reads fail with EIO until this attribute is removed",
            salvaged.lost
        )
    })
}

/// What an inode whose blob lost its attribute entry gets instead of the
/// creation-time attributes its slot holds: the size its data entries
/// recorded (a blob's write entries carry the file's size), and of the
/// permissions only the owner's, no set-ID bits — a file made private
/// with chmod after its creation must not become readable by others.
pub(crate) fn attributes_lost(inode: &mut Inode, salvaged: &[terrace_format::Entry]) {
    let size = salvaged
        .iter()
        .filter_map(|e| match e {
            terrace_format::Entry::Write(w) => Some(w.size_after),
            _ => None,
        })
        .max();
    if let Some(size) = size {
        inode.attr.size = size;
    }
    inode.attr.mode &= libc::S_IFMT | 0o700;
}
