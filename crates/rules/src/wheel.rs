//! The timer wheel.
