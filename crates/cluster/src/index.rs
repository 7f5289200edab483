//! Reading the batch index, on any broker: which object bytes hold which offsets
//! ([`read_batches`], [`offset_for_timestamp`]), a partition's bounds ([`partition_bounds`],
//! [`topic_bounds`]), and the wake-ups commits send ([`CommitListener`]).
//!
//! Where it sits: a fetch asks [`partition_bounds`] for the high watermark, then
//! [`read_batches`] for the rows from its offset on, and serves each row's bytes from the
//! object (`object_key`, `byte_start`, `byte_len`) with the batches' base offsets rewritten to
//! the committed ones. A fetch that waits for data subscribes to a [`CommitListener`], which
//! turns every commit's `NOTIFY` into [`CommitEvent`]s.
//!
//! Everything read here was committed by [`crate::commit::commit_object`] and so is durable:
//! a reader never sees a batch that could still vanish.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, NoTls};
use uuid::Uuid;

use crate::commit::{COMMIT_CHANNEL, NOTIFY_EVERYTHING};
use crate::db::{Db, DbError};

/// Rows one [`read_batches`] returns at most, whatever the caller asks: a fetch reads a few
/// MiB at a time, and each row is at least one batch.
pub const READ_ROWS_MAX: usize = 10_000;

/// One row of the index: consecutive batches of a partition that lie together in one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRow {
    /// The first offset of the first batch and the last offset of the last.
    pub base_offset: i64,
    pub last_offset: i64,
    /// Where the batches' bytes are.
    pub object_key: String,
    pub byte_start: u64,
    pub byte_len: u32,
    /// How many batches the bytes hold.
    pub batch_count: i32,
    /// The greatest max timestamp of those batches (ms).
    pub max_timestamp: i64,
}

/// A partition's offsets: `log_start` is the first one a reader may ask for, `next_offset`
/// (the high watermark) the one the next committed batch gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub log_start: i64,
    pub next_offset: i64,
}

const SQL_READ: &str = "SELECT b.base_offset, b.last_offset, o.key, b.byte_start, b.byte_len, \
            b.batch_count, b.max_timestamp \
     FROM batches b JOIN objects o ON o.object_id = b.object_id \
     WHERE b.topic_id = $1 AND b.partition = $2 AND b.last_offset >= $3 \
     ORDER BY b.last_offset LIMIT $4";

const SQL_BOUNDS: &str =
    "SELECT log_start, next_offset FROM partitions WHERE topic_id = $1 AND partition = $2";

const SQL_TOPIC_BOUNDS: &str = "SELECT partition, log_start, next_offset FROM partitions \
     WHERE topic_id = $1 ORDER BY partition";

// Timestamps need not grow with offsets, so this walks the partition's rows in offset order
// from the log start until one qualifies: cheap for the usual "since a while ago", a scan of
// the partition's index for a time past everything (bounded by the statement timeout). An
// index on max_timestamp would cost every commit more than it saves this rare lookup.
const SQL_BY_TIME: &str = "SELECT b.base_offset, b.last_offset, o.key, b.byte_start, \
            b.byte_len, b.batch_count, b.max_timestamp \
     FROM partitions p \
     JOIN batches b ON b.topic_id = p.topic_id AND b.partition = p.partition \
                   AND b.last_offset >= p.log_start \
     JOIN objects o ON o.object_id = b.object_id \
     WHERE p.topic_id = $1 AND p.partition = $2 AND b.max_timestamp >= $3 \
     ORDER BY b.last_offset LIMIT 1";

// A scan of the partition's rows from the log start, as SQL_BY_TIME's worst case; only
// ListOffsets' max-timestamp spec asks it.
const SQL_MAX_TIMESTAMP: &str = "SELECT max(b.max_timestamp) \
     FROM partitions p \
     JOIN batches b ON b.topic_id = p.topic_id AND b.partition = p.partition \
                   AND b.last_offset >= p.log_start \
     WHERE p.topic_id = $1 AND p.partition = $2";

fn batch_row(r: &tokio_postgres::Row) -> BatchRow {
    let byte_start: i64 = r.get(3);
    let byte_len: i32 = r.get(4);
    BatchRow {
        base_offset: r.get(0),
        last_offset: r.get(1),
        object_key: r.get(2),
        byte_start: byte_start as u64,
        byte_len: byte_len as u32,
        batch_count: r.get(5),
        max_timestamp: r.get(6),
    }
}

