package sluice.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static sluice.compat.AdminClientTest.failure;
import static sluice.compat.AdminClientTest.get;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.SupportedVersionRange;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.UnknownTopicIdException;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;
import sluice.compat.Compat.Steps;

/**
 * The Java AdminClient calls Kafka's own CLI tools make (kafka-consumer-groups, kafka-get-offsets,
 * kafka-delete-records, kafka-log-dirs, kafka-features, kafka-configs for quotas, kafka-topics
 * --topic-id, kafka-cluster cluster-id), each checked against the broker's state.
 *
 * <p>One 2-partition topic of 20 records: record i in partition i % 2 (offset i / 2) with timestamp
 * t0 + i s, except record 6 (partition 0, offset 3), stamped t0 + 100 s, the partition's maximum
 * out of order. Two groups, one per protocol (classic and KIP-848), each with one Java consumer that
 * commits and closes; then the offsets are listed, altered, deleted and the groups deleted.
 *
 * <p>Cluster mode: a request may go to a broker other than the one that made a change, which sees
 * it within its catalog refresh (about a second); reads after a change wait for it (15 s).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class AdminToolCallsTest {
  static final int PARTITIONS = 2;
  static final int RECORDS = 20;
  static final long OUT_OF_ORDER_MS = 100_000; // record 6's timestamp, t0 + this
  static final Duration SETTLE = Duration.ofSeconds(15);

  private final String topic = Compat.uniqueTopic("java-tools");
  private final String run = Compat.runId(topic);
  private final Map<String, String> groups =
      Map.of("classic", "compat-java-tools-classic-" + run, "consumer", "compat-java-tools-consumer-" + run);
  private final TopicPartition p0 = new TopicPartition(topic, 0);
  private final TopicPartition p1 = new TopicPartition(topic, 1);
  // Whole seconds an hour ago: inside the default 7-day retention.
  private final long t0 = (System.currentTimeMillis() / 1000 - 3600) * 1000;
  private final Steps steps = new Steps();
  private final Admin admin = Admin.create(Compat.clientProps(topic, "tools-admin"));

  @AfterAll
  void cleanUp() throws Exception {
    try {
      admin.deleteTopics(List.of(topic)).all().get(30, TimeUnit.SECONDS);
    } catch (ExecutionException e) {
      // Never created, or already gone: nothing to clean.
    } finally {
      admin.close(Duration.ofSeconds(10));
    }
  }

  long timestampOf(int i) {
    return t0 + (i == 6 ? OUT_OF_ORDER_MS : i * 1000L);
  }

  /** A read of the broker's state that may throw. */
  @FunctionalInterface
  interface Read<T> {
    T get() throws Exception;
  }

  /**
   * Waits until `read` returns a value `ok` accepts (a change made through one broker of a cluster
   * reaches the others within a second or so) and returns it; fails with the last value or error.
   */
  <T> T waitFor(Read<T> read, Predicate<T> ok, String what) throws Exception {
    List<Object> last = new ArrayList<>();
    last.add(null);
    try {
      Compat.waitUntil(
          () -> {
            try {
              T value = read.get();
              last.set(0, value);
              return ok.test(value);
            } catch (Exception e) {
              last.set(0, e);
              return false;
            }
          },
          SETTLE,
          what);
    } catch (AssertionError e) {
      throw new AssertionError(e.getMessage() + "; last: " + last.get(0), e);
    }
    @SuppressWarnings("unchecked")
    T value = (T) last.get(0);
    return value;
  }

  ListOffsetsResultInfo listOffset(TopicPartition tp, OffsetSpec spec) throws Exception {
    return get(admin.listOffsets(Map.of(tp, spec)).partitionResult(tp));
  }

  @Test
  @Order(1)
  void describeClusterIdIsBase64Uuid() throws Exception {
    String clusterId = get(admin.describeCluster().clusterId());
    assertNotNull(clusterId, "cluster id");
    // kafka-cluster cluster-id prints it; KRaft cluster ids are UUIDs in URL-safe base64, 22 chars.
    assertTrue(clusterId.matches("[A-Za-z0-9_-]{22}"), () -> "cluster id " + clusterId);
    assertEquals(16, Base64.getUrlDecoder().decode(clusterId).length, clusterId);
    Collection<Node> nodes = get(admin.describeCluster().nodes());
    assertFalse(nodes.isEmpty(), "no nodes");
    assertNotNull(get(admin.describeCluster().controller()), "controller");
  }

  @Test
  @Order(2)
  void createTopicAndProduce() throws Exception {
    get(admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all());
    Properties props = Compat.clientProps(topic, "tools-producer");
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
      for (int i = 0; i < RECORDS; i++) {
        var meta =
            producer
                .send(new ProducerRecord<>(topic, i % PARTITIONS, timestampOf(i), "k" + i, "v" + i))
                .get(30, TimeUnit.SECONDS);
        assertEquals(i / PARTITIONS, meta.offset(), "offset of record " + i);
      }
    }
    steps.ok("topic");
  }

  @Test
  @Order(3)
  void describeTopicsByTopicId() throws Exception {
    steps.require("topic");
    TopicDescription byName =
        waitFor(
            () -> get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic),
            d -> d != null && d.partitions().size() == PARTITIONS,
            topic + " described by name");
    Uuid id = byName.topicId();
    assertNotEquals(Uuid.ZERO_UUID, id, "topic id");
    Map<Uuid, TopicDescription> byId = get(admin.describeTopics(TopicCollection.ofTopicIds(List.of(id))).allTopicIds());
    TopicDescription d = byId.get(id);
    assertNotNull(d, () -> "no description for " + id + ": " + byId);
    assertEquals(topic, d.name());
    assertEquals(id, d.topicId());
    assertEquals(PARTITIONS, d.partitions().size());
    for (var p : d.partitions()) {
      assertNotNull(p.leader(), () -> "leader of partition " + p.partition());
    }
    // An id no topic has.
    Uuid unknown = Uuid.randomUuid();
    Throwable cause = failure(admin.describeTopics(TopicCollection.ofTopicIds(List.of(unknown))).allTopicIds());
    assertInstanceOf(UnknownTopicIdException.class, cause);
  }

  @Test
  @Order(4)
  void listOffsetsEarliestLatestMaxTimestamp() throws Exception {
    steps.require("topic");
    for (TopicPartition tp : List.of(p0, p1)) {
      assertEquals(0, listOffset(tp, OffsetSpec.earliest()).offset(), "earliest of " + tp);
      assertEquals(RECORDS / PARTITIONS, listOffset(tp, OffsetSpec.latest()).offset(), "latest of " + tp);
    }
    // KIP-734: the record with the highest timestamp; partition 0's is record 6 at offset 3.
    ListOffsetsResultInfo max0 = listOffset(p0, OffsetSpec.maxTimestamp());
    assertEquals(3, max0.offset(), "max timestamp offset of partition 0");
    assertEquals(t0 + OUT_OF_ORDER_MS, max0.timestamp());
    ListOffsetsResultInfo max1 = listOffset(p1, OffsetSpec.maxTimestamp());
    assertEquals(9, max1.offset(), "max timestamp offset of partition 1");
    assertEquals(timestampOf(19), max1.timestamp());
  }

  @Test
  @Order(5)
  void listOffsetsForTimestamp() throws Exception {
    steps.require("topic");
    // The first offset whose timestamp is at or after the one asked for. Partition 1: record 13
    // (offset 6). Partition 0: record 6 (offset 3, t0 + 100 s) comes before records 8, 10, ...
    ListOffsetsResultInfo at1 = listOffset(p1, OffsetSpec.forTimestamp(t0 + 12_500));
    assertEquals(6, at1.offset());
    assertEquals(timestampOf(13), at1.timestamp());
    ListOffsetsResultInfo at0 = listOffset(p0, OffsetSpec.forTimestamp(t0 + 12_500));
    assertEquals(3, at0.offset());
    assertEquals(t0 + OUT_OF_ORDER_MS, at0.timestamp());
    // Exactly a record's timestamp: that record.
    assertEquals(2, listOffset(p0, OffsetSpec.forTimestamp(timestampOf(4))).offset());
    // After every record: none (offset -1).
    assertEquals(-1, listOffset(p0, OffsetSpec.forTimestamp(t0 + 10 * OUT_OF_ORDER_MS)).offset());
  }

  @Test
  @Order(6)
  void deleteRecords() throws Exception {
    steps.require("topic");
    long low = get(admin.deleteRecords(Map.of(p1, RecordsToDelete.beforeOffset(3))).lowWatermarks().get(p1)).lowWatermark();
    assertEquals(3, low);
    waitFor(() -> listOffset(p1, OffsetSpec.earliest()).offset(), o -> o == 3, "earliest offset 3 of " + p1);
    assertEquals(0, listOffset(p0, OffsetSpec.earliest()).offset(), "partition 0 untouched");
    assertEquals(RECORDS / PARTITIONS, listOffset(p1, OffsetSpec.latest()).offset());
  }

  @Test
  @Order(7)
  void describeLogDirs() throws Exception {
    steps.require("topic");
    List<Integer> ids = get(admin.describeCluster().nodes()).stream().map(Node::id).toList();
    Map<Integer, Map<String, LogDirDescription>> dirs = get(admin.describeLogDirs(ids).allDescriptions());
    assertEquals(Set.copyOf(ids), dirs.keySet(), "a description for every broker");
    Map<TopicPartition, Long> sizes = new HashMap<>();
    for (var broker : dirs.values()) {
      assertFalse(broker.isEmpty(), () -> "a broker without log dirs: " + dirs);
      for (var dir : broker.values()) {
        assertEquals(null, dir.error(), () -> "log dir error: " + dir);
        for (Map.Entry<TopicPartition, ReplicaInfo> e : dir.replicaInfos().entrySet()) {
          sizes.merge(e.getKey(), e.getValue().size(), Math::max);
        }
      }
    }
    for (TopicPartition tp : List.of(p0, p1)) {
      assertTrue(sizes.getOrDefault(tp, 0L) > 0, () -> tp + " not described with a size: " + sizes);
    }
  }

  @Test
  @Order(8)
  void describeFeatures() throws Exception {
    FeatureMetadata features = get(admin.describeFeatures().featureMetadata());
    Map<String, FinalizedVersionRange> finalized = features.finalizedFeatures();
    Map<String, SupportedVersionRange> supported = features.supportedFeatures();
    // kafka-features describe prints these; the broker serves KIP-848 groups, so group.version >= 1.
    FinalizedVersionRange group = finalized.get("group.version");
    assertNotNull(group, () -> "no finalized group.version: " + finalized);
    assertTrue(group.maxVersionLevel() >= 1, () -> "group.version " + group);
    for (var e : finalized.entrySet()) {
      SupportedVersionRange s = supported.get(e.getKey());
      assertNotNull(s, () -> "finalized but not supported: " + e);
      assertTrue(
          s.minVersion() <= e.getValue().maxVersionLevel() && e.getValue().maxVersionLevel() <= s.maxVersion(),
          () -> e + " outside " + s);
    }
    assertTrue(features.finalizedFeaturesEpoch().isPresent(), "finalized features epoch");
  }

  Map<ClientQuotaEntity, Map<String, Double>> quotasOf(ClientQuotaEntity entity) throws Exception {
    ClientQuotaFilter filter =
        ClientQuotaFilter.containsOnly(
            List.of(ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.CLIENT_ID, entity.entries().get(ClientQuotaEntity.CLIENT_ID))));
    return get(admin.describeClientQuotas(filter).entities());
  }

  @Test
  @Order(9)
  void alterAndDescribeClientQuotas() throws Exception {
    ClientQuotaEntity entity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, "compat-java-quota-" + run));
    get(
        admin
            .alterClientQuotas(
                List.of(
                    new ClientQuotaAlteration(
                        entity,
                        List.of(
                            new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0),
                            new ClientQuotaAlteration.Op("consumer_byte_rate", 2097152.0)))))
            .all());
    try {
      Map<String, Double> want = Map.of("producer_byte_rate", 1048576.0, "consumer_byte_rate", 2097152.0);
      waitFor(() -> quotasOf(entity), q -> want.equals(q.get(entity)), "quotas " + want + " on " + entity);
      // Removing one (a null value) leaves the other.
      get(
          admin
              .alterClientQuotas(
                  List.of(new ClientQuotaAlteration(entity, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", null)))))
              .all());
      waitFor(
          () -> quotasOf(entity),
          q -> Map.of("consumer_byte_rate", 2097152.0).equals(q.get(entity)),
          "only consumer_byte_rate left on " + entity);
    } finally {
      admin
          .alterClientQuotas(
              List.of(
                  new ClientQuotaAlteration(
                      entity,
                      List.of(
                          new ClientQuotaAlteration.Op("producer_byte_rate", null),
                          new ClientQuotaAlteration.Op("consumer_byte_rate", null)))))
          .all()
          .get(30, TimeUnit.SECONDS);
    }
    waitFor(() -> quotasOf(entity), q -> !q.containsKey(entity), "no quotas left on " + entity);
  }

  /**
   * A member of the group joins (the given protocol), commits partition 0 at 4 and partition 1 at 6
   * and, while it is there, the group is listed and described as kafka-consumer-groups shows it;
   * then it closes.
   */
  void groupWithOneMember(String protocol, GroupType type) throws Exception {
    steps.require("topic");
    String group = groups.get(protocol);
    Properties props = Compat.clientProps(topic, "tools-" + protocol);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    String clientId = props.getProperty(ConsumerConfig.CLIENT_ID_CONFIG);
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
      c.subscribe(List.of(topic));
      long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
      while (c.assignment().size() < PARTITIONS && System.nanoTime() < deadline) {
        c.poll(Duration.ofMillis(200));
      }
      assertEquals(Set.of(p0, p1), c.assignment(), "assignment");
      c.commitSync(Map.of(p0, new OffsetAndMetadata(4), p1, new OffsetAndMetadata(6)));

      Collection<GroupListing> listed = get(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all());
      GroupListing listing =
          listed.stream().filter(g -> g.groupId().equals(group)).findFirst().orElseThrow(() -> new AssertionError(group + " not in " + listed));
      assertEquals(Optional.of(type), listing.type(), "group type");
      assertEquals("consumer", listing.protocol(), "protocol type");
      assertEquals(Optional.of(GroupState.STABLE), listing.groupState(), "state");

      ConsumerGroupDescription d = get(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group));
      assertEquals(GroupState.STABLE, d.groupState());
      assertEquals(type, d.type());
      assertFalse(d.partitionAssignor().isEmpty(), "assignor");
      assertNotNull(d.coordinator(), "coordinator");
      assertEquals(1, d.members().size(), () -> "members " + d.members());
      MemberDescription m = d.members().iterator().next();
      assertEquals(clientId, m.clientId());
      assertFalse(m.consumerId().isEmpty(), "member id");
      assertEquals(Set.of(p0, p1), m.assignment().topicPartitions());

      // Deleting a group with a member is refused.
      assertInstanceOf(GroupNotEmptyException.class, failure(admin.deleteConsumerGroups(List.of(group)).all()));
    }
    ConsumerGroupDescription after =
        waitFor(
            () -> get(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)),
            d -> d.groupState() == GroupState.EMPTY,
            group + " EMPTY after its member closed");
    assertTrue(after.members().isEmpty(), () -> "members " + after.members());
    steps.ok("group-" + protocol);
  }

  @Test
  @Order(10)
  void classicGroupListedAndDescribed() throws Exception {
    groupWithOneMember("classic", GroupType.CLASSIC);
  }

  @Test
  @Order(11)
  void consumerGroupListedAndDescribed() throws Exception {
    groupWithOneMember("consumer", GroupType.CONSUMER);
  }

  /** The older listConsumerGroups() (deprecated in 4.1 for listGroups), which tools before 4.1 call. */
  @Test
  @Order(12)
  @SuppressWarnings("deprecation")
  void listConsumerGroups() throws Exception {
    steps.require("group-classic", "group-consumer");
    Collection<ConsumerGroupListing> all = get(admin.listConsumerGroups().all());
    Map<String, ConsumerGroupListing> byId =
        all.stream().collect(Collectors.toMap(ConsumerGroupListing::groupId, g -> g, (a, b) -> a));
    for (var e : groups.entrySet()) {
      ConsumerGroupListing g = byId.get(e.getValue());
      assertNotNull(g, () -> e.getValue() + " not in " + byId.keySet());
      assertEquals(Optional.of(GroupState.EMPTY), g.groupState());
      assertEquals(Optional.of(e.getKey().equals("classic") ? GroupType.CLASSIC : GroupType.CONSUMER), g.type());
    }
  }

  Map<TopicPartition, Long> committed(String group) throws Exception {
    return get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()).entrySet().stream()
        .filter(e -> e.getValue() != null)
        .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()));
  }

  @Test
  @Order(13)
  void groupOffsetsListAlterDelete() throws Exception {
    for (var e : groups.entrySet()) {
      steps.require("group-" + e.getKey());
      String group = e.getValue();
      assertEquals(Map.of(p0, 4L, p1, 6L), committed(group), group);
      // kafka-consumer-groups --reset-offsets --execute.
      get(
          admin
              .alterConsumerGroupOffsets(
                  group, Map.of(p0, new OffsetAndMetadata(1, "reset"), p1, new OffsetAndMetadata(9)))
              .all());
      waitFor(() -> committed(group), c -> c.equals(Map.of(p0, 1L, p1, 9L)), group + " offsets altered");
      OffsetAndMetadata meta = get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()).get(p0);
      assertEquals("reset", meta.metadata(), "committed metadata");
      // kafka-consumer-groups --delete-offsets.
      get(admin.deleteConsumerGroupOffsets(group, Set.of(p1)).all());
      waitFor(() -> committed(group), c -> c.equals(Map.of(p0, 1L)), group + " offset of " + p1 + " deleted");
    }
    steps.ok("offsets");
  }

  @Test
  @Order(14)
  void deleteConsumerGroups() throws Exception {
    steps.require("offsets");
    get(admin.deleteConsumerGroups(List.copyOf(groups.values())).all());
    for (String group : groups.values()) {
      waitFor(
          () -> get(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all()),
          l -> l.stream().noneMatch(g -> g.groupId().equals(group)),
          group + " gone from listGroups");
      assertEquals(Map.of(), committed(group), group + " offsets");
      assertInstanceOf(
          GroupIdNotFoundException.class,
          failure(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)),
          group);
    }
    // Deleting it again: not found.
    String group = groups.get("classic");
    assertInstanceOf(GroupIdNotFoundException.class, failure(admin.deleteConsumerGroups(List.of(group)).all()));
  }
}
