//! FUSE adapter (being written).