/// The row that holds `from_offset` (the first whose last offset is at or past it) and the
/// rows after it, in offset order, at most `max_rows` (and [`READ_ROWS_MAX`]). Empty when
/// nothing at or past `from_offset` is committed. The caller checks `from_offset` against
/// [`partition_bounds`] first: rows below the log start may linger until they are cleaned up.
pub async fn read_batches(
    db: &Db,
    topic_id: Uuid,
    partition: i32,
    from_offset: i64,
    max_rows: usize,
) -> Result<Vec<BatchRow>, DbError> {
    let limit = max_rows.min(READ_ROWS_MAX) as i64;
    if limit == 0 {
        return Ok(Vec::new());
    }
    let client = db.client().await?;
    let statement = client.prepare_cached(SQL_READ).await?;
    let rows = client
        .query(&statement, &[&topic_id, &partition, &from_offset, &limit])
        .await?;
    Ok(rows.iter().map(batch_row).collect())
}

/// The partition's log start and high watermark; `None` if it has no row.
pub async fn partition_bounds(
    db: &Db,
    topic_id: Uuid,
    partition: i32,
) -> Result<Option<Bounds>, DbError> {
    let client = db.client().await?;
    let statement = client.prepare_cached(SQL_BOUNDS).await?;
    let row = client
        .query_opt(&statement, &[&topic_id, &partition])
        .await?;
    Ok(row.map(|r| Bounds {
        log_start: r.get(0),
        next_offset: r.get(1),
    }))
}

/// Every partition of the topic with its bounds, by partition number.
pub async fn topic_bounds(db: &Db, topic_id: Uuid) -> Result<Vec<(i32, Bounds)>, DbError> {
    let client = db.client().await?;
    let statement = client.prepare_cached(SQL_TOPIC_BOUNDS).await?;
    let rows = client.query(&statement, &[&topic_id]).await?;
    Ok(rows
        .iter()
        .map(|r| {
            let bounds = Bounds {
                log_start: r.get(1),
                next_offset: r.get(2),
            };
            (r.get(0), bounds)
        })
        .collect())
}

/// The first row, in offset order from the log start, whose max timestamp is at or past `ts`
/// (ms): the earliest batch that may hold a record that new. `None` if there is none (the
/// answer is then the high watermark).
pub async fn offset_for_timestamp(
    db: &Db,
    topic_id: Uuid,
    partition: i32,
    ts: i64,
) -> Result<Option<BatchRow>, DbError> {
    let client = db.client().await?;
    let statement = client.prepare_cached(SQL_BY_TIME).await?;
    let row = client
        .query_opt(&statement, &[&topic_id, &partition, &ts])
        .await?;
    Ok(row.as_ref().map(batch_row))
}

/// The highest max timestamp of the partition's committed rows from its log start; `None`
/// when it has none.
pub async fn max_timestamp(
    db: &Db,
    topic_id: Uuid,
    partition: i32,
) -> Result<Option<i64>, DbError> {
    let client = db.client().await?;
    let statement = client.prepare_cached(SQL_MAX_TIMESTAMP).await?;
    let row = client
        .query_one(&statement, &[&topic_id, &partition])
        .await?;
    Ok(row.get(0))
}

// ---------------------------------------------------------------------------------------------
// Wake-ups.

/// What a commit says moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitEvent {
    /// The partition's high watermark has reached `next_offset` (at least). Events of one
    /// partition committed through different brokers may arrive out of order: keep the
    /// largest, or ask [`partition_bounds`].
    Moved {
        topic_id: Uuid,
        partition: i32,
        next_offset: i64,
    },
    /// Anything may have moved (a commit of many partitions, a reconnect, a subscriber that
    /// fell behind): look again at every partition waited on.
    Everything,
}

/// Events buffered per subscriber. One commit sends up to about 110 events; a subscriber that
/// falls further behind gets [`CommitEvent::Everything`] instead of what it missed, which
/// costs it one re-poll, never a lost wake-up.
pub const COMMIT_EVENTS_BUFFER: usize = 4096;

