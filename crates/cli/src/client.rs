//! A small async Kafka client for the CLI commands (`topic`, `produce`, `consume`, `group`).
//!
//! It speaks the wire protocol through `sluice_protocol::codec` (request encoding, response
//! decoding) over a tokio `TcpStream`: one request in flight per connection, each frame a 4-byte
//! size followed by the body. It works against Sluice and against Apache Kafka.
//!
//! - [`Connection`]: one broker connection. It starts with ApiVersions and then uses, per API, the
//!   highest version that both the broker and this client ([`IMPLEMENTED`]) support.
//! - [`Cluster`]: the bootstrap connection plus one connection per partition leader, opened when
//!   first needed, and the topic metadata lookups the commands share ([`TopicInfo`]).
//! - [`Call`]: ties each request type to its API key and response type, so `call` is typed.
//! - [`kafka_error`]: Kafka error codes as their names plus the broker's message.
//!
//! Errors are `anyhow` errors whose text is meant for the person at the terminal.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::{Bytes, BytesMut};
use sluice_protocol::codec::{decode_response, encode_request};
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use sluice_protocol::kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, ApiKey, ApiVersionsRequest,
    ApiVersionsResponse, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteGroupsRequest, DeleteGroupsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, FetchRequest,
    FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, ListGroupsRequest, ListGroupsResponse, ListOffsetsRequest,
    ListOffsetsResponse, MetadataRequest, MetadataResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, ProduceRequest, ProduceResponse,
    RequestKind, ResponseKind, ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The client id every CLI request carries (brokers log it).
pub const CLIENT_ID: &str = "sluice-cli";

/// How long to wait for a TCP connection to a broker.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for one response. Fetches long-poll for at most 500 ms and admin requests
/// carry a 30 s broker-side timeout, so this only fires on a stuck broker or network.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(45);
/// Largest response frame accepted: a fetch asks for at most `consume::FETCH_BYTES_MAX`
/// (64 MiB) plus per-partition overshoot of one batch; anything far above that is not a sane
/// response and is refused before allocating.
const RESPONSE_BYTES_MAX: usize = 256 << 20;
/// Broker-side timeout put into admin and produce requests.
pub const REQUEST_TIMEOUT_MS: i32 = 30_000;

/// The versions this client knows how to fill in and read, per API. The version used is the
/// highest one inside both this range and the broker's advertised range.
///
/// Why the caps: Produce v13, Fetch v13+, OffsetCommit v10 and OffsetFetch v10 address topics
/// by id only, and this client uses names (every broker still accepts them); ApiVersions is
/// always sent as v3. OffsetFetch v1 cannot ask for "all topics", which `group` needs.
pub const IMPLEMENTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetFetch, 2, 9),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::ShareGroupDescribe, 1, 1),
    (ApiKey::DescribeShareGroupOffsets, 0, 0),
    (ApiKey::AlterShareGroupOffsets, 0, 0),
];

/// The ApiVersions version sent first: understood by Sluice and by Kafka since 2.4.
const API_VERSIONS_VERSION: i16 = 3;

/// Where to find the cluster; shared by every command that talks to a broker.
#[derive(Debug, Clone, clap::Args)]
pub struct BootstrapArgs {
    /// Broker to connect to first; the others are found through its metadata
    #[arg(
        long,
        env = "SLUICE_BOOTSTRAP",
        default_value = "127.0.0.1:9092",
        value_name = "HOST:PORT"
    )]
    pub bootstrap: String,
}

/// Runs `future` to completion on a single-threaded runtime (the CLI does one thing at a time).
pub fn block_on<T>(future: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(future)
}

/// A request type: its API key, and how to find its response in a [`ResponseKind`].
pub trait Call: Into<RequestKind> {
    const API: ApiKey;
    type Response;
    fn response(kind: ResponseKind) -> Option<Self::Response>;
}

macro_rules! calls {
    ($($api:ident: $req:ident => $resp:ident;)*) => {$(
        impl Call for $req {
            const API: ApiKey = ApiKey::$api;
            type Response = $resp;
            fn response(kind: ResponseKind) -> Option<$resp> {
                match kind {
                    ResponseKind::$api(r) => Some(r),
                    _ => None,
                }
            }
        }
    )*};
}

