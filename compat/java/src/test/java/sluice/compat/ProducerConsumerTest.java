package sluice.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static sluice.compat.Compat.ADMIN_TIMEOUT;
import static sluice.compat.Compat.N_RECORDS;
import static sluice.compat.Compat.PARTITIONS;
import static sluice.compat.Compat.READ_TIMEOUT;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;
import sluice.compat.Compat.Got;
import sluice.compat.Compat.Rec;
import sluice.compat.Compat.Steps;

/**
 * The official Java client with its defaults (acks=all, enable.idempotence=true): create a
 * 3-partition topic, produce 10,000 keyed records with headers and explicit timestamps, read them
 * all back from the earliest offset without a consumer group (assign + seekToBeginning), check
 * beginning/end offsets and offsetsForTimes, delete the topic. Then the same with each compression
 * codec, which the broker must store and serve as the producer sent them.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class ProducerConsumerTest {
  private final String topic = Compat.uniqueTopic("java");
  private final Steps steps = new Steps();
  private final Admin admin = Admin.create(Compat.clientProps(topic, "admin"));
  private List<Rec> records;
  private final Map<Integer, long[]> delivered = new ConcurrentHashMap<>();
  private List<Got> got;

  @AfterAll
  void closeAdmin() {
    admin.close(Duration.ofSeconds(10));
  }

  private List<TopicPartition> partitions(String t) {
    return IntStream.range(0, PARTITIONS).mapToObj(p -> new TopicPartition(t, p)).toList();
  }

  static KafkaProducer<byte[], byte[]> producer(String topic, String role, Map<String, String> overrides) {
    Properties props = Compat.clientProps(topic, role);
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    props.putAll(overrides);
    return new KafkaProducer<>(props);
  }

  /** A consumer without group.id: it can only assign partitions and seek, never commit. */
  static KafkaConsumer<byte[], byte[]> consumer(String topic) {
    Properties props = Compat.clientProps(topic, "consumer");
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    return new KafkaConsumer<>(props);
  }

  void createTopic(String t) throws Exception {
    admin.createTopics(List.of(new NewTopic(t, PARTITIONS, (short) 1))).all().get(30, TimeUnit.SECONDS);
  }

  void deleteTopic(String t) throws Exception {
    admin.deleteTopics(List.of(t)).all().get(30, TimeUnit.SECONDS);
    Compat.waitUntil(
        () -> {
          try {
            return !admin.listTopics().names().get(30, TimeUnit.SECONDS).contains(t);
          } catch (Exception e) {
            throw new RuntimeException(e);
          }
        },
        ADMIN_TIMEOUT,
        t + " to leave metadata");
  }

  /** Produce records, remembering where each landed; fails on any send error. */
  static void produce(KafkaProducer<byte[], byte[]> producer, String t, List<Rec> recs, Map<Integer, long[]> delivered) {
    List<String> errors = new ArrayList<>();
    for (Rec r : recs) {
      producer.send(
          new ProducerRecord<>(t, null, r.timestampMs(), r.key(), r.value(), r.headers()),
          (md, e) -> {
            if (e != null) {
              synchronized (errors) {
                errors.add("seq " + r.seq() + ": " + e);
              }
            } else {
              delivered.put(r.seq(), new long[] {md.partition(), md.offset()});
            }
          });
    }
    producer.flush();
    assertTrue(errors.isEmpty(), () -> errors.size() + " send errors, e.g. " + errors.subList(0, Math.min(3, errors.size())));
    assertEquals(recs.size(), recs.stream().filter(r -> delivered.containsKey(r.seq())).count(), "delivery reports");
  }

  /** Read every partition of t from its beginning to its end offset. */
  static List<Got> readAll(String t) {
    try (KafkaConsumer<byte[], byte[]> c = consumer(t)) {
      List<TopicPartition> tps = IntStream.range(0, PARTITIONS).mapToObj(p -> new TopicPartition(t, p)).toList();
      c.assign(tps);
      c.seekToBeginning(tps);
      Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
      List<Got> got = new ArrayList<>();
      long deadline = System.nanoTime() + READ_TIMEOUT.toNanos();
      while (tps.stream().anyMatch(tp -> c.position(tp, Duration.ofSeconds(30)) < end.get(tp))) {
        assertTrue(System.nanoTime() < deadline, () -> "read " + got.size() + " records; end offsets " + end);
        for (ConsumerRecord<byte[], byte[]> m : c.poll(Duration.ofMillis(500))) {
          List<Header> headers = new ArrayList<>();
          m.headers().forEach(headers::add);
          got.add(new Got(m.partition(), m.offset(), m.key(), m.value(), headers, m.timestamp(), m.timestampType()));
        }
      }
      return got;
    }
  }

  @Test
  @Order(1)
  void createTopic() throws Exception {
    createTopic(topic);
    steps.ok("create");
  }

  @Test
  @Order(2)
  void produceWithDefaults() {
    steps.require("create");
    records = Compat.makeRecords("java", System.currentTimeMillis() - 3_600_000L, N_RECORDS);
    try (KafkaProducer<byte[], byte[]> p = producer(topic, "producer", Map.of())) {
      produce(p, topic, records, delivered);
    }
    steps.ok("produce");
  }

  @Test
  @Order(3)
  void readBackFromEarliest() {
    steps.require("produce");
    got = readAll(topic);
    Compat.checkReadBack(records, got, delivered);
    steps.ok("read");
  }

  @Test
  @Order(4)
  void beginningAndEndOffsets() {
    steps.require("read");
    Map<Integer, List<Got>> parts = Compat.byPartition(got);
    try (KafkaConsumer<byte[], byte[]> c = consumer(topic)) {
      List<TopicPartition> tps = partitions(topic);
      Map<TopicPartition, Long> begin = c.beginningOffsets(tps, Duration.ofSeconds(30));
      Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
      for (TopicPartition tp : tps) {
        assertEquals(0L, begin.get(tp), "beginning offset of " + tp);
        assertEquals((long) parts.getOrDefault(tp.partition(), List.of()).size(), end.get(tp), "end offset of " + tp);
      }
    }
  }

  @Test
  @Order(5)
  void offsetsForTimes() {
    steps.require("read");
    try (KafkaConsumer<byte[], byte[]> c = consumer(topic)) {
      for (Map.Entry<String, Long> lookup : Compat.offsetLookups(got).entrySet()) {
        long ts = lookup.getValue();
        Map<TopicPartition, Long> query = new HashMap<>();
        partitions(topic).forEach(tp -> query.put(tp, ts));
        Map<TopicPartition, OffsetAndTimestamp> answer = c.offsetsForTimes(query, Duration.ofSeconds(30));
        for (TopicPartition tp : partitions(topic)) {
          Long want = Compat.expectedOffsetForTime(got, tp.partition(), ts);
          OffsetAndTimestamp found = answer.get(tp);
          String what = lookup.getKey() + " (ts " + ts + ") " + tp;
          assertEquals(want, found == null ? null : found.offset(), what);
          if (found != null) {
            long offset = found.offset();
            long wantTs = got.stream().filter(g -> g.partition() == tp.partition() && g.offset() == offset).findFirst().orElseThrow().timestampMs();
            assertEquals(wantTs, found.timestamp(), "timestamp returned for " + what);
          }
        }
      }
    }
  }

  @Test
  @Order(6)
  void deleteTopic() throws Exception {
    steps.require("create");
    deleteTopic(topic);
  }

  @Test
  @Order(7)
  void compressedBatches() throws Exception {
    String t = Compat.uniqueTopic("java-compressed");
    createTopic(t);
    List<Rec> all = Compat.makeRecords("java", System.currentTimeMillis() - 3_600_000L, 4000);
    Map<Integer, long[]> where = new ConcurrentHashMap<>();
    String[] codecs = {"gzip", "snappy", "lz4", "zstd"};
    for (int i = 0; i < codecs.length; i++) {
      try (KafkaProducer<byte[], byte[]> p = producer(t, "producer-" + codecs[i], Map.of(ProducerConfig.COMPRESSION_TYPE_CONFIG, codecs[i]))) {
        produce(p, t, all.subList(i * 1000, (i + 1) * 1000), where);
      }
    }
    Compat.checkReadBack(all, readAll(t), where);
    deleteTopic(t);
  }
}
