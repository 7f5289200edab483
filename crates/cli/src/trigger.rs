//! `sluice trigger create|list|describe|delete`: event triggers, managed through the broker's
//! HTTP API (`/triggers`; there is no Kafka API for triggers). `docs/triggers.md` is the guide.
//!
//! - [`HttpArgs`]: where the HTTP API is (`--http HOST:PORT` or an `http://`/`https://` URL),
//!   the API key, and the CA for a broker certificate the system does not trust;
//! - [`HttpApi`]: one request per connection, over hyper (and rustls for `https://`);
//! - the commands print a short human summary, or with `--json` the server's JSON as it came.
//!
//! Errors are `anyhow` errors with the server's message, printed by `main` with a non-zero
//! exit code, as for every other command. A rule the server refuses gets a caret line under
//! the position it names.

// The CLI's output is its job: printing to stdout is intended here.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use clap::{ArgGroup, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode, Uri, header};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::client::block_on;

/// How long to wait for a TCP connection (and TLS handshake) to the HTTP API.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for an answer: a create or delete is answered once the definition is
/// durable (one fsync, or one PUT in object-storage mode), well within this.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(45);
/// Largest answer read: a list of many triggers is a few hundred KiB.
const RESPONSE_BYTES_MAX: usize = 64 << 20;

/// Create, list, describe and delete event triggers.
///
/// A trigger reads source topics, takes each record's entity id and event name, evaluates a
/// rule per entity and fires into a topic or a signed webhook. These commands talk to the
/// broker's HTTP API (sluice serve --http-addr).
///
/// Examples:
///   sluice trigger create unpaid --source signups --rule '"signed_up" THEN (NOT "paid" WITHIN 7d)' --sink topic:unpaid
///   sluice trigger list
///   sluice trigger describe unpaid
///   sluice trigger delete unpaid
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct TriggerArgs {
    #[command(subcommand)]
    command: TriggerCommand,
    #[command(flatten, next_help_heading = "Connection")]
    http: HttpArgs,
}

#[derive(Debug, Subcommand)]
enum TriggerCommand {
    // Boxed: far larger than the other variants.
    Create(Box<CreateArgs>),
    List(ListArgs),
    Describe(DescribeArgs),
    Delete(DeleteArgs),
}

/// Where the broker's HTTP API is and how to call it; shared by every `trigger` command.
#[derive(Debug, Clone, clap::Args)]
pub struct HttpArgs {
    /// The broker's HTTP API: HOST:PORT (plain HTTP), or a URL, e.g. https://broker.internal:8443
    #[arg(
        long = "http",
        env = "SLUICE_HTTP",
        default_value = "127.0.0.1:8080",
        value_name = "HOST:PORT|URL",
        global = true
    )]
    pub http: String,
    /// API key, sent as `Authorization: Bearer KEY` (needed when the broker has
    /// http_api_keys), e.g. --api-key sk_3q...
    #[arg(
        long,
        env = "SLUICE_API_KEY",
        value_name = "KEY",
        hide_env_values = true,
        global = true
    )]
    pub api_key: Option<String>,
    /// For https:// URLs: a PEM file with the CA certificate(s) that signed the broker's HTTP
    /// certificate, e.g. --http-ca-file ca.crt [default: the system's trusted roots]
    #[arg(long, env = "SLUICE_HTTP_CA_FILE", value_name = "PATH", global = true)]
    pub http_ca_file: Option<PathBuf>,
}

