//! One Kafka connection of a share consumer: requests from several tasks (the heartbeat and
//! the fetch loop) go out over one TCP socket, and each answer finds its caller.
//!
//! A broker answers the requests of one connection in the order it received them, so the
//! callers waiting for answers form a queue: the I/O task writes each request, appends its
//! caller to the queue, and hands every response frame to the caller at the head (checking
//! the correlation id). A caller that gave up (timeout, cancelled) leaves its place in the
//! queue, and its answer, when it comes, is dropped. Any I/O error, an answer that matches
//! no caller, or an oversize frame closes the connection and fails every waiting caller: the
//! consumer then connects again.
//!
//! Dropping the last [`Conn`] closes the socket at once (the I/O task is aborted), which is
//! how a consumer is "killed" without a word to the broker.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::share_fetch_response::ShareFetchResponse;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ShareFetchRequest};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Largest response frame accepted: a share fetch asks for at most `[share] max_bytes`
/// (50 MiB by default, at most [`crate::workload::SHARE_MAX_BYTES_LIMIT`]); this leaves room
/// for everything around the records.
const FRAME_MAX_BYTES: usize = 80 << 20;
/// Requests queued for the I/O task and not yet written; a caller waits for room.
const OUTGOING_MAX: usize = 64;
/// Read buffer size, grown as a frame needs.
const READ_CHUNK: usize = 64 << 10;

/// Why a call failed. Each variant keeps what went wrong; none is a broker error code (those
/// are in the responses).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConnError {
    #[error("connect to {addr}: {message}")]
    Connect { addr: String, message: String },
    #[error("connection to {addr} closed: {message}")]
    Closed { addr: String, message: String },
    #[error("no answer from {addr} within {timeout:?}")]
    Timeout { addr: String, timeout: Duration },
    #[error("encode request for {addr}: {message}")]
    Encode { addr: String, message: String },
    #[error("bad response from {addr}: {message}")]
    Decode { addr: String, message: String },
}

impl ConnError {
    /// A short name for error counts.
    pub fn kind(&self) -> &'static str {
        match self {
            ConnError::Connect { .. } => "connect",
            ConnError::Closed { .. } => "connection closed",
            ConnError::Timeout { .. } => "request timeout",
            ConnError::Encode { .. } => "encode",
            ConnError::Decode { .. } => "decode",
        }
    }
}

/// A request frame on its way to the I/O task, and who waits for the answer.
struct Outgoing {
    frame: Bytes,
    correlation_id: i32,
    reply: oneshot::Sender<Result<Bytes, ConnError>>,
}

/// A connection to one broker. Cheap to share (`Arc`); every call is independent.
#[derive(Debug)]
pub struct Conn {
    addr: String,
    client_id: StrBytes,
    tx: mpsc::Sender<Outgoing>,
    io: JoinHandle<()>,
    next_correlation_id: AtomicI32,
    /// Set once the I/O task has failed: callers should connect again.
    broken: Arc<AtomicBool>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.io.abort();
    }
}

