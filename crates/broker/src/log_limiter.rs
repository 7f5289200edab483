//! One log line per interval for events that can repeat thousands of times a second (a refused
//! connection, a failing accept, a connection closed for a timeout), with the number of events
//! since the last line, so a flood of them costs a line every few seconds, never a log flood.
//! Shared by the Kafka listener and the HTTP API.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Lets one line through per `interval`.
#[derive(Debug)]
pub struct LogLimiter {
    interval: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    last_line: Option<Instant>,
    /// Events since the last line, this one included.
    since_last_line: u64,
}

impl LogLimiter {
    pub fn new(interval: Duration) -> LogLimiter {
        LogLimiter {
            interval,
            state: Mutex::new(State::default()),
        }
    }

    /// Counts one event at `now`; `Some(events since the last line, this one included)` when a
    /// line is due, `None` when it is not (the event is counted for the next line).
    pub fn hit(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.since_last_line += 1;
        if state
            .last_line
            .is_some_and(|last| now.saturating_duration_since(last) < self.interval)
        {
            return None;
        }
        state.last_line = Some(now);
        Some(std::mem::take(&mut state.since_last_line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count() {
        let limiter = LogLimiter::new(Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(limiter.hit(t0), Some(1));
        for i in 1..=100 {
            assert_eq!(limiter.hit(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(limiter.hit(t0 + Duration::from_secs(6)), Some(101));
        assert_eq!(limiter.hit(t0 + Duration::from_secs(7)), None);
    }
}