/// Create a trigger.
///
/// Examples:
///   sluice trigger create unpaid --source signups --rule '"signed_up" THEN (NOT "paid" WITHIN 7d)' --sink topic:unpaid
///   sluice trigger create churn --source signups --source payments --event json:type --entity json:user \
///       --rule '"signed_up" THEN (NOT "paid" WITHIN 7d)' --sink https://hooks.example.com/churn
///
/// Prints the trigger's name, its rule in canonical form and its sink; for a webhook sink also
/// the signing secret, which is shown only this once. A rule the broker refuses is printed with
/// a caret under the error.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
#[command(group(ArgGroup::new("rule_form").required(true).args(["rule", "rule_json"])))]
struct CreateArgs {
    /// Name of the trigger (letters, digits, '.', '_' and '-'; at most 200 characters)
    name: String,
    /// A topic to read events from, e.g. --source signups; repeat for several (at most 16)
    #[arg(long = "source", value_name = "TOPIC", required = true)]
    sources: Vec<String>,
    /// The rule, e.g. --rule '"signed_up" THEN (NOT "paid" WITHIN 7d)' (docs/triggers.md has
    /// the language)
    #[arg(long, value_name = "RULE")]
    rule: Option<String>,
    /// The rule as its JSON tree instead of text (an event is a string, an operator an object),
    /// e.g. --rule-json '{"operator": "then", "a": "signed_up", "b": "paid"}'
    #[arg(long, value_name = "JSON")]
    rule_json: Option<String>,
    /// Where a record's entity id comes from: key, json:FIELD or header:NAME, e.g.
    /// --entity json:user_id [default: key]
    #[arg(long, value_name = "key|json:FIELD|header:NAME")]
    entity: Option<String>,
    /// Where a record's event name comes from: header:NAME, json:FIELD or topic, e.g.
    /// --event json:type [default: header:event]
    #[arg(long, value_name = "header:NAME|json:FIELD|topic")]
    event: Option<String>,
    /// Where firings go: topic:NAME (one record per firing, keyed by the entity id) or a
    /// webhook URL (one signed POST per firing), e.g. --sink topic:unpaid or
    /// --sink https://hooks.example.com/unpaid
    #[arg(long, value_name = "topic:NAME|URL")]
    sink: String,
    /// Webhooks: the HMAC-SHA256 signing key, at least 16 characters, e.g. --secret
    /// "$(cat hook.key)" [default: a new random one, printed once]
    #[arg(long, value_name = "S")]
    secret: Option<String>,
    /// Webhooks: the topic for firings whose every delivery attempt failed, e.g.
    /// --dead-letter-topic unpaid.failed [default: NAME.dead-letter]
    #[arg(long, value_name = "TOPIC")]
    dead_letter_topic: Option<String>,
    /// Webhooks: delivery attempts before a firing is dead-lettered, e.g. --max-attempts 3
    /// [default: 8]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_attempts: Option<u32>,
    /// Webhooks: wait before the first retry, doubled per attempt, e.g. --initial-backoff-ms
    /// 500 [default: 1000]
    #[arg(long, value_name = "N")]
    initial_backoff_ms: Option<u64>,
    /// Webhooks: the longest wait between retries, e.g. --max-backoff-ms 30000 [default: 60000]
    #[arg(long, value_name = "N")]
    max_backoff_ms: Option<u64>,
    /// Where to start reading the sources: latest (events from now on) or earliest (every
    /// event still in the topics), e.g. --start earliest [default: latest]
    #[arg(long, value_name = "latest|earliest", value_parser = ["latest", "earliest"])]
    start: Option<String>,
    /// Print the server's JSON answer instead of the summary
    #[arg(long)]
    json: bool,
}

/// List triggers as a table: name, state, sources, rule, sink, entities, firings, lag.
///
/// Example:
///   sluice trigger list --http 127.0.0.1:8080
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct ListArgs {
    /// Print the server's JSON answer ({"triggers": [...]}) instead of the table
    #[arg(long)]
    json: bool,
}

/// Show a trigger: its definition and its status counters (events, firings, deliveries,
/// failures, dead-lettered, skipped records by reason, lag).
///
/// Example:
///   sluice trigger describe unpaid
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct DescribeArgs {
    /// Name of the trigger
    name: String,
    /// Print the server's JSON answer instead of the summary
    #[arg(long)]
    json: bool,
}

/// Delete a trigger: it stops, and its definition and state are removed (its sink topic and
/// what it fired stay).
///
/// Example:
///   sluice trigger delete unpaid
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct DeleteArgs {
    /// Name of the trigger
    name: String,
}

