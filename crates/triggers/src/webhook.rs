//! Webhook firings: signing and delivery.
