//! # sluice-server: the Kafka listener
//!
//! Accepts TCP connections and runs one task per connection:
//!
//! 1. read bytes into the connection's buffer; [`frame::check`] says when a whole request is
//!    there, and refuses oversize frames from their 4-byte prefix, before reading them;
//! 2. decode it ([`codec::decode_request`]) and start the broker's handler for it;
//! 3. keep up to [`ServerConfig::in_flight_per_connection`] requests running at once, and write
//!    their responses strictly in request order (Kafka clients match responses by order), many
//!    responses per write when several are ready.
//!
//! Limits (see [`ServerConfig`]): frames over `max_request_bytes` close the connection; each
//! connection has a bounded in-flight queue; all connections share a memory budget for request
//! bytes in flight. When the budget or the queue is full, the connection stops reading: TCP
//! back-pressure reaches the client instead of memory growing.
//!
//! Bad input: an unsupported ApiVersions version is answered with UNSUPPORTED_VERSION (encoded
//! as v0, as the protocol prescribes); any other unknown API or version, or a malformed request,
//! is logged with the client's address and id and closes that connection only.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use futures::FutureExt;
use futures::stream::{FuturesOrdered, StreamExt};
use sluice_broker::Broker;
use sluice_protocol::codec::{self, DecodeError};
use sluice_protocol::frame;
use sluice_protocol::kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// Limits of the Kafka listener.
#[derive(Debug, Clone, Copy)]
pub struct ServerConfig {
    /// Largest request frame accepted (Kafka's `socket.request.max.bytes`, default 100 MiB).
    pub max_request_bytes: usize,
    /// Requests a connection may have in flight (decoded, response not yet written). Kafka
    /// clients send at most 5 produce requests at once per connection by default.
    pub in_flight_per_connection: usize,
    /// Request bytes in flight across all connections. A request larger than the whole budget
    /// is still served, alone.
    pub request_memory_bytes: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_request_bytes: 100 << 20,
            in_flight_per_connection: 32,
            request_memory_bytes: 256 << 20,
        }
    }
}

