//! Topic set-up and tear-down for each test point, through librdkafka's admin API.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_executor::block_on;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;

use crate::target::Target;

/// An admin connection to the cluster under test.
pub struct Admin {
    client: AdminClient<DefaultClientContext>,
    metadata: BaseConsumer,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Admin")
    }
}

const TIMEOUT: Duration = Duration::from_secs(30);

impl Admin {
    /// Connects with the target's bootstrap servers and connection properties (the same
    /// security settings as the producers and consumers).
    pub fn connect(target: &Target) -> Result<Admin, String> {
        let mut settings = Vec::new();
        target.apply(&mut settings);
        let mut config = ClientConfig::new();
        for (k, v) in &settings {
            config.set(k, v);
        }
        let client: AdminClient<DefaultClientContext> = config
            .create()
            .map_err(|e| format!("cannot create an admin client: {e}"))?;
        let metadata: BaseConsumer = config
            .create()
            .map_err(|e| format!("cannot create a metadata client: {e}"))?;
        let admin = Admin { client, metadata };
        admin
            .metadata
            .fetch_metadata(None, Duration::from_secs(10))
            .map_err(|e| {
                format!(
                    "cannot reach a broker at {} ({}): {e}",
                    target.bootstrap,
                    target.security_protocol()
                )
            })?;
        Ok(admin)
    }

    /// Creates the topics with the given topic configs and waits until the cluster's metadata
    /// shows every partition with a leader.
    pub fn create_topics(
        &self,
        names: &[String],
        partitions: u32,
        replication: i16,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let specs: Vec<NewTopic<'_>> = names
            .iter()
            .map(|n| {
                configs.iter().fold(
                    NewTopic::new(
                        n,
                        partitions as i32,
                        TopicReplication::Fixed(i32::from(replication)),
                    ),
                    |topic, (k, v)| topic.set(k, v),
                )
            })
            .collect();
        let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
        let results = block_on(self.client.create_topics(&specs, &options))
            .map_err(|e| format!("create topics: {e}"))?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => return Err(format!("create topic {topic}: {code}")),
            }
        }
        let deadline = Instant::now() + TIMEOUT;
        for name in names {
            loop {
                let ready = self
                    .metadata
                    .fetch_metadata(Some(name), Duration::from_secs(5))
                    .ok()
                    .and_then(|m| {
                        m.topics().iter().find(|t| t.name() == name).map(|t| {
                            t.error().is_none()
                                && t.partitions().len() == partitions as usize
                                && t.partitions().iter().all(|p| p.leader() >= 0)
                        })
                    })
                    .unwrap_or(false);
                if ready {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "topic {name} has no leader for every partition after {TIMEOUT:?}"
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// Deletes the topics; failures are returned but harmless to the results.
    pub fn delete_topics(&self, names: &[String]) -> Result<(), String> {
        if names.is_empty() {
            return Ok(());
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
        let results = block_on(self.client.delete_topics(&refs, &options))
            .map_err(|e| format!("delete topics: {e}"))?;
        for result in results {
            if let Err((topic, code)) = result {
                return Err(format!("delete topic {topic}: {code}"));
            }
        }
        Ok(())
    }

    /// The high watermark of every partition of `topic`.
    pub fn high_watermarks(&self, topic: &str, partitions: u32) -> Result<Vec<i64>, String> {
        (0..partitions as i32)
            .map(|p| {
                self.metadata
                    .fetch_watermarks(topic, p, Duration::from_secs(10))
                    .map(|(_, high)| high)
                    .map_err(|e| format!("watermarks of {topic}/{p}: {e}"))
            })
            .collect()
    }
}

/// `librdkafka <version> (rdkafka crate)`.
pub fn client_name() -> String {
    let (_, version) = rdkafka::util::get_rdkafka_version();
    format!("librdkafka {version} (rdkafka crate 0.38)")
}
