//! # sluice-triggers: event triggers over topics
//!
//! A trigger reads its source topics through the broker, takes each record's entity id and
//! event name, evaluates its rule (crate `sluice-rules`) per entity, and fires into a topic or
//! a signed webhook. Its state lives on the broker's own durable storage (an internal topic),
//! so it survives SIGKILL in every storage mode. `docs/triggers.md` is the user's guide.
//!
//! - [`spec`]: a trigger's definition and its text forms (`key`, `json:FIELD`, `topic:NAME`);
//! - [`manager`]: create, list, describe, delete; the durable definitions;
//! - [`run`]: one trigger's evaluator and deliverer tasks, recovery, exactly-once firings;
//! - [`engine`]: the entities' rule states and the timer wheel, without I/O;
//! - [`codec`]: the records of a trigger's state log;
//! - [`webhook`]: signing and delivery of webhook firings.

pub mod codec;
pub mod engine;
pub mod manager;
pub mod run;
pub mod spec;
pub mod webhook;

pub use manager::{CreateRequest, Created, Manager, TriggerError, TriggerInfo, TriggerStatus};
