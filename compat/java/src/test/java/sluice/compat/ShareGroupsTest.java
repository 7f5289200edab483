package sluice.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.function.Function;
import java.util.function.Supplier;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

/**
 * KIP-932 share groups ("queues") with the Java {@link KafkaShareConsumer} and Admin client.
 *
 * <p>Every test has its own topic and share group. A share group starts at the latest offset by
 * default, so each test first sets the group config {@code share.auto.offset.reset=earliest}
 * (incrementalAlterConfigs on a GROUP resource) and waits until DescribeConfigs shows it, then
 * produces. Records carry their sequence number in the value ({@code share-<run>-<seq>}).
 *
 * <ul>
 *   <li>{@code implicitAcknowledgement}: one consumer reads all 200 records of a 2-partition topic,
 *       each once, with delivery count 1; a marker produced afterwards arrives with nothing
 *       redelivered before it.
 *   <li>{@code explicitAcknowledgement}: ACCEPT, RELEASE and REJECT with commitSync: released
 *       records come back with delivery count 2, accepted and rejected ones never; a record
 *       released at every delivery is delivered 5 times (the default share.delivery.count.limit)
 *       and then no more.
 *   <li>{@code severalConsumersOnePartition}: 3 consumers on 1 partition share 300 records, every
 *       record to exactly one of them, each getting some.
 *   <li>{@code lockExpiry}: a consumer that acquired records and stops polling (without closing)
 *       loses them when the acquisition lock ({@code share.record.lock.duration.ms=15000}, Kafka's
 *       minimum) expires; a second consumer then gets them with delivery count 2, not before.
 *   <li>{@code adminListDescribeOffsets}: listGroups filtered to share groups (and not consumer
 *       groups), describeShareGroups (members, client ids, assignments, state, then empty), and
 *       listShareGroupOffsets (lag 0 once everything is acknowledged, 10 after 10 more records
 *       nobody reads; without a lag, the start offset at the first unacknowledged record); the
 *       group's configs as describeConfigs reports them are printed.
 * </ul>
 *
 * <p>The five scenarios run side by side (see "the tests" below). Each is bounded to 55 s, its
 * test to 60 s; nothing sleeps to synchronise: every wait polls a condition with a deadline.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(60)
class ShareGroupsTest {
  static final Duration CONSUME = Duration.ofSeconds(30); // reading what was produced
  static final Duration POLL = Duration.ofMillis(200);
  static final Duration COMMIT = Duration.ofSeconds(10);
  static final Duration ADMIN = Duration.ofSeconds(20);
  /** Kafka's group.share.min.record.lock.duration.ms: a group may not set a shorter lock. */
  static final int LOCK_MS = 15_000;
  /** Kafka's default share.delivery.count.limit (group.share.delivery.count.limit). */
  static final int DELIVERY_LIMIT = 5;

  /** One record as a share consumer received it. */
  record Delivery(String consumer, int partition, long offset, int seq, int deliveryCount, long atNanos) {
    String where() {
      return partition + "@" + offset;
    }

    @Override
    public String toString() {
      return "seq " + seq + " (" + where() + ", delivery " + deliveryCount + ", to " + consumer + ")";
    }
  }

  // ------------------------------------------------------------------------- fixture

  /** A topic of its own, a share group reading it from the earliest offset, and an Admin client. */
  static final class Fixture implements AutoCloseable {
    final String topic;
    final String group;
    final String run;
    final int partitions;
    final Admin admin;

    Fixture(String name, int partitions, Map<String, String> moreGroupConfigs) throws Exception {
      this.topic = Compat.uniqueTopic(name);
      this.run = Compat.runId(topic);
      this.group = "compat-" + name + "-" + run;
      this.partitions = partitions;
      this.admin = Admin.create(Compat.clientProps(topic, "share-admin"));
      try {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get(30, TimeUnit.SECONDS);
        Map<String, String> configs = new LinkedHashMap<>();
        configs.put("share.auto.offset.reset", "earliest");
        configs.putAll(moreGroupConfigs);
        setGroupConfigs(admin, group, configs);
      } catch (Exception | AssertionError e) {
        close();
        throw e;
      }
    }

    /** n records seq from..from+n-1, to partition seq % partitions; "p@offset" -> seq as the producer was told. */
    Map<String, Integer> produce(int from, int n) throws Exception {
      return produce(from, n, n);
    }

    /** The same, flushed every `batch` records (so that no batch holds more). */
    Map<String, Integer> produce(int from, int n, int batch) throws Exception {
      return produce(from, n, batch, null);
    }

    /** The same, all to `partition` when it is not null. */
    Map<String, Integer> produce(int from, int n, int batch, Integer partition) throws Exception {
      Properties props = Compat.clientProps(topic, "share-producer");
      props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
      props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
      Map<String, Integer> delivered = new TreeMap<>();
      try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props)) {
        for (int start = from; start < from + n; start += batch) {
          List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
          int end = Math.min(from + n, start + batch);
          for (int seq = start; seq < end; seq++) {
            sent.add(p.send(new ProducerRecord<>(topic, partition != null ? partition : seq % partitions, null, value(seq))));
          }
          p.flush();
          for (int i = 0; i < sent.size(); i++) {
            RecordMetadata md = sent.get(i).get(30, TimeUnit.SECONDS);
            delivered.put(md.partition() + "@" + md.offset(), start + i);
          }
        }
      }
      return delivered;
    }

    byte[] value(int seq) {
      return ("share-" + run + "-" + seq).getBytes(StandardCharsets.UTF_8);
    }

    /** A share consumer of the group, client.id compat-java-share-<role>-<run>. */
    KafkaShareConsumer<byte[], byte[]> consumer(String role, Map<String, String> extra) {
      Properties props = Compat.clientProps(topic, "share-" + role);
      props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
      props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
      props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
      props.putAll(extra);
      KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(props);
      c.subscribe(List.of(topic));
      return c;
    }

    String clientId(String role) {
      return "compat-java-share-" + role + "-" + run;
    }

    Delivery delivery(String consumer, ConsumerRecord<byte[], byte[]> r) {
      String v = r.value() == null ? "" : new String(r.value(), StandardCharsets.UTF_8);
      String prefix = "share-" + run + "-";
      int seq = -1;
      if (v.startsWith(prefix)) {
        try {
          seq = Integer.parseInt(v.substring(prefix.length()));
        } catch (NumberFormatException e) {
          // left at -1: reported as a foreign record
        }
      }
      int count = r.deliveryCount().map(Short::intValue).orElse(-1);
      return new Delivery(consumer, r.partition(), r.offset(), seq, count, System.nanoTime());
    }

    @Override
    public void close() {
      try {
        admin.deleteTopics(List.of(topic)).all().get(30, TimeUnit.SECONDS);
      } catch (Exception e) {
        System.out.println("could not delete " + topic + ": " + e); // (not to hide the test's own failure)
      }
      admin.close(Duration.ofSeconds(10));
    }
  }

  /** SET the group's configs, then wait until DescribeConfigs on the GROUP resource shows them. */
  static void setGroupConfigs(Admin admin, String group, Map<String, String> configs) throws Exception {
    ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
    List<AlterConfigOp> ops =
        configs.entrySet().stream()
            .map(e -> new AlterConfigOp(new ConfigEntry(e.getKey(), e.getValue()), AlterConfigOp.OpType.SET))
            .toList();
    admin.incrementalAlterConfigs(Map.of(res, ops)).all().get(30, TimeUnit.SECONDS);
    waitUntil(
        () -> {
          try {
            Config c = admin.describeConfigs(List.of(res)).all().get(30, TimeUnit.SECONDS).get(res);
            return configs.entrySet().stream()
                .allMatch(e -> c.get(e.getKey()) != null && e.getValue().equals(c.get(e.getKey()).value()));
          } catch (Exception e) {
            return false;
          }
        },
        ADMIN,
        () -> "describeConfigs of group " + group + " to show " + configs);
  }

  static void waitUntil(BooleanSupplier condition, Duration timeout, Supplier<String> what) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("timed out after " + timeout.toSeconds() + " s waiting for " + what.get());
      }
      Thread.sleep(100);
    }
  }

  /** Poll (implicit acknowledgement) until done() holds; every record received goes to `into`. */
  static void pollUntil(
      Fixture f, KafkaShareConsumer<byte[], byte[]> c, String name, List<Delivery> into, BooleanSupplier done, Duration timeout, Supplier<String> what) {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (!done.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("timed out after " + timeout.toSeconds() + " s waiting for " + what.get());
      }
      for (ConsumerRecord<byte[], byte[]> r : c.poll(POLL)) {
        into.add(f.delivery(name, r));
      }
    }
  }

  static Set<Integer> seqs(Collection<Delivery> ds) {
    return ds.stream().map(Delivery::seq).collect(Collectors.toCollection(TreeSet::new));
  }

  static String firstFew(Collection<?> items) {
    return items.stream().limit(5).map(String::valueOf).collect(Collectors.joining("; "));
  }

  /**
   * Every produced record delivered (same partition, offset and seq as the producer was told), no
   * record delivered twice, every delivery count 1, nothing that was not produced.
   */
  static void checkExactlyOnce(Map<String, Integer> produced, List<Delivery> got, Compat.Problems p) {
    Map<String, List<Delivery>> byWhere = new TreeMap<>();
    for (Delivery d : got) {
      byWhere.computeIfAbsent(d.where(), k -> new ArrayList<>()).add(d);
    }
    List<String> missing = produced.keySet().stream().filter(k -> !byWhere.containsKey(k)).toList();
    if (!missing.isEmpty()) {
      p.add("never delivered", missing.size() + " records, first at " + firstFew(missing));
    }
    byWhere.forEach(
        (where, ds) -> {
          Integer want = produced.get(where);
          if (want == null || ds.get(0).seq() != want) {
            p.add("not as produced", ds.get(0) + (want == null ? ": nothing was produced there" : ": seq " + want + " was produced there"));
          }
          if (ds.size() > 1) {
            p.add("delivered more than once", ds.size() + " deliveries: " + firstFew(ds));
          }
        });
    List<Delivery> notFirst = got.stream().filter(d -> d.deliveryCount() != 1).toList();
    if (!notFirst.isEmpty()) {
      p.add("delivery count not 1 (deliveryCount() empty shows as -1)", notFirst.size() + ", e.g. " + firstFew(notFirst));
    }
  }

  // ------------------------------------------------------------------------- the tests

  // The five scenarios run side by side, each on its own topic and group: they are started
  // together before the first test, and each test waits for its own and reports how it ended.
  // Kafka gives a new share consumer its assignment only at its second heartbeat (5 s), and a
  // lock cannot be shorter than 15 s, so one after the other they take about a minute, which
  // would push test_java.py's single Maven run (all Java test classes) past its 120 s bound.
  // -Dsluice.share.sequential=true runs each scenario inside its own test instead (for running
  // one with -Dtest=ShareGroupsTest#name; otherwise all five run whichever is selected).

  static final boolean SEQUENTIAL = Boolean.getBoolean("sluice.share.sequential");
  /** How long a scenario may take from its start (within the 60 s bound of its test). */
  static final Duration SCENARIO = Duration.ofSeconds(55);

  interface Scenario {
    void run() throws Exception;
  }

  private final Map<String, Scenario> scenarios = new LinkedHashMap<>();
  private final Map<String, Future<?>> running = new HashMap<>();
  private ExecutorService pool;
  private long startedAt;

  ShareGroupsTest() {
    scenarios.put("implicitAcknowledgement", this::implicitAcknowledgementScenario);
    scenarios.put("explicitAcknowledgement", this::explicitAcknowledgementScenario);
    scenarios.put("severalConsumersOnePartition", this::severalConsumersOnePartitionScenario);
    scenarios.put("lockExpiry", this::lockExpiryScenario);
    scenarios.put("adminListDescribeOffsets", this::adminListDescribeOffsetsScenario);
  }

  @BeforeAll
  void startScenarios() {
    if (SEQUENTIAL) {
      return;
    }
    pool =
        Executors.newFixedThreadPool(
            scenarios.size(),
            r -> {
              Thread t = new Thread(r);
              t.setDaemon(true);
              return t;
            });
    startedAt = System.nanoTime();
    scenarios.forEach(
        (name, scenario) ->
            running.put(
                name,
                pool.submit(
                    () -> {
                      Thread.currentThread().setName("share-" + name);
                      scenario.run();
                      return null;
                    })));
  }

  @AfterAll
  void stopScenarios() {
    if (pool != null) {
      pool.shutdownNow();
    }
  }

  /** The outcome of a scenario: returns if it passed, else throws what it threw. */
  void outcome(String name) throws Throwable {
    if (SEQUENTIAL) {
      scenarios.get(name).run();
      return;
    }
    Future<?> f = running.get(name);
    long left = startedAt + SCENARIO.toNanos() - System.nanoTime();
    try {
      f.get(Math.max(left, 0), TimeUnit.NANOSECONDS);
    } catch (ExecutionException e) {
      throw e.getCause();
    } catch (TimeoutException e) {
      f.cancel(true);
      throw new AssertionError(name + " did not finish within " + SCENARIO.toSeconds() + " s of its start");
    }
  }

  @Test
  void implicitAcknowledgement() throws Throwable {
    outcome("implicitAcknowledgement");
  }

  @Test
  void explicitAcknowledgement() throws Throwable {
    outcome("explicitAcknowledgement");
  }

  @Test
  void severalConsumersOnePartition() throws Throwable {
    outcome("severalConsumersOnePartition");
  }

  @Test
  void lockExpiry() throws Throwable {
    outcome("lockExpiry");
  }

  @Test
  void adminListDescribeOffsets() throws Throwable {
    outcome("adminListDescribeOffsets");
  }

  // ------------------------------------------------------------------------- the scenarios

  void implicitAcknowledgementScenario() throws Exception {
    final int n = 200;
    try (Fixture f = new Fixture("share-implicit", 2, Map.of())) {
      Map<String, Integer> produced = f.produce(0, n);
      List<Delivery> got = new ArrayList<>();
      try (KafkaShareConsumer<byte[], byte[]> c = f.consumer("implicit", Map.of())) {
        pollUntil(f, c, "implicit", got, () -> seqs(got).size() >= n, CONSUME, () -> n + " records (have " + seqs(got).size() + ")");
        // The records polled so far are acknowledged (ACCEPT) with the next poll. A marker
        // produced now must come with nothing delivered a second time before it.
        produced.putAll(f.produce(n, 1));
        pollUntil(f, c, "implicit", got, () -> seqs(got).contains(n), CONSUME, () -> "the marker record after the " + n);
      }
      Compat.Problems p = new Compat.Problems();
      checkExactlyOnce(produced, got, p);
      p.failIfAny("implicit acknowledgement, " + n + " records on 2 partitions");
      System.out.printf("share implicit: %d records, %d deliveries%n", produced.size(), got.size());
    }
  }

  void explicitAcknowledgementScenario() throws Exception {
    // seq 0: RELEASEd at every delivery; seq % 3 == 1: RELEASEd once, ACCEPTed when redelivered;
    // seq % 3 == 2: REJECTed; the others ACCEPTed.
    final int n = 30;
    try (Fixture f = new Fixture("share-explicit", 1, Map.of())) {
      Map<String, Integer> produced = f.produce(0, n);
      List<Delivery> got = new ArrayList<>();
      Compat.Problems p = new Compat.Problems();
      Map<Integer, List<Delivery>> bySeq = new TreeMap<>();
      Set<Integer> toRelease = new TreeSet<>();
      for (int seq = 1; seq < n; seq += 3) {
        toRelease.add(seq);
      }
      int commits = 0;
      try (KafkaShareConsumer<byte[], byte[]> c = f.consumer("explicit", Map.of(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit"))) {
        BooleanSupplier allDone =
            () ->
                bySeq.keySet().containsAll(produced.values())
                    && toRelease.stream().allMatch(s -> bySeq.get(s).size() >= 2)
                    && bySeq.get(0).size() >= DELIVERY_LIMIT;
        BooleanSupplier markerSeen = () -> bySeq.containsKey(n);
        boolean markerSent = false;
        long deadline = System.nanoTime() + CONSUME.toNanos();
        while (!markerSeen.getAsBoolean()) {
          if (System.nanoTime() > deadline) {
            throw new AssertionError(
                "timed out after " + CONSUME.toSeconds() + " s; deliveries by seq: "
                    + bySeq.entrySet().stream().map(e -> e.getKey() + "x" + e.getValue().size()).collect(Collectors.joining(" ")));
          }
          if (!markerSent && allDone.getAsBoolean()) {
            // Everything is acknowledged or archived: nothing may come before this marker.
            produced.putAll(f.produce(n, 1));
            markerSent = true;
          }
          boolean any = false;
          for (ConsumerRecord<byte[], byte[]> r : c.poll(POLL)) {
            any = true;
            Delivery d = f.delivery("explicit", r);
            got.add(d);
            List<Delivery> earlier = bySeq.computeIfAbsent(d.seq(), k -> new ArrayList<>());
            int nth = earlier.size() + 1;
            earlier.add(d);
            if (d.deliveryCount() != nth) {
              p.add("delivery count", d + ": expected " + nth + " (this is its delivery number " + nth + ")");
            }
            AcknowledgeType ack;
            if (d.seq() == 0) {
              ack = AcknowledgeType.RELEASE;
              if (nth > DELIVERY_LIMIT) {
                p.add("delivered past share.delivery.count.limit " + DELIVERY_LIMIT, d.toString());
              }
            } else if (d.seq() % 3 == 1 && toRelease.contains(d.seq())) {
              ack = nth == 1 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
              if (nth > 2) {
                p.add("accepted record redelivered", d.toString());
              }
            } else if (d.seq() % 3 == 2) {
              ack = AcknowledgeType.REJECT;
              if (nth > 1) {
                p.add("rejected record redelivered", d.toString());
              }
            } else {
              ack = AcknowledgeType.ACCEPT;
              if (nth > 1) {
                p.add("accepted record redelivered", d.toString());
              }
            }
            if (markerSent && d.seq() != n) {
              p.add("delivered after everything was acknowledged or archived", d.toString());
            }
            c.acknowledge(r, ack);
          }
          if (any) {
            Map<TopicIdPartition, Optional<KafkaException>> result = c.commitSync(COMMIT);
            commits++;
            result.forEach(
                (tp, e) -> e.ifPresent(ex -> p.add("commitSync", tp + ": " + ex)));
            if (result.isEmpty()) {
              p.add("commitSync", "returned no partitions after acknowledging records");
            }
          }
        }
      }
      List<Integer> never = produced.values().stream().filter(s -> !bySeq.containsKey(s)).toList();
      if (!never.isEmpty()) {
        p.add("never delivered", firstFew(never));
      }
      p.failIfAny("explicit acknowledgement");
      System.out.printf(
          "share explicit: %d records, %d deliveries, %d commits; seq 0 delivered %d times%n",
          produced.size(), got.size(), commits, bySeq.get(0).size());
    }
  }

  void severalConsumersOnePartitionScenario() throws Exception {
    final int n = 300;
    final int members = 3;
    final int batch = 10;
    try (Fixture f = new Fixture("share-several", 1, Map.of())) {
      List<Delivery> got = new ArrayList<>(); // (guarded by itself)
      List<Thread> threads = new ArrayList<>();
      List<Throwable> errors = new ArrayList<>();
      Map<String, Integer> produced = new TreeMap<>();
      AtomicBoolean stop = new AtomicBoolean();
      try {
        for (int i = 0; i < members; i++) {
          String name = "several" + i;
          Thread t =
              new Thread(
                  () -> {
                    try (KafkaShareConsumer<byte[], byte[]> c =
                        f.consumer(name, Map.of(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(batch)))) {
                      while (!stop.get()) {
                        for (ConsumerRecord<byte[], byte[]> r : c.poll(POLL)) {
                          Delivery d = f.delivery(name, r);
                          synchronized (got) {
                            got.add(d);
                          }
                        }
                      }
                    } catch (Throwable e) {
                      synchronized (errors) {
                        errors.add(e);
                      }
                    }
                  },
                  "share-" + name);
          t.setDaemon(true);
          t.start();
          threads.add(t);
        }
        // Produce 10 records at a time, each round once the previous one was consumed, until
        // every consumer has received some (or all 300 are produced); then the rest.
        Supplier<Map<String, Long>> perConsumer =
            () -> {
              synchronized (got) {
                return got.stream().collect(Collectors.groupingBy(Delivery::consumer, TreeMap::new, Collectors.counting()));
              }
            };
        Supplier<Integer> distinct =
            () -> {
              synchronized (got) {
                return seqs(got).size();
              }
            };
        long deadline = System.nanoTime() + Duration.ofSeconds(45).toNanos();
        for (int from = 0; from < n; from += batch) {
          produced.putAll(f.produce(from, batch));
          int want = from + batch;
          while (distinct.get() < want) {
            synchronized (errors) {
              if (!errors.isEmpty()) {
                throw new AssertionError("a consumer failed: " + errors.get(0), errors.get(0));
              }
            }
            if (System.nanoTime() > deadline) {
              throw new AssertionError(
                  "timed out waiting for " + want + " of " + n + " records (have " + distinct.get() + ", per consumer " + perConsumer.get() + ")");
            }
            Thread.sleep(20);
          }
        }
        stop.set(true);
        for (Thread t : threads) {
          t.join(30_000);
          assertFalse(t.isAlive(), t.getName() + " did not close within 30 s");
        }
        synchronized (errors) {
          if (!errors.isEmpty()) {
            throw new AssertionError("a consumer failed: " + errors.get(0), errors.get(0));
          }
        }
        Compat.Problems p = new Compat.Problems();
        List<Delivery> all;
        synchronized (got) {
          all = new ArrayList<>(got);
        }
        checkExactlyOnce(produced, all, p);
        Map<String, Long> counts = perConsumer.get();
        for (int i = 0; i < members; i++) {
          if (counts.getOrDefault("several" + i, 0L) == 0) {
            p.add("a consumer got nothing", "several" + i + " (per consumer: " + counts + ")");
          }
        }
        p.failIfAny(members + " share consumers on 1 partition");
        System.out.printf("share several: %d records on 1 partition, per consumer %s%n", n, counts);
      } finally {
        stop.set(true);
        for (Thread t : threads) {
          t.join(30_000);
        }
      }
    }
  }

  void lockExpiryScenario() throws Exception {
    final int n = 20;
    try (Fixture f = new Fixture("share-lock", 1, Map.of("share.record.lock.duration.ms", Integer.toString(LOCK_MS)))) {
      Map<String, Integer> produced = f.produce(0, n);
      Compat.Problems p = new Compat.Problems();
      List<Delivery> first = new ArrayList<>();
      List<Delivery> second = new ArrayList<>();
      // The first consumer acknowledges nothing (explicit mode) and stops polling without closing:
      // a stuck application. It stays a member (heartbeats go on in the client's background thread).
      KafkaShareConsumer<byte[], byte[]> stuck = f.consumer("stuck", Map.of(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit"));
      try {
        long beforePoll = System.nanoTime();
        long deadline = beforePoll + CONSUME.toNanos();
        while (first.isEmpty()) {
          if (System.nanoTime() > deadline) {
            throw new AssertionError("the first consumer got nothing within " + CONSUME.toSeconds() + " s");
          }
          beforePoll = System.nanoTime();
          for (ConsumerRecord<byte[], byte[]> r : stuck.poll(POLL)) {
            first.add(f.delivery("stuck", r));
          }
        }
        final long acquiredAfter = beforePoll;
        assertEquals(
            Optional.of(LOCK_MS), stuck.acquisitionLockTimeoutMs(), "the acquisition lock timeout the broker reported (ShareFetch AcquisitionLockTimeoutMs)");
        Set<Integer> locked = seqs(first);
        try (KafkaShareConsumer<byte[], byte[]> c = f.consumer("after", Map.of())) {
          pollUntil(
              f, c, "after", second, () -> seqs(second).containsAll(produced.values()), Duration.ofMillis(LOCK_MS).plus(CONSUME),
              () -> "the second consumer to receive all " + n + " records (has " + seqs(second) + "; the first holds " + locked + ")");
          for (Delivery d : second) {
            double afterS = (d.atNanos() - acquiredAfter) / 1e9;
            if (locked.contains(d.seq())) {
              if (d.deliveryCount() != 2) {
                p.add("redelivery after lock expiry: delivery count not 2", d.toString());
              }
              if (afterS < (LOCK_MS - 1000) / 1000.0) {
                p.add("delivered while locked", String.format("%s %.1f s after the first consumer acquired it, lock %d ms", d, afterS, LOCK_MS));
              }
            } else if (d.deliveryCount() != 1) {
              p.add("delivery count not 1 for a record the first consumer never got", d.toString());
            }
          }
          Map<Integer, Long> times = second.stream().collect(Collectors.groupingBy(Delivery::seq, Collectors.counting()));
          times.forEach(
              (seq, k) -> {
                if (k > 1) {
                  p.add("delivered twice to the second consumer", "seq " + seq);
                }
              });
          System.out.printf(
              "share lock: first consumer held %d of %d records; second got them %.1f s after, lock %d ms%n",
              locked.size(), n,
              second.stream().filter(d -> locked.contains(d.seq())).mapToLong(Delivery::atNanos).min().orElse(acquiredAfter) / 1e9 - acquiredAfter / 1e9,
              LOCK_MS);
        }
      } finally {
        stuck.close(Duration.ofSeconds(10));
      }
      p.failIfAny("acquisition lock expiry");
    }
  }

  void adminListDescribeOffsetsScenario() throws Exception {
    final int n = 100;
    try (Fixture f = new Fixture("share-admin", 2, Map.of())) {
      Map<String, Integer> produced = f.produce(0, n);
      TreeMap<TopicPartition, Long> ends = new TreeMap<>((x, y) -> Integer.compare(x.partition(), y.partition()));
      produced.keySet().forEach(k -> {
        String[] po = k.split("@");
        ends.merge(new TopicPartition(f.topic, Integer.parseInt(po[0])), Long.parseLong(po[1]) + 1, Math::max);
      });
      assertEquals(2, ends.size(), "records in both partitions");
      List<Delivery> got = new ArrayList<>();
      try (KafkaShareConsumer<byte[], byte[]> a = f.consumer("a", Map.of());
          KafkaShareConsumer<byte[], byte[]> b = f.consumer("b", Map.of())) {
        // Both members poll (from this thread, in turn) until all records arrived.
        long deadline = System.nanoTime() + CONSUME.toNanos();
        while (seqs(got).size() < n) {
          if (System.nanoTime() > deadline) {
            throw new AssertionError("timed out reading " + n + " records (have " + seqs(got).size() + ")");
          }
          for (ConsumerRecord<byte[], byte[]> r : a.poll(POLL)) {
            got.add(f.delivery("a", r));
          }
          for (ConsumerRecord<byte[], byte[]> r : b.poll(POLL)) {
            got.add(f.delivery("b", r));
          }
        }
        // Send the implicit acknowledgements of the last records polled.
        checkCommitted("a", a.commitSync(COMMIT));
        checkCommitted("b", b.commitSync(COMMIT));

        // listGroups, filtered to share groups: the group, as a SHARE group.
        waitUntil(
            () -> listed(f.admin, ListGroupsOptions.forShareGroups()).containsKey(f.group),
            ADMIN,
            () -> f.group + " in listGroups(forShareGroups()) (listed: " + listedOrError(f.admin, ListGroupsOptions.forShareGroups()) + ")");
        GroupListing listing = listed(f.admin, ListGroupsOptions.forShareGroups()).get(f.group);
        assertEquals(Optional.of(GroupType.SHARE), listing.type(), "type of " + listing);
        assertEquals(Optional.of(GroupState.STABLE), listing.groupState(), "state of " + listing);
        Map<String, GroupListing> all = listed(f.admin, new ListGroupsOptions());
        assertEquals(Optional.of(GroupType.SHARE), all.containsKey(f.group) ? all.get(f.group).type() : null, "type in the unfiltered listGroups(): " + all.get(f.group));
        Map<String, GroupListing> consumerGroups = listed(f.admin, ListGroupsOptions.forConsumerGroups());
        assertFalse(consumerGroups.containsKey(f.group), "listGroups(forConsumerGroups()) lists the share group: " + consumerGroups.get(f.group));

        // describeShareGroups: two members (a, b) whose assignments cover both partitions.
        Set<TopicPartition> partitions = ends.keySet();
        Set<String> clientIds = Set.of(f.clientId("a"), f.clientId("b"));
        AtomicReference<ShareGroupDescription> desc = new AtomicReference<>();
        waitUntil(
            () -> {
              ShareGroupDescription now = describe(f.admin, f.group);
              desc.set(now);
              if (now == null || now.members().size() != 2) {
                return false;
              }
              Set<TopicPartition> union = new HashSet<>();
              for (ShareMemberDescription m : now.members()) {
                if (m.assignment().topicPartitions().isEmpty()) {
                  return false;
                }
                union.addAll(m.assignment().topicPartitions());
              }
              return union.equals(partitions);
            },
            ADMIN,
            () -> "describeShareGroups to show 2 members whose assignments cover " + partitions + " (got " + desc.get() + ")");
        ShareGroupDescription d = desc.get();
        assertEquals(f.group, d.groupId());
        assertEquals(GroupState.STABLE, d.groupState(), "group state: " + d);
        assertNotNull(d.coordinator(), "coordinator: " + d);
        assertTrue(d.groupEpoch() > 0, "group epoch > 0: " + d);
        assertEquals(d.groupEpoch(), d.targetAssignmentEpoch(), "target assignment epoch = group epoch once settled: " + d);
        assertEquals(clientIds, d.members().stream().map(ShareMemberDescription::clientId).collect(Collectors.toSet()), "members' client ids: " + d);
        for (ShareMemberDescription m : d.members()) {
          assertFalse(m.consumerId() == null || m.consumerId().isEmpty(), "member id: " + m);
          assertTrue(m.memberEpoch() > 0, "member epoch > 0: " + m);
          assertTrue(partitions.containsAll(m.assignment().topicPartitions()), "assignment within the topic: " + m);
        }
        assertEquals(2, d.members().stream().map(ShareMemberDescription::consumerId).distinct().count(), "distinct member ids: " + d);
        System.out.println("share admin: describeShareGroups: " + d);

        // listShareGroupOffsets: once everything is acknowledged, every partition's lag is 0 (or,
        // without a lag, its start offset is its end offset). Then 10 more records to partition 0,
        // which nobody polls: its lag becomes 10 (or its start offset stays), partition 1's stays 0.
        waitForShareOffsets(f, ends, Map.of());
        Map<String, Integer> more = f.produce(n, 10, 10, 0);
        Map<TopicPartition, Long> endsNow = new TreeMap<>(ends.comparator());
        endsNow.putAll(ends);
        more.keySet().forEach(k -> endsNow.merge(new TopicPartition(f.topic, 0), Long.parseLong(k.split("@")[1]) + 1, Math::max));
        Map<TopicPartition, SharePartitionOffsetInfo> withLag =
            waitForShareOffsets(f, endsNow, Map.of(new TopicPartition(f.topic, 0), 10L));
        System.out.println("share admin: listShareGroupOffsets: " + withLag);
      }
      Compat.Problems p = new Compat.Problems();
      checkExactlyOnce(produced, got, p);
      p.failIfAny("records read by the two members");

      // Both members closed: the group is still listed and described, empty.
      AtomicReference<ShareGroupDescription> empty = new AtomicReference<>();
      waitUntil(
          () -> {
            ShareGroupDescription now = describe(f.admin, f.group);
            empty.set(now);
            return now != null && now.members().isEmpty() && now.groupState() == GroupState.EMPTY;
          },
          ADMIN,
          () -> "describeShareGroups to show the group EMPTY with no members after both closed (got " + empty.get() + ")");
      GroupListing listing = listed(f.admin, ListGroupsOptions.forShareGroups()).get(f.group);
      assertNotNull(listing, "the empty share group in listGroups(forShareGroups())");
      assertEquals(Optional.of(GroupState.EMPTY), listing.groupState(), "state of " + listing);
      // The offsets stay (the records the members never acknowledged were released at close).
      Map<TopicPartition, Long> endsNow = new TreeMap<>(ends.comparator());
      endsNow.putAll(ends);
      endsNow.merge(new TopicPartition(f.topic, 0), 10L, Long::sum);
      waitForShareOffsets(f, endsNow, Map.of(new TopicPartition(f.topic, 0), 10L));

      // The group's configs as DescribeConfigs reports them (printed: the names and defaults).
      ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, f.group);
      Config config = f.admin.describeConfigs(List.of(res)).all().get(30, TimeUnit.SECONDS).get(res);
      ConfigEntry reset = config.get("share.auto.offset.reset");
      assertNotNull(reset, "share.auto.offset.reset described: " + config);
      assertEquals("earliest", reset.value());
      assertEquals(ConfigEntry.ConfigSource.DYNAMIC_GROUP_CONFIG, reset.source(), "source of " + reset);
      System.out.println("share admin: describeConfigs(GROUP " + f.group + "):");
      config.entries().stream()
          .sorted((x, y) -> x.name().compareTo(y.name()))
          .forEach(e -> System.out.printf("  %s=%s (%s)%n", e.name(), e.value(), e.source()));
    }
  }

  /**
   * Wait until listShareGroupOffsets reports exactly the partitions of `ends` (log end offsets),
   * each with the given number of records not yet acknowledged at its end (`unacked`, 0 where not
   * given): with a lag (DescribeShareGroupOffsets v1+, KIP-1226) that lag, and a start offset from 0
   * to the first unacknowledged offset (Kafka 4.3.1 reports 0 after everything was acknowledged:
   * its persisted start offset moves later); without a lag (v0, or -1) exactly the first
   * unacknowledged offset, the share-partition start offset. Returns what it reported.
   */
  static Map<TopicPartition, SharePartitionOffsetInfo> waitForShareOffsets(
      Fixture f, Map<TopicPartition, Long> ends, Map<TopicPartition, Long> unacked) throws InterruptedException {
    AtomicReference<Map<TopicPartition, SharePartitionOffsetInfo>> seen = new AtomicReference<>();
    waitUntil(
        () -> {
          Map<TopicPartition, SharePartitionOffsetInfo> got = shareOffsets(f.admin, f.group);
          seen.set(got);
          if (got == null || !got.keySet().equals(ends.keySet())) {
            return false;
          }
          return ends.entrySet().stream()
              .allMatch(
                  e -> {
                    SharePartitionOffsetInfo info = got.get(e.getKey());
                    long open = unacked.getOrDefault(e.getKey(), 0L);
                    long firstUnacked = e.getValue() - open;
                    if (info == null) {
                      return false;
                    }
                    return info.lag().isPresent()
                        ? info.lag().get() == open && info.startOffset() >= 0 && info.startOffset() <= firstUnacked
                        : info.startOffset() == firstUnacked;
                  });
        },
        ADMIN,
        () -> "listShareGroupOffsets to show " + ends.keySet() + " with end offsets " + ends.values() + " and "
            + ends.keySet().stream().map(tp -> unacked.getOrDefault(tp, 0L)).toList()
            + " records unacknowledged at the end (as the lag, with a start offset up to the first unacknowledged one;"
            + " or, without a lag, as the exact start offset) (got " + seen.get() + ")");
    return seen.get();
  }

  static void checkCommitted(String who, Map<TopicIdPartition, Optional<KafkaException>> result) {
    result.forEach((tp, e) -> assertTrue(e.isEmpty(), who + ": commitSync failed for " + tp + ": " + e));
  }

  static Map<String, GroupListing> listed(Admin admin, ListGroupsOptions options) {
    try {
      return admin.listGroups(options).all().get(30, TimeUnit.SECONDS).stream()
          .collect(Collectors.toMap(GroupListing::groupId, Function.identity(), (x, y) -> x));
    } catch (Exception e) {
      return Map.of();
    }
  }

  static String listedOrError(Admin admin, ListGroupsOptions options) {
    try {
      return String.valueOf(admin.listGroups(options).all().get(30, TimeUnit.SECONDS));
    } catch (Exception e) {
      return "failed: " + e;
    }
  }

  static ShareGroupDescription describe(Admin admin, String group) {
    try {
      return admin.describeShareGroups(List.of(group)).describedGroups().get(group).get(30, TimeUnit.SECONDS);
    } catch (Exception e) {
      System.out.println("describeShareGroups(" + group + "): " + e);
      return null;
    }
  }

  static Map<TopicPartition, SharePartitionOffsetInfo> shareOffsets(Admin admin, String group) {
    try {
      KafkaFuture<Map<TopicPartition, SharePartitionOffsetInfo>> f =
          admin.listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(group);
      Map<TopicPartition, SharePartitionOffsetInfo> m = f.get(30, TimeUnit.SECONDS);
      return m == null ? null : new HashMap<>(m);
    } catch (Exception e) {
      System.out.println("listShareGroupOffsets(" + group + "): " + e);
      return null;
    }
  }
}