pub fn run(args: TriggerArgs) -> anyhow::Result<()> {
    let api = HttpApi::new(&args.http)?;
    block_on(async move {
        match args.command {
            TriggerCommand::Create(a) => create(&api, *a).await,
            TriggerCommand::List(a) => list(&api, a).await,
            TriggerCommand::Describe(a) => describe(&api, a).await,
            TriggerCommand::Delete(a) => delete(&api, a).await,
        }
    })
}

async fn create(api: &HttpApi, args: CreateArgs) -> anyhow::Result<()> {
    let body = create_body(&args)?;
    let answer = api
        .call(Method::POST, "/triggers", Some(body.to_string()))
        .await?;
    let created = answer.ok().map_err(|e| {
        let message = match (&args.rule, e.position) {
            (Some(rule), Some(position)) => with_caret(&e.message, rule, position),
            _ => e.message.clone(),
        };
        anyhow!("cannot create trigger '{}': {message}", args.name)
    })?;
    if args.json {
        println!("{}", created.text);
        return Ok(());
    }
    print!("{}", created_summary(&created.json()?));
    Ok(())
}

/// The POST body for `args`: only the fields given, so the server's defaults apply.
fn create_body(args: &CreateArgs) -> anyhow::Result<Value> {
    let mut body = json!({
        "name": args.name,
        "sources": args.sources,
        "sink": args.sink,
    });
    let fields = body.as_object_mut().expect("an object");
    if let Some(rule) = &args.rule {
        fields.insert("rule".into(), json!(rule));
    }
    if let Some(text) = &args.rule_json {
        let tree: Value = serde_json::from_str(text)
            .with_context(|| format!("--rule-json is not JSON: {text}"))?;
        fields.insert("rule_json".into(), tree);
    }
    for (field, value) in [
        ("entity", &args.entity),
        ("event", &args.event),
        ("secret", &args.secret),
        ("dead_letter_topic", &args.dead_letter_topic),
        ("start", &args.start),
    ] {
        if let Some(v) = value {
            fields.insert(field.into(), json!(v));
        }
    }
    if let Some(n) = args.max_attempts {
        fields.insert("max_attempts".into(), json!(n));
    }
    for (field, value) in [
        ("initial_backoff_ms", args.initial_backoff_ms),
        ("max_backoff_ms", args.max_backoff_ms),
    ] {
        if let Some(v) = value {
            fields.insert(field.into(), json!(v));
        }
    }
    Ok(body)
}

/// What `create` prints: name, canonical rule, sink, and the secret with its warning.
fn created_summary(created: &Value) -> String {
    let mut out = format!(
        "created trigger {}\n  rule: {}\n  sink: {}\n",
        text(&created["name"]),
        text(&created["rule"]),
        text(&created["sink"]),
    );
    if let Some(secret) = created["secret"].as_str() {
        out.push_str(&format!(
            "  secret: {secret}\n  (the secret is shown only once: keep it to verify the webhook signatures)\n"
        ));
    }
    out
}

async fn list(api: &HttpApi, args: ListArgs) -> anyhow::Result<()> {
    let answer = api.call(Method::GET, "/triggers", None).await?;
    let listed = answer
        .ok()
        .map_err(|e| anyhow!("cannot list triggers: {}", e.message))?;
    if args.json {
        println!("{}", listed.text);
        return Ok(());
    }
    let json = listed.json()?;
    let triggers = json["triggers"]
        .as_array()
        .context("the answer has no \"triggers\" list")?;
    print!("{}", table(triggers));
    Ok(())
}

