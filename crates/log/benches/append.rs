//! Append benchmark (placeholder until written).
fn main() {}
