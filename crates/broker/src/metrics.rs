//! The broker's metrics: request counts and latencies of both listeners, bytes in and out,
//! and (at render time) fsync, partition and consumer-lag gauges, as Prometheus text.
//!
//! Interface only so far; the recording and rendering are filled in with `/metrics`.

use std::time::Duration;

use crate::Broker;

/// Counters and latency histograms, shared by the Kafka listener and the HTTP API.
#[derive(Debug, Default)]
pub struct Metrics {}

impl Metrics {
    /// One Kafka request answered: its API key, the time from decoding it to having its
    /// response, and the frame sizes in and out (`bytes_out` 0 when there is no response).
    pub fn kafka_request(&self, api_key: i16, elapsed: Duration, bytes_in: usize, bytes_out: usize) {
        let _ = (api_key, elapsed, bytes_in, bytes_out);
    }

    /// One HTTP request answered: its route pattern (e.g. `/topics/{topic}/records`), method,
    /// status, time to the response head, and body sizes.
    pub fn http_request(
        &self,
        method: &str,
        route: &str,
        status: u16,
        elapsed: Duration,
        bytes_in: u64,
        bytes_out: u64,
    ) {
        let _ = (method, route, status, elapsed, bytes_in, bytes_out);
    }

    /// Records appended through either listener.
    pub fn records_in(&self, records: u64) {
        let _ = records;
    }

    /// Records served through either listener.
    pub fn records_out(&self, records: u64) {
        let _ = records;
    }
}

/// The Prometheus text exposition (format 0.0.4) of `broker`'s metrics and current state.
pub fn render(broker: &Broker) -> String {
    let _ = broker;
    String::new()
}
