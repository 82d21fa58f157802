//! Cache-line write-back and store fences: the only module that issues them.
//!
//! Invariants:
//! - The flush instruction is chosen once per process from CPUID, preferring
//!   `clwb` (writes back, keeps the line cached) over `clflushopt` (weakly
//!   ordered, evicts) over `clflush` (strongly ordered, evicts).
//! - [`flush_range`] writes back every cache line that overlaps the range; it
//!   does not order anything by itself. [`fence`] (`sfence`) orders every
//!   earlier flush before every later store; only after it are flushed lines
//!   guaranteed durable on real persistent memory.
//! - On targets other than x86_64 there is no user-space write-back instruction
//!   here: [`flush_range`] does nothing and [`fence`] is a sequentially
//!   consistent atomic fence (adequate for the tmpfs/file emulation only).

use crate::CACHE_LINE;

/// The write-back instruction in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Instr {
    Clwb,
    Clflushopt,
    Clflush,
    None,
}

impl Instr {
    fn name(self) -> &'static str {
        match self {
            Instr::Clwb => "clwb",
            Instr::Clflushopt => "clflushopt",
            Instr::Clflush => "clflush",
            Instr::None => "fence-only",
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Instr {
    let cpuid = raw_cpuid::CpuId::new();
    if let Some(f) = cpuid.get_extended_feature_info() {
        // CPUID leaf 7: EBX bit 24 = clwb, bit 23 = clflushopt.
        if f.has_clwb() {
            return Instr::Clwb;
        }
        if f.has_clflushopt() {
            return Instr::Clflushopt;
        }
    }
    // CPUID leaf 1: EDX bit 19 = clflush (architectural on every x86_64 CPU).
    match cpuid.get_feature_info() {
        Some(f) if !f.has_clflush() => Instr::None,
        _ => Instr::Clflush,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Instr {
    Instr::None
}

fn instr() -> Instr {
    static INSTR: std::sync::OnceLock<Instr> = std::sync::OnceLock::new();
    *INSTR.get_or_init(detect)
}

/// Name of the write-back instruction chosen at run time: `"clwb"`,
/// `"clflushopt"`, `"clflush"`, or `"fence-only"` when there is none.
pub fn flush_instruction() -> &'static str {
    instr().name()
}

/// Writes back every cache line overlapping `[ptr, ptr + len)`.
///
/// The range must lie inside memory the caller may read (a live mapping);
/// `len == 0` does nothing. Not ordered: follow with [`fence`].
pub fn flush_range(ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let line = CACHE_LINE as usize;
    let start = (ptr as usize) & !(line - 1);
    let end = (ptr as usize).saturating_add(len);
    let which = instr();
    let mut addr = start;
    while addr < end {
        flush_line(which, addr as *const u8);
        addr += line;
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn flush_line(which: Instr, p: *const u8) {
    use core::arch::asm;
    match which {
        // Safety: `p` lies in a cache line that overlaps the caller's readable
        // range; clwb only writes the line back, it changes no memory contents or
        // registers, and CPUID reported support for it.
        Instr::Clwb => unsafe {
            asm!("clwb [{}]", in(reg) p, options(nostack, preserves_flags));
        },
        // Safety: as above; clflushopt is supported per CPUID and only evicts the
        // line after writing it back.
        Instr::Clflushopt => unsafe {
            asm!("clflushopt [{}]", in(reg) p, options(nostack, preserves_flags));
        },
        // Safety: as above; clflush is supported per CPUID leaf 1.
        Instr::Clflush => unsafe { core::arch::x86_64::_mm_clflush(p) },
        Instr::None => {}
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn flush_line(_which: Instr, _p: *const u8) {}

/// Store fence: orders every earlier flush and store before every later store.
pub fn fence() {
    #[cfg(target_arch = "x86_64")]
    // Safety: sfence is part of SSE, which every x86_64 CPU has; it has no
    // operands and touches no memory.
    unsafe {
        core::arch::x86_64::_mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_instruction_is_one_of_the_known_names() {
        assert!(["clwb", "clflushopt", "clflush", "fence-only"].contains(&flush_instruction()));
    }

    #[test]
    fn flushing_unaligned_ranges_keeps_contents() {
        let mut buf = vec![0u8; 1000];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = i as u8;
        }
        flush_range(buf.as_ptr().wrapping_add(3), 517);
        flush_range(buf.as_ptr(), 0);
        flush_range(buf.as_ptr().wrapping_add(999), 1);
        fence();
        assert!(buf.iter().enumerate().all(|(i, &b)| b == i as u8));
    }
}