/// The first wait before reconnecting; it doubles up to [`RECONNECT_BACKOFF_MAX`]. Short, so
/// a restart of PostgreSQL costs long-polling fetches little; with jitter, so 100 brokers do
/// not reconnect in step.
pub const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(100);

/// The longest wait between reconnects: PostgreSQL down for long is retried every 5 s.
pub const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// How often an idle listening connection is checked with an empty query: a connection to a
/// host that vanished (no RST) would otherwise look alive, and listen to nothing, until TCP
/// gave up (many minutes).
pub const LISTENER_PING_INTERVAL: Duration = Duration::from_secs(10);

/// How long a ping may take before the connection is given up and made again.
pub const LISTENER_PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Turns the commits' `NOTIFY`s into [`CommitEvent`]s for any number of subscribers.
///
/// It holds one dedicated connection (not one of the pool's: a pooled connection cannot stay
/// in `LISTEN`), made from [`Db::url`]'s settings. When that connection is lost it reconnects
/// with backoff ([`RECONNECT_BACKOFF_MIN`] to [`RECONNECT_BACKOFF_MAX`]) and, once listening
/// again, sends [`CommitEvent::Everything`], because commits in between sent nothing it could
/// hear. It sends `Everything` after the first connect too.
///
/// Notifications are a latency aid, not a guarantee: while [`CommitListener::is_connected`]
/// is false nothing arrives. Callers that wait for data must therefore also poll
/// [`partition_bounds`] on their own timer (and more often while disconnected); this type
/// does not poll for them.
///
/// Dropping it ends its task and closes the connection.
#[derive(Debug)]
pub struct CommitListener {
    events: broadcast::Sender<CommitEvent>,
    connected: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl CommitListener {
    /// Starts listening in a task of the current tokio runtime; returns at once.
    pub fn start(db: &Db) -> CommitListener {
        let mut config = db.url().config().clone();
        config.connect_timeout(db.settings().connect_timeout);
        config.application_name("sluice-commit-listener");
        let (events, _) = broadcast::channel(COMMIT_EVENTS_BUFFER);
        let connected = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(listen_forever(config, events.clone(), connected.clone()));
        CommitListener {
            events,
            connected,
            task,
        }
    }

    /// A new subscriber; it gets the events sent from now on.
    pub fn subscribe(&self) -> CommitSubscription {
        CommitSubscription {
            events: self.events.subscribe(),
        }
    }

    /// Whether the listening connection is up (events can arrive).
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }
}

impl Drop for CommitListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One subscriber's events.
#[derive(Debug)]
pub struct CommitSubscription {
    events: broadcast::Receiver<CommitEvent>,
}