calls! {
    ApiVersions: ApiVersionsRequest => ApiVersionsResponse;
    Metadata: MetadataRequest => MetadataResponse;
    CreateTopics: CreateTopicsRequest => CreateTopicsResponse;
    DeleteTopics: DeleteTopicsRequest => DeleteTopicsResponse;
    DescribeConfigs: DescribeConfigsRequest => DescribeConfigsResponse;
    IncrementalAlterConfigs: IncrementalAlterConfigsRequest => IncrementalAlterConfigsResponse;
    CreatePartitions: CreatePartitionsRequest => CreatePartitionsResponse;
    Produce: ProduceRequest => ProduceResponse;
    Fetch: FetchRequest => FetchResponse;
    ListOffsets: ListOffsetsRequest => ListOffsetsResponse;
    FindCoordinator: FindCoordinatorRequest => FindCoordinatorResponse;
    ListGroups: ListGroupsRequest => ListGroupsResponse;
    DescribeGroups: DescribeGroupsRequest => DescribeGroupsResponse;
    ConsumerGroupDescribe: ConsumerGroupDescribeRequest => ConsumerGroupDescribeResponse;
    DeleteGroups: DeleteGroupsRequest => DeleteGroupsResponse;
    OffsetFetch: OffsetFetchRequest => OffsetFetchResponse;
    OffsetCommit: OffsetCommitRequest => OffsetCommitResponse;
    ShareGroupDescribe: ShareGroupDescribeRequest => ShareGroupDescribeResponse;
    DescribeShareGroupOffsets: DescribeShareGroupOffsetsRequest => DescribeShareGroupOffsetsResponse;
    AlterShareGroupOffsets: AlterShareGroupOffsetsRequest => AlterShareGroupOffsetsResponse;
}

/// A Kafka error code as `NAME: message` (the broker's message when it sent one), or `None` for
/// code 0. Names are Kafka's own (`UNKNOWN_TOPIC_OR_PARTITION`), so they can be looked up.
pub fn kafka_error(code: i16, message: Option<&StrBytes>) -> Option<String> {
    let error = ResponseError::try_from_code(code)?;
    let name = match error {
        ResponseError::Unknown(code) => format!("unknown error code {code}"),
        known => screaming_snake(&format!("{known:?}")),
    };
    Some(match message.map(|m| m.trim()).filter(|m| !m.is_empty()) {
        Some(message) => format!("{name}: {message}"),
        None => format!("{name} (error code {code})"),
    })
}

/// `UnknownTopicOrPartition` → `UNKNOWN_TOPIC_OR_PARTITION`.
fn screaming_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// `plural(1, "record")` is "1 record", `plural(2, "record")` is "2 records".
pub fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// One connection to one broker, with the API versions agreed on it.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    addr: String,
    next_correlation_id: i32,
    /// What the broker advertised: `(min, max)` per API.
    advertised: HashMap<ApiKey, (i16, i16)>,
}

