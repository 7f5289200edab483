//! The per-entity evaluator.