/// The `list` table, columns aligned; "no triggers" when there are none.
fn table(triggers: &[Value]) -> String {
    if triggers.is_empty() {
        return "no triggers\n".to_owned();
    }
    let header = [
        "NAME", "STATE", "SOURCES", "RULE", "SINK", "ENTITIES", "FIRINGS", "LAG",
    ];
    let rows: Vec<[String; 8]> = triggers
        .iter()
        .map(|t| {
            let status = &t["status"];
            [
                text(&t["name"]),
                text(&status["state"]),
                list_of(&t["sources"]),
                text(&t["rule"]),
                text(&t["sink"]),
                text(&status["entities"]),
                text(&status["firings"]),
                text(&status["lag"]),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            if i + 1 < widths.len() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                text.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in &rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

async fn describe(api: &HttpApi, args: DescribeArgs) -> anyhow::Result<()> {
    let answer = api
        .call(Method::GET, &trigger_path(&args.name), None)
        .await?;
    let described = answer
        .ok()
        .map_err(|e| anyhow!("cannot describe trigger '{}': {}", args.name, e.message))?;
    if args.json {
        println!("{}", described.text);
        return Ok(());
    }
    print!("{}", description(&described.json()?));
    Ok(())
}

/// What `describe` prints: every field, then the status counters.
fn description(t: &Value) -> String {
    let status = &t["status"];
    let mut out = String::new();
    let mut line = |label: &str, value: String| out.push_str(&format!("{label}: {value}\n"));
    line("trigger", text(&t["name"]));
    line("state", text(&status["state"]));
    if let Some(error) = status["error"].as_str() {
        line("error", error.to_owned());
    }
    line("sources", list_of(&t["sources"]));
    line("rule", text(&t["rule"]));
    line("rule (JSON)", t["rule_json"].to_string());
    line("entity", text(&t["entity"]));
    line("event", text(&t["event"]));
    line("sink", text(&t["sink"]));
    if let Some(topic) = t["dead_letter_topic"].as_str() {
        line("dead-letter topic", topic.to_owned());
    }
    line("start", text(&t["start"]));
    line(
        "created",
        match t["created_ms"].as_i64() {
            Some(ms) => format!("{} ({ms} ms)", utc_time(ms)),
            None => text(&t["created_ms"]),
        },
    );
    out.push_str("status:\n");
    for (label, field) in [
        ("entities", "entities"),
        ("events", "events"),
        ("firings", "firings"),
        ("delivered", "delivered"),
        ("delivery failures", "delivery_failures"),
        ("dead-lettered", "dead_lettered"),
        ("lag", "lag"),
    ] {
        out.push_str(&format!("  {label}: {}\n", text(&status[field])));
    }
    match status["skipped"].as_object() {
        Some(skipped) if !skipped.is_empty() => {
            out.push_str("  skipped:\n");
            for (reason, count) in skipped {
                out.push_str(&format!("    {reason}: {}\n", text(count)));
            }
        }
        _ => out.push_str("  skipped: 0\n"),
    }
    out
}

async fn delete(api: &HttpApi, args: DeleteArgs) -> anyhow::Result<()> {
    api.call(Method::DELETE, &trigger_path(&args.name), None)
        .await?
        .ok()
        .map_err(|e| anyhow!("cannot delete trigger '{}': {}", args.name, e.message))?;
    println!("deleted trigger {}", args.name);
    Ok(())
}

/// `/triggers/NAME`, the name percent-encoded (valid names need none; an invalid one reaches
/// the server intact, to be refused with its reason).
fn trigger_path(name: &str) -> String {
    let mut path = "/triggers/".to_owned();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'~') {
            path.push(b as char);
        } else {
            path.push_str(&format!("%{b:02X}"));
        }
    }
    path
}

/// A JSON value as a table cell: strings without quotes, absent as `-`.
fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A JSON list of strings as `a, b`.
fn list_of(value: &Value) -> String {
    match value.as_array() {
        Some(items) => items.iter().map(text).collect::<Vec<_>>().join(","),
        None => text(value),
    }
}

/// `message` with the line of `rule` holding byte `position` and a caret under it, unless the
/// message has a caret line already.
fn with_caret(message: &str, rule: &str, position: usize) -> String {
    // The server's rule errors end with the rule and a caret line already (possibly with
    // more text after the caret, such as the status).
    let has_caret = message.lines().any(|l| l.trim_start().starts_with('^'));
    if has_caret || position > rule.len() || !rule.is_char_boundary(position) {
        return message.to_owned();
    }
    let start = rule[..position].rfind('\n').map_or(0, |i| i + 1);
    let end = rule[position..]
        .find('\n')
        .map_or(rule.len(), |i| position + i);
    let column = rule[start..position].chars().count();
    format!(
        "{message}\n  {}\n  {}^",
        &rule[start..end],
        " ".repeat(column)
    )
}

/// `ms` since 1970 as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
fn utc_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, day_secs) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        day_secs / 3600,
        day_secs % 3600 / 60,
        day_secs % 60
    )
}