/// Serves Kafka clients on `listener` until `shutdown` becomes true.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: ServerConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let budget = Arc::new(Semaphore::new(config.request_memory_bytes));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let conn = Connection {
                        broker: Arc::clone(&broker),
                        budget: Arc::clone(&budget),
                        config,
                        peer,
                        client_id: None,
                    };
                    let shutdown = shutdown.clone();
                    connections.spawn(conn.run(stream, shutdown));
                }
                Err(e) => {
                    // Usually out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

struct Connection {
    broker: Arc<Broker>,
    budget: Arc<Semaphore>,
    config: ServerConfig,
    peer: SocketAddr,
    client_id: Option<String>,
}

/// What a finished request produced: `Ok(None)` when it gets no response (acks=0 produce),
/// `Err` when its response could not be encoded (a broker bug; the connection is closed, since
/// skipping a response would desynchronise the client). Plus the budget it held.
type Outcome = (Result<Option<BytesMut>, ()>, OwnedSemaphorePermit);

impl Connection {
    async fn run(mut self, stream: TcpStream, mut shutdown: watch::Receiver<bool>) {
        let (mut rd, mut wr) = stream.into_split();
        let mut inbuf = BytesMut::with_capacity(64 * 1024);
        let mut out = BytesMut::with_capacity(64 * 1024);
        let mut in_flight: FuturesOrdered<futures::future::BoxFuture<'static, Outcome>> =
            FuturesOrdered::new();
        // A whole frame waiting for budget: its size.
        let mut eof = false;
        loop {
            // Start every whole request already buffered, while the limits allow.
            while in_flight.len() < self.config.in_flight_per_connection {
                let size = match frame::check(&inbuf, self.config.max_request_bytes) {
                    Ok(Some(size)) => size,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(peer = %self.peer, client = ?self.client_id, error = %e, "closing connection");
                        return;
                    }
                };
                let permits = size.min(self.config.request_memory_bytes) as u32;
                let Ok(permit) = Arc::clone(&self.budget).try_acquire_many_owned(permits) else {
                    if in_flight.is_empty() {
                        // Wait for other connections to release budget.
                        match Arc::clone(&self.budget).acquire_many_owned(permits).await {
                            Ok(permit) => {
                                if !self.start(&mut inbuf, size, permit, &mut in_flight) {
                                    return;
                                }
                                continue;
                            }
                            Err(_) => return,
                        }
                    }
                    break;
                };
                if !self.start(&mut inbuf, size, permit, &mut in_flight) {
                    return;
                }
            }
            if eof && in_flight.is_empty() {
                return;
            }
            let can_read = !eof
                && in_flight.len() < self.config.in_flight_per_connection
                && frame::check(&inbuf, self.config.max_request_bytes).ok() == Some(None);
            tokio::select! {
                Some((response, permit)) = in_flight.next(), if !in_flight.is_empty() => {
                    out.clear();
                    let Ok(response) = response else { return };
                    if let Some(bytes) = response {
                        out.extend_from_slice(&bytes);
                    }
                    drop(permit);
                    // Batch every response that is already done into the same write.
                    while let Some(Some((response, permit))) = in_flight.next().now_or_never() {
                        let Ok(response) = response else { return };
                        if let Some(bytes) = response {
                            out.extend_from_slice(&bytes);
                        }
                        drop(permit);
                    }
                    if !out.is_empty() && let Err(e) = wr.write_all(&out).await {
                        tracing::debug!(peer = %self.peer, error = %e, "write failed");
                        return;
                    }
                }
                read = rd.read_buf(&mut inbuf), if can_read => match read {
                    Ok(0) => eof = true,
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(peer = %self.peer, error = %e, "read failed");
                        return;
                    }
                },
                _ = shutdown.changed() => return,
            }
            if inbuf.capacity() - inbuf.len() < 4096 {
                inbuf.reserve(64 * 1024);
            }
        }
    }

    /// Takes the frame of `size` bytes off `inbuf`, decodes it and queues its handling.
    /// Returns false when the connection must close.
    fn start(
        &mut self,
        inbuf: &mut BytesMut,
        size: usize,
        permit: OwnedSemaphorePermit,
        in_flight: &mut FuturesOrdered<futures::future::BoxFuture<'static, Outcome>>,
    ) -> bool {
        let frame = inbuf
            .split_to(size)
            .freeze()
            .slice(frame::SIZE_PREFIX_BYTES..);
        match codec::decode_request(frame) {
            Ok(request) => {
                if self.client_id.is_none() {
                    self.client_id = request.client_id.as_deref().map(str::to_owned);
                }
                let peer = self.peer;
                let (api_key, version, correlation_id) =
                    (request.api_key, request.api_version, request.correlation_id);
                let started = std::time::Instant::now();
                let broker = Arc::clone(&self.broker);
                // Started now, in arrival order (produce appends happen here).
                let handling = self.broker.handle_from(request, Some(peer.ip()));
                in_flight.push_back(
                    async move {
                        let response = match handling.await {
                            None => Ok(None),
                            Some(body) => {
                                let mut out = BytesMut::new();
                                match codec::encode_response(&mut out, api_key, version, correlation_id, &body) {
                                    Ok(()) => Ok(Some(out)),
                                    Err(e) => {
                                        tracing::error!(peer = %peer, error = %e, "closing connection: response not encodable");
                                        Err(())
                                    }
                                }
                            }
                        };
                        let bytes_out = response.as_ref().map_or(0, |r| r.as_ref().map_or(0, BytesMut::len));
                        broker.metrics().kafka_request(api_key as i16, started.elapsed(), size, bytes_out);
                        (response, permit)
                    }
                    .boxed(),
                );
                true
            }
            Err(DecodeError::UnsupportedVersion {
                api_key: ApiKey::ApiVersions,
                api_version,
                correlation_id,
            }) => {
                tracing::debug!(peer = %self.peer, api_version, "ApiVersions version unsupported; answering with v0");
                let mut out = BytesMut::new();
                let body = Broker::unsupported_api_versions();
                let encoded =
                    codec::encode_response(&mut out, ApiKey::ApiVersions, 0, correlation_id, &body)
                        .map(|()| Some(out))
                        .map_err(|e| tracing::error!(error = %e, "encoding ApiVersions v0"));
                in_flight.push_back(futures::future::ready((encoded, permit)).boxed());
                true
            }
            Err(e) => {
                tracing::warn!(peer = %self.peer, client = ?self.client_id, error = %e, "closing connection");
                false
            }
        }
    }
}
