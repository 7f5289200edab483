//! (see the crate documentation)