/// The broker's HTTP API: its address, the key, and the TLS setup for `https://`.
struct HttpApi {
    https: bool,
    /// `host:port` as given (IPv6 in brackets).
    authority: String,
    host: String,
    port: u16,
    /// A path prefix from the URL, without its trailing '/' (usually empty).
    prefix: String,
    api_key: Option<String>,
    tls: Option<tokio_rustls::TlsConnector>,
}

/// A 2xx answer.
struct Answer {
    text: String,
}

impl Answer {
    fn json(&self) -> anyhow::Result<Value> {
        serde_json::from_str(&self.text)
            .with_context(|| format!("the broker's answer is not JSON: {}", self.text))
    }
}

/// A 4xx/5xx answer: the server's `error`, and `position` for a rule error.
struct Refusal {
    message: String,
    position: Option<usize>,
}

/// An answer: 2xx, or what the server said was wrong.
struct Reply {
    status: StatusCode,
    text: String,
}

impl Reply {
    fn ok(self) -> Result<Answer, Refusal> {
        if self.status.is_success() {
            return Ok(Answer { text: self.text });
        }
        let body: Option<Value> = serde_json::from_str(&self.text).ok();
        let error = body.as_ref().and_then(|b| b["error"].as_str());
        let message = match error {
            Some(error) => format!("{error} (HTTP {})", self.status.as_u16()),
            None => format!("HTTP {}: {}", self.status, self.text.trim()),
        };
        Err(Refusal {
            message,
            position: body
                .as_ref()
                .and_then(|b| b["position"].as_u64())
                .map(|p| p as usize),
        })
    }
}

impl HttpApi {
    fn new(args: &HttpArgs) -> anyhow::Result<HttpApi> {
        let given = args.http.trim();
        let url = if given.contains("://") {
            given.to_owned()
        } else {
            format!("http://{given}")
        };
        let uri: Uri = url
            .parse()
            .with_context(|| format!("--http {given:?} is not HOST:PORT or a URL"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            other => bail!(
                "--http {given:?}: the scheme must be http or https, not {}",
                other.unwrap_or("none")
            ),
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .with_context(|| format!("--http {given:?} names no host"))?
            .to_owned();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let prefix = uri.path().trim_end_matches('/').to_owned();
        let tls = if https {
            Some(tls_connector(args.http_ca_file.as_deref())?)
        } else {
            None
        };
        Ok(HttpApi {
            https,
            authority: format!("{host}:{port}"),
            host,
            port,
            prefix,
            api_key: args.api_key.clone(),
            tls,
        })
    }

    fn url(&self, path: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{}{path}", self.authority, self.prefix)
    }

    /// One request on a new connection; the answer whatever its status. Connection problems
    /// (refused, timed out, TLS) are errors naming the address.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> anyhow::Result<Reply> {
        let url = self.url(path);
        let unreachable = |e: &dyn std::fmt::Display| {
            anyhow!(
                "cannot reach the broker's HTTP API at {}: {e} (is `sluice serve` running there? set --http or SLUICE_HTTP)",
                self.url("")
            )
        };
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, self.port)))
            .await
            .map_err(|_| unreachable(&"connecting timed out"))?
            .map_err(|e| unreachable(&e))?;
        let _ = tcp.set_nodelay(true);
        let request = {
            let mut r = Request::builder()
                .method(method.clone())
                .uri(format!("{}{path}", self.prefix))
                .header(header::HOST, &self.authority)
                .header(header::USER_AGENT, crate::client::CLIENT_ID)
                .header(header::ACCEPT, "application/json");
            if let Some(key) = &self.api_key {
                r = r.header(header::AUTHORIZATION, format!("Bearer {key}"));
            }
            if body.is_some() {
                r = r.header(header::CONTENT_TYPE, "application/json");
            }
            r.body(Full::new(Bytes::from(body.unwrap_or_default())))
                .with_context(|| format!("building the request {method} {url}"))?
        };
        let exchange = async {
            match &self.tls {
                None => exchange(tcp, request).await,
                Some(tls) => {
                    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                        .with_context(|| format!("{host:?} is not a valid TLS server name"))?;
                    let stream = tls
                        .connect(name, tcp)
                        .await
                        .map_err(|e| unreachable(&format!("TLS handshake failed: {e}")))?;
                    exchange(stream, request).await
                }
            }
        };
        tokio::time::timeout(RESPONSE_TIMEOUT, exchange)
            .await
            .map_err(|_| {
                anyhow!(
                    "{method} {url}: no answer within {} s",
                    RESPONSE_TIMEOUT.as_secs()
                )
            })?
            .with_context(|| format!("{method} {url}"))
    }
}