impl Connection {
    /// Connects to `addr` (`HOST:PORT`) and exchanges ApiVersions.
    pub async fn connect(addr: &str) -> anyhow::Result<Connection> {
        let hint = "(is `sluice serve` running?)";
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => bail!("cannot reach broker at {addr}: {e} {hint}"),
            Err(_) => bail!(
                "cannot reach broker at {addr}: no connection after {} s {hint}",
                CONNECT_TIMEOUT.as_secs()
            ),
        };
        stream
            .set_nodelay(true)
            .with_context(|| format!("setting TCP_NODELAY on the connection to {addr}"))?;
        let mut conn = Connection {
            stream,
            addr: addr.to_owned(),
            next_correlation_id: 0,
            advertised: HashMap::new(),
        };
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str(CLIENT_ID))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let response = conn
            .round_trip(request, API_VERSIONS_VERSION)
            .await
            .with_context(|| format!("asking {addr} for its API versions"))?;
        if let Some(e) = kafka_error(response.error_code, None) {
            bail!("broker at {addr} refused ApiVersions v{API_VERSIONS_VERSION}: {e}");
        }
        conn.advertised = response
            .api_keys
            .iter()
            .filter_map(|k| {
                let api = ApiKey::try_from(k.api_key).ok()?;
                Some((api, (k.min_version, k.max_version)))
            })
            .collect();
        Ok(conn)
    }

    /// The address this connection was opened to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The version of `api` to use: the highest both sides support, if any.
    pub fn version(&self, api: ApiKey) -> Option<i16> {
        let &(broker_min, broker_max) = self.advertised.get(&api)?;
        let &(_, ours_min, ours_max) = IMPLEMENTED.iter().find(|(k, _, _)| *k == api)?;
        let (lo, hi) = (broker_min.max(ours_min), broker_max.min(ours_max));
        (lo <= hi).then_some(hi)
    }

    /// Whether the broker and this client share a version of `api`.
    pub fn supports(&self, api: ApiKey) -> bool {
        self.version(api).is_some()
    }

    fn version_or_explain(&self, api: ApiKey) -> anyhow::Result<i16> {
        self.version(api).ok_or_else(|| match self.advertised.get(&api) {
            None => anyhow!("the broker at {} does not support the {api:?} API", self.addr),
            Some((min, max)) => anyhow!(
                "the broker at {} supports {api:?} versions {min}..={max}, none of which this client speaks",
                self.addr
            ),
        })
    }

    /// Sends `request` with the agreed version and waits for its response.
    pub async fn call<R: Call>(&mut self, request: R) -> anyhow::Result<R::Response> {
        let version = self.version_or_explain(R::API)?;
        self.round_trip(request, version).await
    }

    /// Sends `request` without waiting for a response (produce with acks=0 gets none).
    pub async fn send_only<R: Call>(&mut self, request: R) -> anyhow::Result<()> {
        let version = self.version_or_explain(R::API)?;
        self.send(request, version).await.map(|_| ())
    }

    async fn send<R: Call>(&mut self, request: R, version: i16) -> anyhow::Result<i32> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let mut frame = BytesMut::new();
        encode_request(
            &mut frame,
            R::API,
            version,
            correlation_id,
            CLIENT_ID,
            &request.into(),
        )?;
        self.stream
            .write_all(&frame)
            .await
            .with_context(|| format!("sending a {:?} request to {}", R::API, self.addr))?;
        Ok(correlation_id)
    }

    async fn round_trip<R: Call>(
        &mut self,
        request: R,
        version: i16,
    ) -> anyhow::Result<R::Response> {
        let correlation_id = self.send(request, version).await?;
        let frame = tokio::time::timeout(RESPONSE_TIMEOUT, self.read_frame())
            .await
            .with_context(|| {
                format!(
                    "no {:?} response from {} within {} s",
                    R::API,
                    self.addr,
                    RESPONSE_TIMEOUT.as_secs()
                )
            })??;
        let (got_id, body) = decode_response(frame, R::API, version)
            .map_err(|e| anyhow!("from {}: {e}", self.addr))?;
        if got_id != correlation_id {
            bail!(
                "{} answered correlation id {got_id} to request {correlation_id}",
                self.addr
            );
        }
        R::response(body)
            .ok_or_else(|| anyhow!("{} answered {:?} with another API", self.addr, R::API))
    }

    async fn read_frame(&mut self) -> anyhow::Result<Bytes> {
        let closed = |addr: &str, e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                anyhow!("the broker at {addr} closed the connection (see its log for why)")
            } else {
                anyhow!(e).context(format!("reading a response from {addr}"))
            }
        };
        let mut size = [0u8; 4];
        self.stream
            .read_exact(&mut size)
            .await
            .map_err(|e| closed(&self.addr, e))?;
        let size = i32::from_be_bytes(size);
        if size < 4 || size as usize > RESPONSE_BYTES_MAX {
            bail!(
                "the broker at {} sent a response frame of impossible size {size}",
                self.addr
            );
        }
        let mut body = BytesMut::zeroed(size as usize);
        self.stream
            .read_exact(&mut body)
            .await
            .map_err(|e| closed(&self.addr, e))?;
        Ok(body.freeze())
    }
}

/// A topic as Metadata describes it.
#[derive(Debug, Clone)]
pub struct TopicInfo {
    pub name: String,
    pub id: [u8; 16],
    /// `(partition index, leader node id)`, sorted by index.
    pub partitions: Vec<(i32, i32)>,
}

impl TopicInfo {
    /// The topic id as Kafka prints it (URL-safe base64 without padding).
    pub fn id_string(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.id)
    }

    pub fn leader(&self, partition: i32) -> Option<i32> {
        self.partitions
            .iter()
            .find(|(p, _)| *p == partition)
            .map(|&(_, leader)| leader)
    }
}

/// The bootstrap connection, the brokers it told us about, and connections to partition leaders.
#[derive(Debug)]
pub struct Cluster {
    bootstrap: Connection,
    /// `node id → HOST:PORT`, from the last Metadata response.
    brokers: HashMap<i32, String>,
    leaders: HashMap<i32, Connection>,
}

/// How often to re-ask for metadata while a just-created topic has no leader yet.
const LEADER_WAIT_ATTEMPTS: u32 = 20;
const LEADER_WAIT_INTERVAL: Duration = Duration::from_millis(250);

impl Cluster {
    pub async fn connect(args: &BootstrapArgs) -> anyhow::Result<Cluster> {
        Ok(Cluster {
            bootstrap: Connection::connect(&args.bootstrap).await?,
            brokers: HashMap::new(),
            leaders: HashMap::new(),
        })
    }

    /// The bootstrap connection (admin requests go there; Sluice answers them on any broker).
    pub fn bootstrap(&mut self) -> &mut Connection {
        &mut self.bootstrap
    }