impl CommitSubscription {
    /// The next event; [`CommitEvent::Everything`] if this subscriber fell more than
    /// [`COMMIT_EVENTS_BUFFER`] behind; `None` once the listener is dropped.
    pub async fn recv(&mut self) -> Option<CommitEvent> {
        match self.events.recv().await {
            Ok(event) => Some(event),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(CommitEvent::Everything),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

/// The events of one notification payload (see [`crate::commit::notify_payload`]). Anything
/// unreadable becomes [`CommitEvent::Everything`]: a wake-up too many costs a re-poll, one too
/// few a stalled fetch.
pub fn parse_payload(payload: &str) -> Vec<CommitEvent> {
    if payload == NOTIFY_EVERYTHING {
        return vec![CommitEvent::Everything];
    }
    let mut events = Vec::new();
    for line in payload.lines() {
        let mut fields = line.split(' ');
        let parsed = (|| {
            let topic_id = fields.next()?.parse().ok()?;
            let partition = fields.next()?.parse().ok()?;
            let next_offset = fields.next()?.parse().ok()?;
            fields.next().is_none().then_some(CommitEvent::Moved {
                topic_id,
                partition,
                next_offset,
            })
        })();
        match parsed {
            Some(event) => events.push(event),
            None => {
                tracing::debug!(line, "unreadable commit notification");
                return vec![CommitEvent::Everything];
            }
        }
    }
    events
}

async fn listen_forever(
    config: tokio_postgres::Config,
    events: broadcast::Sender<CommitEvent>,
    connected: Arc<AtomicBool>,
) {
    let mut backoff = RECONNECT_BACKOFF_MIN;
    loop {
        let result = listen_once(&config, &events, &connected).await;
        let was_connected = connected.swap(false, Ordering::AcqRel);
        if was_connected {
            backoff = RECONNECT_BACKOFF_MIN;
        }
        match result {
            Ok(()) => tracing::warn!("commit listener: connection closed; reconnecting"),
            Err(e) => tracing::warn!(error = %e, "commit listener: connection lost; reconnecting"),
        }
        // Between half and all of the backoff.
        let jittered = backoff.mul_f64(rand::random_range(0.5..=1.0));
        tokio::time::sleep(jittered).await;
        backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
    }
}

/// One connection's life: connect, `LISTEN`, forward notifications until it fails.
async fn listen_once(
    config: &tokio_postgres::Config,
    events: &broadcast::Sender<CommitEvent>,
    connected: &AtomicBool,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    // The connection's messages must be read while any request waits for its answer.
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    let forward = |message: AsyncMessage| {
        if let AsyncMessage::Notification(n) = message
            && n.channel() == COMMIT_CHANNEL
        {
            for event in parse_payload(n.payload()) {
                // No subscriber is not an error.
                let _ = events.send(event);
            }
        }
    };
    {
        let statement = format!("LISTEN {COMMIT_CHANNEL}");
        let listen = client.batch_execute(&statement);
        tokio::pin!(listen);
        loop {
            tokio::select! {
                done = &mut listen => { done?; break; }
                message = messages.next() => match message {
                    Some(Ok(m)) => forward(m),
                    Some(Err(e)) => return Err(e),
                    None => return Ok(()),
                },
            }
        }
    }
    connected.store(true, Ordering::Release);
    tracing::info!("commit listener: listening");
    let _ = events.send(CommitEvent::Everything);

    let mut ping_timer = tokio::time::interval(LISTENER_PING_INTERVAL);
    ping_timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping_timer.tick().await;
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(Ok(m)) => forward(m),
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            },
            _ = ping_timer.tick() => {
                let ping = tokio::time::timeout(LISTENER_PING_TIMEOUT, client.simple_query(""));
                tokio::pin!(ping);
                // Keep reading messages while the ping is under way.
                loop {
                    tokio::select! {
                        answered = &mut ping => match answered {
                            Ok(Ok(_)) => break,
                            Ok(Err(e)) => return Err(e),
                            Err(_) => {
                                tracing::warn!(
                                    timeout = ?LISTENER_PING_TIMEOUT,
                                    "commit listener: no answer to a ping"
                                );
                                return Ok(());
                            }
                        },
                        message = messages.next() => match message {
                            Some(Ok(m)) => forward(m),
                            Some(Err(e)) => return Err(e),
                            None => return Ok(()),
                        },
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse_and_anything_odd_means_everything() {
        let t = Uuid::from_u128(7);
        let u = Uuid::from_u128(8);
        assert_eq!(
            parse_payload(&format!("{t} 3 42\n{u} 0 7")),
            vec![
                CommitEvent::Moved {
                    topic_id: t,
                    partition: 3,
                    next_offset: 42
                },
                CommitEvent::Moved {
                    topic_id: u,
                    partition: 0,
                    next_offset: 7
                },
            ]
        );
        assert_eq!(parse_payload("*"), vec![CommitEvent::Everything]);
        for odd in [
            "x 1 2",
            &format!("{t} 1"),
            &format!("{t} 1 2 3"),
            &format!("{t} a 2"),
        ] {
            assert_eq!(parse_payload(odd), vec![CommitEvent::Everything], "{odd}");
        }
    }

    /// What the commit side writes, the listening side reads.
    #[test]
    fn the_commit_payload_round_trips() {
        let advanced: std::collections::BTreeMap<_, _> = (0..50)
            .map(|p| ((Uuid::from_u128(p as u128), p), i64::from(p) * 1000))
            .collect();
        let events = parse_payload(&crate::commit::notify_payload(&advanced));
        assert_eq!(events.len(), 50);
        assert_eq!(
            events[49],
            CommitEvent::Moved {
                topic_id: Uuid::from_u128(49),
                partition: 49,
                next_offset: 49_000
            }
        );
    }
}
