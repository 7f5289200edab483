//! Refuses rules that can never fire.