/// Sends `request` over `stream` (HTTP/1.1) and reads the whole answer.
async fn exchange<S>(stream: S, request: Request<Full<Bytes>>) -> anyhow::Result<Reply>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .context("starting HTTP on the connection")?;
    let driver = tokio::spawn(connection);
    let response = sender
        .send_request(request)
        .await
        .context("sending the request")?;
    let status = response.status();
    let body = http_body_util::Limited::new(response.into_body(), RESPONSE_BYTES_MAX)
        .collect()
        .await
        .map_err(|e| anyhow!("reading the answer: {e}"))?
        .to_bytes();
    driver.abort();
    Ok(Reply {
        status,
        text: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// rustls for `https://`: the CAs in `ca_file`, else the system's trusted roots.
fn tls_connector(ca_file: Option<&std::path::Path>) -> anyhow::Result<tokio_rustls::TlsConnector> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .with_context(|| format!("reading CA certificates from {}", path.display()))?;
            if certs.is_empty() {
                bail!("{} holds no PEM certificate", path.display());
            }
            for cert in certs {
                roots
                    .add(cert)
                    .with_context(|| format!("a CA certificate in {}", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            // Unreadable system certificates are skipped: the ones that load may be enough.
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                bail!(
                    "no trusted CA certificates found on this system; pass --http-ca-file with the CA of the broker's certificate"
                );
            }
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("setting up TLS")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caret_under_the_position() {
        assert_eq!(
            with_caret("rule: at byte 6: expected", "\"a\" THNE \"b\"", 4),
            "rule: at byte 6: expected\n  \"a\" THNE \"b\"\n      ^"
        );
        // On the line holding the position, counted in characters.
        assert_eq!(
            with_caret("bad", "\"é\" THEN\n\"b\" WITHN 7d", 14),
            "bad\n  \"b\" WITHN 7d\n      ^"
        );
        // A message with its own caret line, or a position outside the rule: as it is.
        assert_eq!(
            with_caret("x\n  \"a\"\n   ^", "\"a\"", 1),
            "x\n  \"a\"\n   ^"
        );
        assert_eq!(with_caret("x", "\"a\"", 9), "x");
    }

    #[test]
    fn utc_times() {
        assert_eq!(utc_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_time(1_767_225_600_000), "2026-01-01T00:00:00Z");
        assert_eq!(utc_time(951_827_696_789), "2000-02-29T12:34:56Z");
        assert_eq!(utc_time(-1_000), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn paths_escape_what_names_cannot_hold() {
        assert_eq!(trigger_path("unpaid.v2_x-y"), "/triggers/unpaid.v2_x-y");
        assert_eq!(trigger_path("a b/c"), "/triggers/a%20b%2Fc");
    }
}
