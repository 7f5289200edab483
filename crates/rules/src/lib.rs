//! # sluice-rules: the trigger rule language and its evaluator
//!
//! A trigger (crate `sluice-triggers`) watches the events of each entity (a user, a sensor,
//! an order) and fires when a rule over them becomes true, e.g.
//! `"signed_up" THEN (NOT "paid" WITHIN 7d)`. This crate is the part with no I/O: the
//! language, the checks, the per-entity evaluator (the clock is passed in) and the timer wheel.
//! `docs/triggers.md` is the user's guide and the exact semantics.
//!
//! - [`rule`]: the syntax tree, the text parser with positioned errors, the JSON form;
//! - [`check`]: refuses rules that can never fire, with a reason;
//! - [`eval`]: the incremental per-entity evaluator, and [`eval::reference`], the simple
//!   evaluator it is tested against;
//! - [`wheel`]: the timer wheel time bounds fire from.

pub mod check;
pub mod eval;
pub mod rule;
pub mod wheel;
