//! The JSON form of rules.
