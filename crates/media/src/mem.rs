//! [`MemMedia`]: a plain in-memory buffer for unit tests.
//!
//! Invariants: every store is immediately "durable" (there is no crash to
//! survive), so `flush` and `fence` only check their arguments. The buffer sits
//! behind a read-write lock, so concurrent calls are memory-safe even when a
//! caller breaks the disjoint-range rule; `store_u64` is atomic because it
//! happens under the write lock.

use parking_lot::RwLock;

use crate::PmMedia;

/// In-memory media; contents are lost when it is dropped.
#[derive(Debug)]
pub struct MemMedia {
    buf: RwLock<Vec<u8>>,
}

impl MemMedia {
    /// Zero-filled media of `len` bytes.
    pub fn new(len: u64) -> MemMedia {
        let len = usize::try_from(len).expect("MemMedia length exceeds the address space");
        MemMedia::from_image(vec![0; len])
    }

    /// Media holding `image`.
    pub fn from_image(image: Vec<u8>) -> MemMedia {
        MemMedia {
            buf: RwLock::new(image),
        }
    }

    /// A copy of the current contents.
    pub fn image(&self) -> Vec<u8> {
        self.buf.read().clone()
    }
}

/// Panics unless `[off, off + len)` lies inside `size`; returns the range.
pub(crate) fn range(size: usize, off: u64, len: u64) -> std::ops::Range<usize> {
    match off.checked_add(len) {
        Some(end) if end <= size as u64 => off as usize..end as usize,
        _ => panic!("access [{off}, +{len}) outside media of {size} bytes"),
    }
}

impl PmMedia for MemMedia {
    fn len(&self) -> u64 {
        self.buf.read().len() as u64
    }

    fn read(&self, off: u64, buf: &mut [u8]) {
        let b = self.buf.read();
        buf.copy_from_slice(&b[range(b.len(), off, buf.len() as u64)]);
    }

    fn write(&self, off: u64, data: &[u8]) {
        let mut b = self.buf.write();
        let r = range(b.len(), off, data.len() as u64);
        b[r].copy_from_slice(data);
    }

    fn store_u64(&self, off: u64, value: u64) {
        assert!(off % 8 == 0, "store_u64 at unaligned offset {off}");
        self.write(off, &value.to_le_bytes());
    }

    fn flush(&self, off: u64, len: u64) {
        range(self.buf.read().len(), off, len);
    }

    fn fence(&self) {}

    fn describe(&self) -> String {
        format!("memory ({} bytes)", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_media_reads_back_stores_and_words() {
        let m = MemMedia::new(4096);
        m.write(10, b"abc");
        m.store_u64(64, 0xdead_beef_0000_0001);
        m.persist(0, 4096);
        let mut b = [0u8; 3];
        m.read(10, &mut b);
        assert_eq!(&b, b"abc");
        assert_eq!(m.load_u64(64), 0xdead_beef_0000_0001);
        let img = m.image();
        assert_eq!(&img[64..72], &0xdead_beef_0000_0001u64.to_le_bytes());
        let m2 = MemMedia::from_image(img);
        assert_eq!(m2.load_u64(64), 0xdead_beef_0000_0001);
        assert_eq!(m2.len(), 4096);
    }

    #[test]
    #[should_panic(expected = "outside media")]
    fn mem_media_panics_out_of_range() {
        MemMedia::new(16).write(10, &[0; 7]);
    }
}
