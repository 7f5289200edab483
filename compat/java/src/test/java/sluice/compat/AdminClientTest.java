package sluice.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static sluice.compat.Compat.ADMIN_TIMEOUT;
import static sluice.compat.Compat.PARTITIONS;

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TopicListing;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;
import sluice.compat.Compat.Steps;

/**
 * The Java AdminClient (default settings) on one topic: describe the cluster, create a 3-partition
 * topic with a config, describe it and its configs, alter configs (incrementalAlterConfigs SET and
 * DELETE) and read them back, add a partition, delete it; plus the errors a client relies on
 * (topic exists, unknown topic, invalid config).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class AdminClientTest {
  /** The configs Sluice supports on topics (issue 3); all must be described. */
  static final List<String> TOPIC_CONFIGS =
      List.of("retention.ms", "retention.bytes", "segment.bytes", "segment.ms", "cleanup.policy", "max.message.bytes");

  static final String SEVEN_DAYS_MS = "604800000";

  private final String topic = Compat.uniqueTopic("java-admin");
  private final ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
  private final Steps steps = new Steps();
  private final Admin admin = Admin.create(Compat.clientProps(topic, "admin"));

  @AfterAll
  void closeAdmin() {
    admin.close(Duration.ofSeconds(10));
  }

  static <T> T get(KafkaFuture<T> f) throws Exception {
    return f.get(30, TimeUnit.SECONDS);
  }

  /** The cause of the failed future, which is what callers of the Admin API act on. */
  static Throwable failure(KafkaFuture<?> f) {
    ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(30, TimeUnit.SECONDS));
    return e.getCause();
  }

  Config describeConfigs() throws Exception {
    return get(admin.describeConfigs(List.of(resource)).all()).get(resource);
  }

  /** Wait until the topic's configs satisfy the condition (config changes apply asynchronously). */
  Config configsWhen(Predicate<Config> condition, String what) throws Exception {
    Config[] last = new Config[1];
    Compat.waitUntil(
        () -> {
          try {
            last[0] = describeConfigs();
            return condition.test(last[0]);
          } catch (Exception e) {
            throw new RuntimeException(e);
          }
        },
        Duration.ofSeconds(15),
        what);
    return last[0];
  }

  TopicDescription describe(String t) throws Exception {
    return get(admin.describeTopics(List.of(t)).allTopicNames()).get(t);
  }

  @Test
  @Order(1)
  void describeCluster() throws Exception {
    DescribeClusterResult cluster = admin.describeCluster();
    Collection<Node> nodes = get(cluster.nodes());
    assertFalse(nodes.isEmpty(), "no nodes");
    String bootstrap = Compat.bootstrap();
    assertTrue(
        nodes.stream().anyMatch(n -> (n.host() + ":" + n.port()).equals(bootstrap)),
        () -> "no node at " + bootstrap + ": " + nodes);
    assertNotNull(get(cluster.clusterId()), "cluster id");
  }

  @Test
  @Order(2)
  void createTopicWithConfig() throws Exception {
    NewTopic nt = new NewTopic(topic, PARTITIONS, (short) 1).configs(Map.of("retention.bytes", "104857600"));
    CreateTopicsResult result = admin.createTopics(List.of(nt));
    get(result.all());
    assertEquals(PARTITIONS, get(result.numPartitions(topic)));
    assertEquals(1, get(result.replicationFactor(topic)));
    steps.ok("create");
  }

  @Test
  @Order(3)
  void createExistingTopicFails() throws Exception {
    steps.require("create");
    Throwable cause = failure(admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all());
    assertInstanceOf(TopicExistsException.class, cause);
  }

  @Test
  @Order(4)
  void listTopics() throws Exception {
    steps.require("create");
    Map<String, TopicListing> listings = get(admin.listTopics().namesToListings());
    assertTrue(listings.containsKey(topic), () -> topic + " not in " + listings.keySet());
    assertFalse(listings.get(topic).isInternal());
    assertNotEquals(Uuid.ZERO_UUID, listings.get(topic).topicId(), "topic id");
  }

  @Test
  @Order(5)
  void describeTopic() throws Exception {
    steps.require("create");
    TopicDescription d = describe(topic);
    assertEquals(topic, d.name());
    assertFalse(d.isInternal());
    assertNotEquals(Uuid.ZERO_UUID, d.topicId(), "topic id");
    assertEquals(PARTITIONS, d.partitions().size(), () -> "partitions: " + d.partitions());
    for (int p = 0; p < PARTITIONS; p++) {
      TopicPartitionInfo info = d.partitions().get(p);
      assertEquals(p, info.partition());
      assertNotNull(info.leader(), "leader of partition " + p);
      assertEquals(List.of(info.leader()), info.replicas(), "replicas of partition " + p);
      assertEquals(List.of(info.leader()), info.isr(), "isr of partition " + p);
    }
  }

  @Test
  @Order(6)
  void describeConfigsOfTopic() throws Exception {
    steps.require("create");
    Config config = describeConfigs();
    for (String name : TOPIC_CONFIGS) {
      ConfigEntry e = config.get(name);
      assertNotNull(e, () -> name + " not described; got " + config.entries().stream().map(ConfigEntry::name).toList());
      assertNotNull(e.value(), name + " has no value");
    }
    ConfigEntry retentionBytes = config.get("retention.bytes");
    assertEquals("104857600", retentionBytes.value(), "retention.bytes set at creation");
    assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, retentionBytes.source());
    assertEquals(SEVEN_DAYS_MS, config.get("retention.ms").value(), "default retention.ms (7 days)");
    assertNotEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, config.get("retention.ms").source());
    assertEquals("delete", config.get("cleanup.policy").value());
    steps.ok("describeConfigs");
  }

  @Test
  @Order(7)
  void incrementalAlterConfigsReadsBack() throws Exception {
    steps.require("create", "describeConfigs");
    get(
        admin
            .incrementalAlterConfigs(
                Map.of(
                    resource,
                    List.of(
                        new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET),
                        new AlterConfigOp(new ConfigEntry("max.message.bytes", "2097152"), AlterConfigOp.OpType.SET))))
            .all());
    Config config =
        configsWhen(
            c -> "3600000".equals(c.get("retention.ms").value()) && "2097152".equals(c.get("max.message.bytes").value()),
            "retention.ms=3600000 and max.message.bytes=2097152 to read back");
    assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, config.get("retention.ms").source());
    assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, config.get("max.message.bytes").source());
    assertEquals("104857600", config.get("retention.bytes").value(), "an unaltered config keeps its value");
    steps.ok("alter");
  }

  @Test
  @Order(8)
  void incrementalAlterConfigsDeleteRestoresDefault() throws Exception {
    steps.require("alter");
    get(
        admin
            .incrementalAlterConfigs(
                Map.of(resource, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE))))
            .all());
    Config config = configsWhen(c -> SEVEN_DAYS_MS.equals(c.get("retention.ms").value()), "retention.ms back to its default");
    assertNotEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, config.get("retention.ms").source());
    assertEquals("2097152", config.get("max.message.bytes").value(), "max.message.bytes stays set");
  }

  @Test
  @Order(9)
  void invalidConfigValueIsRejected() throws Exception {
    steps.require("create");
    Throwable cause =
        failure(
            admin
                .incrementalAlterConfigs(
                    Map.of(resource, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "not-a-number"), AlterConfigOp.OpType.SET))))
                .all());
    assertInstanceOf(InvalidConfigurationException.class, cause);
  }

  @Test
  @Order(10)
  void createPartitions() throws Exception {
    steps.require("create");
    get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(PARTITIONS + 1))).all());
    Compat.waitUntil(
        () -> {
          try {
            return describe(topic).partitions().size() == PARTITIONS + 1;
          } catch (Exception e) {
            throw new RuntimeException(e);
          }
        },
        ADMIN_TIMEOUT,
        topic + " to have " + (PARTITIONS + 1) + " partitions");
  }

  @Test
  @Order(11)
  void deleteTopic() throws Exception {
    steps.require("create");
    get(admin.deleteTopics(List.of(topic)).all());
    Compat.waitUntil(
        () -> {
          try {
            return !get(admin.listTopics().names()).contains(topic);
          } catch (Exception e) {
            throw new RuntimeException(e);
          }
        },
        ADMIN_TIMEOUT,
        topic + " to leave the topic list");
    assertInstanceOf(UnknownTopicOrPartitionException.class, failure(admin.describeTopics(List.of(topic)).allTopicNames()));
  }

  @Test
  @Order(12)
  void deleteUnknownTopicFails() {
    String missing = Compat.uniqueTopic("java-admin-missing");
    assertInstanceOf(UnknownTopicOrPartitionException.class, failure(admin.deleteTopics(List.of(missing)).all()));
  }
}