    /// Metadata for `topics` (`None`: all topics). With `allow_create`, a broker that creates
    /// topics on first use does so.
    pub async fn metadata(
        &mut self,
        topics: Option<&[&str]>,
        allow_create: bool,
    ) -> anyhow::Result<MetadataResponse> {
        let request = MetadataRequest::default()
            .with_topics(topics.map(|names| {
                names
                    .iter()
                    .map(|n| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string((*n).to_owned()))))
                    })
                    .collect()
            }))
            .with_allow_auto_topic_creation(allow_create);
        let response = self.bootstrap.call(request).await?;
        self.brokers = response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", &*b.host, b.port)))
            .collect();
        Ok(response)
    }

    /// One topic's partitions and leaders. An unknown topic is an error that says so, unless
    /// `allow_create` and the broker creates it. Waits briefly for leaders of a new topic.
    pub async fn topic(&mut self, name: &str, allow_create: bool) -> anyhow::Result<TopicInfo> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let response = self.metadata(Some(&[name]), allow_create).await?;
            let topic = response
                .topics
                .into_iter()
                .find(|t| t.name.as_ref().is_some_and(|n| &*n.0 == name))
                .ok_or_else(|| anyhow!("the broker's metadata does not mention topic '{name}'"))?;
            // A topic being created has no leader yet (Kafka answers LEADER_NOT_AVAILABLE).
            let retriable = |code| code == ResponseError::LeaderNotAvailable.code();
            let waiting = retriable(topic.error_code)
                || topic
                    .partitions
                    .iter()
                    .any(|p| p.leader_id.0 < 0 || retriable(p.error_code));
            if waiting && attempt < LEADER_WAIT_ATTEMPTS {
                tokio::time::sleep(LEADER_WAIT_INTERVAL).await;
                continue;
            }
            if topic.error_code == ResponseError::UnknownTopicOrPartition.code() {
                if allow_create {
                    bail!(
                        "topic '{name}' does not exist and the broker does not create topics on \
                         first use; create it with `sluice topic create {name}`"
                    );
                }
                bail!("topic '{name}' does not exist (UNKNOWN_TOPIC_OR_PARTITION)");
            }
            if let Some(e) = kafka_error(topic.error_code, None) {
                bail!("topic '{name}': {e}");
            }
            let mut partitions: Vec<(i32, i32)> = topic
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.leader_id.0))
                .collect();
            partitions.sort_unstable();
            if partitions.is_empty() {
                bail!("topic '{name}' has no partitions");
            }
            return Ok(TopicInfo {
                name: name.to_owned(),
                id: *topic.topic_id.as_bytes(),
                partitions,
            });
        }
    }

    /// The connection to broker `node` (the leader of some partition).
    pub async fn leader(&mut self, node: i32) -> anyhow::Result<&mut Connection> {
        // With a single broker, the bootstrap connection is the leader: reuse it rather than
        // open a second connection to the same process.
        if self.brokers.len() <= 1 {
            return Ok(&mut self.bootstrap);
        }
        if !self.leaders.contains_key(&node) {
            let addr = self
                .brokers
                .get(&node)
                .ok_or_else(|| anyhow!("the metadata names leader {node}, but no such broker"))?
                .clone();
            let conn = Connection::connect(&addr)
                .await
                .with_context(|| format!("connecting to broker {node}, a partition leader"))?;
            self.leaders.insert(node, conn);
        }
        Ok(self.leaders.get_mut(&node).expect("inserted above"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_are_named_the_kafka_way() {
        assert_eq!(
            kafka_error(3, None).unwrap(),
            "UNKNOWN_TOPIC_OR_PARTITION (error code 3)"
        );
        let message = StrBytes::from_static_str("bad key 'x'");
        assert_eq!(
            kafka_error(40, Some(&message)).unwrap(),
            "INVALID_CONFIG: bad key 'x'"
        );
        assert_eq!(kafka_error(0, None), None);
        assert!(kafka_error(-2000, None).unwrap().contains("-2000"));
    }

    #[test]
    fn every_implemented_range_is_one_the_codec_knows() {
        for &(api, min, max) in IMPLEMENTED {
            let known = api.valid_versions();
            assert!(
                min <= max && known.min <= min && max <= known.max,
                "{api:?}"
            );
        }
    }

    #[tokio::test]
    async fn refused_connection_says_where_and_what_to_check() {
        // Bind then drop a listener to get a port that is (almost certainly) closed.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let addr = format!("127.0.0.1:{port}");
        let err = Connection::connect(&addr).await.unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("cannot reach broker at {addr}: ")),
            "{err}"
        );
        assert!(err.contains("sluice serve"), "{err}");
    }
}