impl Conn {
    /// Connects to `addr` (`host:port`) within `timeout`. Must run inside a tokio runtime.
    pub async fn connect(
        addr: &str,
        client_id: &str,
        timeout: Duration,
    ) -> Result<Arc<Conn>, ConnError> {
        let connect_error = |message: String| ConnError::Connect {
            addr: addr.to_owned(),
            message,
        };
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| connect_error(format!("no connection within {timeout:?}")))?
            .map_err(|e| connect_error(e.to_string()))?;
        // Requests are small and latency matters more than packet count.
        stream
            .set_nodelay(true)
            .map_err(|e| connect_error(e.to_string()))?;
        let (tx, rx) = mpsc::channel(OUTGOING_MAX);
        let broken = Arc::new(AtomicBool::new(false));
        let io = tokio::spawn(io_task(stream, rx, addr.to_owned(), broken.clone()));
        Ok(Arc::new(Conn {
            addr: addr.to_owned(),
            client_id: StrBytes::from_string(client_id.to_owned()),
            tx,
            io,
            next_correlation_id: AtomicI32::new(1),
            broken,
        }))
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the connection has failed (callers then open a new one).
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed) || self.io.is_finished()
    }

    /// Sends `request` as version `version` and waits up to `timeout` for its response.
    pub async fn call<R: Request>(
        &self,
        version: i16,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Response, ConnError> {
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = self.encode(version, correlation_id, request)?;
        let mut body = self.exchange(frame, correlation_id, timeout).await?;
        self.decode::<R::Response>(&mut body, R::KEY, version)
    }

    /// A ShareFetch at v1 or v2. Version 2 (Kafka 4.2) adds the acquire mode, which
    /// `kafka-protocol` cannot write: `sluice-protocol`'s layer encodes it. Its response is v1's
    /// on the wire, so it is decoded as v1.
    pub async fn share_fetch(
        &self,
        version: i16,
        request: &ShareFetchRequest,
        timeout: Duration,
    ) -> Result<ShareFetchResponse, ConnError> {
        if version < 2 {
            return self.call(version, request, timeout).await;
        }
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let mut out = BytesMut::with_capacity(256);
        sluice_protocol::codec::encode_request(
            &mut out,
            ApiKey::ShareFetch,
            version,
            correlation_id,
            self.client_id.as_str(),
            &RequestKind::ShareFetch(request.clone()),
        )
        .map_err(|e| ConnError::Encode {
            addr: self.addr.clone(),
            message: e.to_string(),
        })?;
        let mut body = self.exchange(out.freeze(), correlation_id, timeout).await?;
        // Same header version too (both flexible).
        self.decode::<ShareFetchResponse>(&mut body, ShareFetchRequest::KEY, 1)
    }

    /// Hands `frame` to the I/O task and waits up to `timeout` for the response body.
    async fn exchange(
        &self,
        frame: Bytes,
        correlation_id: i32,
        timeout: Duration,
    ) -> Result<Bytes, ConnError> {
        let (reply, answer) = oneshot::channel();
        let closed = |message: &str| ConnError::Closed {
            addr: self.addr.clone(),
            message: message.to_owned(),
        };
        let exchange = async {
            self.tx
                .send(Outgoing {
                    frame,
                    correlation_id,
                    reply,
                })
                .await
                .map_err(|_| closed("the connection's I/O task has ended"))?;
            answer
                .await
                .map_err(|_| closed("the connection's I/O task has ended"))?
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(ConnError::Timeout {
                addr: self.addr.clone(),
                timeout,
            }),
        }
    }

    /// Decodes a response (header, then body) at `version`; `body` is left as it was on error.
    fn decode<T: Decodable + HeaderVersion>(
        &self,
        body: &mut Bytes,
        key: i16,
        version: i16,
    ) -> Result<T, ConnError> {
        let decode_error = |message: String| ConnError::Decode {
            addr: self.addr.clone(),
            message,
        };
        let mut buf = body.clone();
        // The correlation id was checked by the I/O task; the rest of the header is skipped
        // by decoding it.
        kafka_protocol::messages::ResponseHeader::decode(&mut buf, T::header_version(version))
            .map_err(|e| decode_error(format!("response header: {e}")))?;
        let decoded = T::decode(&mut buf, version)
            .map_err(|e| decode_error(format!("api key {key} v{version}: {e}")))?;
        *body = buf;
        Ok(decoded)
    }

    fn encode<R: Request>(
        &self,
        version: i16,
        correlation_id: i32,
        request: &R,
    ) -> Result<Bytes, ConnError> {
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut out = BytesMut::with_capacity(256);
        out.put_i32(0); // size, patched below
        header
            .encode(&mut out, R::header_version(version))
            .and_then(|()| request.encode(&mut out, version))
            .map_err(|e| ConnError::Encode {
                addr: self.addr.clone(),
                message: format!("api key {} v{version}: {e}", R::KEY),
            })?;
        let size = (out.len() - 4) as i32;
        out[..4].copy_from_slice(&size.to_be_bytes());
        Ok(out.freeze())
    }
}

/// Writes requests and reads responses until the socket fails or every [`Conn`] is gone.
async fn io_task(
    stream: TcpStream,
    mut rx: mpsc::Receiver<Outgoing>,
    addr: String,
    broken: Arc<AtomicBool>,
) {
    let (mut reader, mut writer) = stream.into_split();
    let mut waiting: VecDeque<(i32, oneshot::Sender<Result<Bytes, ConnError>>)> = VecDeque::new();
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let failure: String = loop {
        tokio::select! {
            outgoing = rx.recv() => {
                let Some(o) = outgoing else {
                    // Every handle dropped: nothing more will be asked.
                    return;
                };
                // Queued before the write, so its answer can never arrive first.
                waiting.push_back((o.correlation_id, o.reply));
                if let Err(e) = writer.write_all(&o.frame).await {
                    break format!("write: {e}");
                }
            }
            // `read_buf` is cancel-safe: bytes already read stay in `buf`.
            read = reader.read_buf(&mut buf) => {
                match read {
                    Ok(0) => break "the broker closed the connection".to_owned(),
                    Ok(_) => {}
                    Err(e) => break format!("read: {e}"),
                }
                match deliver_frames(&mut buf, &mut waiting) {
                    Ok(()) => {}
                    Err(message) => break message,
                }
            }
        }
    };
    broken.store(true, Ordering::Relaxed);
    for (_, reply) in waiting.drain(..) {
        let _ = reply.send(Err(ConnError::Closed {
            addr: addr.clone(),
            message: failure.clone(),
        }));
    }
}

/// Hands every whole frame in `buf` to the caller at the head of `waiting`.
fn deliver_frames(
    buf: &mut BytesMut,
    waiting: &mut VecDeque<(i32, oneshot::Sender<Result<Bytes, ConnError>>)>,
) -> Result<(), String> {
    loop {
        let Some(len) = whole_frame(buf)? else {
            // Make room for the rest of a large frame in one allocation.
            if buf.len() >= 4 {
                let need = 4 + u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                buf.reserve(need.saturating_sub(buf.len()).max(READ_CHUNK));
            } else {
                buf.reserve(READ_CHUNK);
            }
            return Ok(());
        };
        buf.advance(4);
        let frame = buf.split_to(len).freeze();
        if frame.len() < 4 {
            return Err(format!("a {len}-byte response frame has no correlation id"));
        }
        let correlation_id = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        match waiting.pop_front() {
            Some((expected, reply)) if expected == correlation_id => {
                // The caller may have given up: its answer is dropped.
                let _ = reply.send(Ok(frame));
            }
            Some((expected, _)) => {
                return Err(format!(
                    "response with correlation id {correlation_id} where {expected} was due"
                ));
            }
            None => {
                return Err(format!(
                    "response with correlation id {correlation_id} to no request"
                ));
            }
        }
    }
}

/// The length of the frame at the start of `buf` when all of it is there; `None` when more
/// bytes are needed; an error for a frame over [`FRAME_MAX_BYTES`]. Allocates nothing.
fn whole_frame(buf: &[u8]) -> Result<Option<usize>, String> {
    let Some(prefix) = buf.get(..4) else {
        return Ok(None);
    };
    let len = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    let len = usize::try_from(len).map_err(|_| format!("negative frame size {len}"))?;
    if len > FRAME_MAX_BYTES {
        return Err(format!(
            "a {len}-byte response frame is over the {FRAME_MAX_BYTES}-byte limit"
        ));
    }
    Ok((buf.len() >= 4 + len).then_some(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_found_only_when_whole() {
        assert_eq!(whole_frame(&[0, 0]), Ok(None));
        assert_eq!(whole_frame(&[0, 0, 0, 2, 9]), Ok(None));
        assert_eq!(whole_frame(&[0, 0, 0, 2, 9, 9, 7]), Ok(Some(2)));
        assert!(whole_frame(&[0xff, 0, 0, 0]).is_err());
        assert!(whole_frame(&[0x7f, 0, 0, 0]).is_err());
    }

    #[test]
    fn answers_go_to_their_callers_in_order_and_strangers_close_the_connection() {
        let mut waiting = VecDeque::new();
        let (tx1, mut rx1) = oneshot::channel();
        let (tx2, mut rx2) = oneshot::channel();
        waiting.push_back((1, tx1));
        waiting.push_back((2, tx2));
        let mut buf = BytesMut::new();
        // Frame for 1 (body "a"), then half of the frame for 2.
        buf.extend_from_slice(&[0, 0, 0, 5, 0, 0, 0, 1, b'a', 0, 0, 0, 5, 0, 0]);
        deliver_frames(&mut buf, &mut waiting).unwrap();
        assert_eq!(&rx1.try_recv().unwrap().unwrap()[4..], b"a");
        assert!(rx2.try_recv().is_err());
        buf.extend_from_slice(&[0, 2, b'b']);
        deliver_frames(&mut buf, &mut waiting).unwrap();
        assert_eq!(&rx2.try_recv().unwrap().unwrap()[4..], b"b");
        assert!(buf.is_empty());
        buf.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 9]);
        assert!(deliver_frames(&mut buf, &mut waiting).is_err());
    }
}
