package sluice.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;

/**
 * Consumer groups with the Java KafkaConsumer, once with the classic protocol (JoinGroup/SyncGroup,
 * the client's default range assignor) and once with the KIP-848 consumer protocol
 * ({@code group.protocol=consumer}, ConsumerGroupHeartbeat, assignment by the broker).
 *
 * <p>Three consumers subscribe to a 6-partition topic in one group: their assignments must be
 * disjoint, balanced and cover all 6 partitions. A producer sends continuously; each consumer
 * commits synchronously after every batch it processed. Then one consumer processes records for
 * one more second without committing them and closes (it leaves the group); the other two must
 * own all 6 partitions well within the session timeout. At the end: every record the producer was
 * told was written was processed by some consumer; a record was processed again only if no commit
 * past it had completed (duplicates come only from the uncommitted tail); the new owners of the
 * leaver's partitions started exactly at its last committed offsets; and the group's committed
 * offsets are the last ones committed.
 */
class ConsumerGroupsTest {
  static final int PARTITIONS = 6;
  static final int MEMBERS = 3;
  static final int RATE = 300; // records per second
  static final Duration SETTLE = Duration.ofSeconds(30);
  static final Duration TAKEOVER = Duration.ofSeconds(30); // well below the 45 s session timeout
  static final Duration DRAIN = Duration.ofSeconds(30);
  static final Duration CLOSE = Duration.ofSeconds(30);
  static final Duration TAIL = Duration.ofSeconds(10);

  @Test
  void classicProtocolTakeover() throws Exception {
    takeover("classic");
  }

  @Test
  void consumerProtocolTakeover() throws Exception {
    takeover("consumer");
  }

  // ------------------------------------------------------------------------- recording

  record Processed(long t, String member, int partition, long offset, String value) {}

  record Commit(long t, String member, int partition, long offset) {}

  /** What the members did, with times (System.nanoTime()). */
  static final class Recorder {
    final List<Processed> processed = new ArrayList<>();
    final List<Commit> commits = new ArrayList<>();
    final List<String> commitErrors = new ArrayList<>();

    synchronized void process(String member, List<Processed> batch) {
      processed.addAll(batch);
    }

    synchronized void committed(String member, Map<TopicPartition, OffsetAndMetadata> offsets) {
      long t = System.nanoTime();
      offsets.forEach((tp, om) -> commits.add(new Commit(t, member, tp.partition(), om.offset())));
    }

    synchronized void commitFailed(String member, Exception e) {
      commitErrors.add(member + ": " + e);
    }

    synchronized long commitsBy(String member) {
      return commits.stream().filter(c -> c.member().equals(member)).count();
    }

    synchronized Set<String> processedKeys() {
      return processed.stream().map(p -> p.partition() + "@" + p.offset()).collect(Collectors.toSet());
    }
  }

  /** One consumer in a thread of its own: poll, process, commitSync what it processed. */
  static final class Member {
    final String name;
    final Properties props;
    final String topic;
    final Recorder rec;
    volatile Set<Integer> assignment;
    volatile boolean stop;
    volatile boolean leaveTail;
    volatile Throwable error;
    volatile long closedAt;
    volatile int tailSize;
    final CountDownLatch closed = new CountDownLatch(1);
    final Thread thread;

    Member(String name, Properties props, String topic, Recorder rec) {
      this.name = name;
      this.props = props;
      this.topic = topic;
      this.rec = rec;
      this.thread = new Thread(this::run, "member-" + name);
      this.thread.setDaemon(true);
      this.thread.start();
    }

    private List<Processed> process(ConsumerRecords<byte[], byte[]> records) {
      long t = System.nanoTime();
      List<Processed> batch = new ArrayList<>();
      for (ConsumerRecord<byte[], byte[]> r : records) {
        String value = r.value() == null ? null : new String(r.value(), StandardCharsets.UTF_8);
        batch.add(new Processed(t, name, r.partition(), r.offset(), value));
      }
      rec.process(name, batch);
      return batch;
    }

    private void run() {
      try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
        c.subscribe(List.of(topic));
        while (!stop) {
          ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(500));
          assignment = c.assignment().stream().map(TopicPartition::partition).collect(Collectors.toUnmodifiableSet());
          if (records.isEmpty()) {
            continue;
          }
          Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
          for (Processed p : process(records)) {
            offsets.merge(
                new TopicPartition(topic, p.partition()),
                new OffsetAndMetadata(p.offset() + 1),
                (a, b) -> a.offset() >= b.offset() ? a : b);
          }
          try {
            c.commitSync(offsets, Duration.ofSeconds(15));
            rec.committed(name, offsets);
          } catch (org.apache.kafka.common.KafkaException e) {
            rec.commitFailed(name, e); // e.g. a rebalance: these offsets stay uncommitted
          }
        }
        if (leaveTail) {
          // Process for a second more without committing (longer if nothing comes).
          long started = System.nanoTime();
          long deadline = started + TAIL.toNanos();
          while (System.nanoTime() < deadline && (tailSize == 0 || System.nanoTime() - started < 1_000_000_000L)) {
            ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(500));
            if (!records.isEmpty()) {
              tailSize += process(records).size();
            }
          }
        }
      } catch (Throwable t) {
        error = t;
      } finally {
        closedAt = System.nanoTime();
        closed.countDown();
      }
    }

    void stop(boolean tail) {
      leaveTail = tail;
      stop = true;
    }

    void waitClosed() throws InterruptedException {
      assertTrue(closed.await(CLOSE.toSeconds(), TimeUnit.SECONDS), "member " + name + " did not close within " + CLOSE);
      thread.join(5000);
      if (error != null) {
        throw new AssertionError("member " + name + " failed: " + error, error);
      }
    }
  }

  /** Produces continuously to every partition in turn; remembers where each record landed. */
  static final class Feeder {
    final Map<String, String> delivered = new HashMap<>(); // "p@offset" -> value
    final List<String> failed = new ArrayList<>();
    volatile boolean stop;
    volatile Throwable error;
    final Thread thread;

    Feeder(String topic) {
      Properties props = Compat.clientProps(topic, "group-producer");
      props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
      props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
      props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
      String tag = UUID.randomUUID().toString().substring(0, 8);
      thread =
          new Thread(
              () -> {
                try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props)) {
                  long start = System.nanoTime();
                  long sent = 0;
                  while (!stop) {
                    long due = (System.nanoTime() - start) * RATE / 1_000_000_000L;
                    for (; sent < due; sent++) {
                      String value = String.format("%s-%07d", tag, sent);
                      p.send(
                          new ProducerRecord<>(topic, (int) (sent % PARTITIONS), null, value.getBytes(StandardCharsets.UTF_8)),
                          (md, e) -> {
                            synchronized (this) {
                              if (e != null) {
                                failed.add(value + ": " + e);
                              } else {
                                delivered.put(md.partition() + "@" + md.offset(), value);
                              }
                            }
                          });
                    }
                    Thread.sleep(20);
                  }
                  p.flush();
                } catch (Throwable t) {
                  error = t;
                }
              },
              "feeder");
      thread.setDaemon(true);
      thread.start();
    }

    void finish() throws InterruptedException {
      stop = true;
      thread.join(150_000);
      assertTrue(!thread.isAlive(), "the producer did not finish");
      assertNull(error, () -> "producer: " + error);
    }

    synchronized Map<String, String> deliveredCopy() {
      return new HashMap<>(delivered);
    }
  }

  // ------------------------------------------------------------------------- the scenario

  static boolean settled(List<Member> members, boolean balanced) {
    List<Set<Integer>> sets = members.stream().map(m -> m.assignment).toList();
    if (sets.stream().anyMatch(s -> s == null || s.isEmpty())) {
      return false;
    }
    Set<Integer> union = new TreeSet<>();
    sets.forEach(union::addAll);
    int total = sets.stream().mapToInt(Set::size).sum();
    if (total != union.size() || union.size() != PARTITIONS || !union.contains(0) || !union.contains(PARTITIONS - 1)) {
      return false;
    }
    if (balanced) {
      int max = sets.stream().mapToInt(Set::size).max().orElse(0);
      int min = sets.stream().mapToInt(Set::size).min().orElse(0);
      return max - min <= 1;
    }
    return true;
  }

  static String describe(List<Member> members) {
    return members.stream()
        .map(m -> m.name + ": " + (m.assignment == null ? "none yet" : new TreeSet<>(m.assignment)))
        .collect(Collectors.joining(", "));
  }

  static void failIfAnyMemberFailed(List<Member> members) {
    for (Member m : members) {
      if (m.error != null) {
        throw new AssertionError("member " + m.name + " failed: " + m.error, m.error);
      }
    }
  }

  static void waitFor(List<Member> members, BooleanSupplier condition, Duration timeout, java.util.function.Supplier<String> what)
      throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (true) {
      failIfAnyMemberFailed(members);
      if (condition.getAsBoolean()) {
        return;
      }
      if (System.nanoTime() > deadline) {
        throw new AssertionError("timed out after " + timeout.toSeconds() + " s waiting for " + what.get());
      }
      Thread.sleep(100);
    }
  }

  void takeover(String protocol) throws Exception {
    String topic = Compat.uniqueTopic("groups-java-" + protocol);
    String group = "compat-groups-java-" + protocol + "-" + Compat.runId(topic);
    Recorder rec = new Recorder();
    List<Member> members = new ArrayList<>();
    Feeder feeder = null;
    try (Admin admin = Admin.create(Compat.clientProps(topic, "group-admin"))) {
      admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get(30, TimeUnit.SECONDS);
      try {
        long t0 = System.nanoTime();
        for (int i = 0; i < MEMBERS; i++) {
          Properties props = Compat.clientProps(topic, "group-" + protocol);
          props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
          props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
          props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
          props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
          props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
          props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
          members.add(new Member("m" + i, props, topic, rec));
        }
        List<Member> all = List.copyOf(members);
        waitFor(all, () -> settled(all, true), SETTLE, () -> MEMBERS + " members with balanced, disjoint assignments covering " + PARTITIONS + " partitions (now: " + describe(all) + ")");
        double settleS = (System.nanoTime() - t0) / 1e9;
        Map<String, Set<Integer>> before = new TreeMap<>();
        all.forEach(m -> before.put(m.name, m.assignment));

        feeder = new Feeder(topic);
        waitFor(all, () -> all.stream().allMatch(m -> rec.commitsBy(m.name) >= 3), Duration.ofSeconds(30), () -> "every member to process and commit records");
        Thread.sleep(2000); // the assignment holds while records flow
        Map<String, Set<Integer>> still = new TreeMap<>();
        all.forEach(m -> still.put(m.name, m.assignment));
        assertEquals(before, still, "assignments changed without a membership change");

        Member leaver = all.get(0);
        List<Member> survivors = all.subList(1, all.size());
        Set<Integer> leaverPartitions = leaver.assignment;
        leaver.stop(true);
        leaver.waitClosed();
        long closedAt = leaver.closedAt;
        waitFor(survivors, () -> settled(survivors, false), TAKEOVER, () -> "the other members to take over " + leaver.name + "'s partitions " + new TreeSet<>(leaverPartitions) + " (now: " + describe(survivors) + ")");
        double takeoverS = (System.nanoTime() - closedAt) / 1e9;
        Thread.sleep(3000); // records keep coming; the new owners keep up
        feeder.finish();
        Map<String, String> delivered = feeder.deliveredCopy();
        waitFor(survivors, () -> rec.processedKeys().containsAll(delivered.keySet()), DRAIN, () -> "every produced record to be processed");
        String after = describe(survivors);
        for (Member m : survivors) {
          m.stop(false);
        }
        for (Member m : survivors) {
          m.waitClosed();
        }
        List<String> failedSends;
        synchronized (feeder) {
          failedSends = List.copyOf(feeder.failed);
        }
        assertTrue(failedSends.isEmpty(), () -> failedSends.size() + " sends failed, e.g. " + failedSends.get(0));
        checkCommitted(topic, group, rec);
        String summary = check(rec, delivered, leaver, leaverPartitions);
        System.out.printf(
            "groups java-%s: settled in %.1f s %s; %s left with %d records uncommitted, taken over in %.1f s: %s; %s%n",
            protocol, settleS, before, leaver.name, leaver.tailSize, takeoverS, after, summary);
      } finally {
        if (feeder != null) {
          feeder.stop = true;
          feeder.thread.join(30_000);
        }
        for (Member m : members) {
          m.stop(false);
        }
        for (Member m : members) {
          m.closed.await(CLOSE.toSeconds(), TimeUnit.SECONDS);
        }
        try {
          admin.deleteTopics(List.of(topic)).all().get(30, TimeUnit.SECONDS);
        } catch (Exception e) {
          System.out.println("could not delete " + topic + ": " + e); // (not to hide the test's own failure)
        }
      }
    }
  }

  /**
   * Once every member has closed, the group's committed offsets (OffsetFetch from a consumer that
   * does not join) are the last ones a member committed successfully (or later ones, if a commit a
   * member saw fail was written).
   */
  static void checkCommitted(String topic, String group, Recorder rec) {
    Map<Integer, Long> last = new TreeMap<>();
    boolean anyFailed;
    synchronized (rec) {
      rec.commits.forEach(c -> last.merge(c.partition(), c.offset(), Math::max));
      anyFailed = !rec.commitErrors.isEmpty();
    }
    Properties props = Compat.clientProps(topic, "group-offsets");
    props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
      Set<TopicPartition> tps = new HashSet<>();
      for (int p = 0; p < PARTITIONS; p++) {
        tps.add(new TopicPartition(topic, p));
      }
      Map<TopicPartition, OffsetAndMetadata> have = c.committed(tps, Duration.ofSeconds(30));
      Compat.Problems problems = new Compat.Problems();
      last.forEach(
          (part, want) -> {
            OffsetAndMetadata got = have.get(new TopicPartition(topic, part));
            if (got == null || got.offset() < want || (got.offset() != want && !anyFailed)) {
              problems.add(
                  "committed offsets",
                  "partition " + part + ": the group's committed offset is " + (got == null ? "none" : got.offset()) + ", the last commit was " + want);
            }
          });
      problems.failIfAny("committed offsets after the members closed");
    }
  }

  /** No loss; duplicates only from uncommitted tails; the leaver's partitions resumed at its last commit. */
  static String check(Recorder rec, Map<String, String> delivered, Member leaver, Set<Integer> leaverPartitions) {
    Compat.Problems p = new Compat.Problems();
    List<Processed> processed;
    List<Commit> commits;
    synchronized (rec) {
      processed = new ArrayList<>(rec.processed);
      commits = new ArrayList<>(rec.commits);
    }
    Map<String, List<Processed>> seen = new HashMap<>();
    for (Processed e : processed) {
      seen.computeIfAbsent(e.partition() + "@" + e.offset(), k -> new ArrayList<>()).add(e);
    }
    List<String> missing = delivered.keySet().stream().filter(k -> !seen.containsKey(k)).sorted().toList();
    if (!missing.isEmpty()) {
      p.add("lost (delivered, never processed)", missing.size() + " records, first " + missing.subList(0, Math.min(5, missing.size())));
    }
    // Per partition: commit completion times and the highest offset committed by then.
    Map<Integer, List<Commit>> byPartition = new HashMap<>();
    commits.forEach(c -> byPartition.computeIfAbsent(c.partition(), k -> new ArrayList<>()).add(c));
    byPartition.values().forEach(l -> l.sort((a, b) -> Long.compare(a.t(), b.t())));
    int duplicates = 0;
    for (Map.Entry<String, List<Processed>> entry : seen.entrySet()) {
      List<Processed> events = entry.getValue();
      String want = delivered.get(entry.getKey());
      if (want == null) {
        p.add("processed a record the producer was not told about", entry.getKey() + ": " + events.get(0).value());
      }
      for (Processed e : events) {
        if (want != null && !want.equals(e.value())) {
          p.add("value", entry.getKey() + " read by " + e.member() + ": " + e.value() + ", produced " + want);
        }
      }
      if (events.size() < 2) {
        continue;
      }
      events.sort((a, b) -> Long.compare(a.t(), b.t()));
      duplicates += events.size() - 1;
      Processed first = events.get(0);
      for (Processed again : events.subList(1, events.size())) {
        long committed = -1;
        for (Commit c : byPartition.getOrDefault(again.partition(), List.of())) {
          if (c.t() < again.t()) {
            committed = Math.max(committed, c.offset());
          }
        }
        if (committed > again.offset()) {
          p.add(
              "duplicate of a committed record",
              String.format(
                  "%s read by %s, then by %s %.2f s later, after offset %d had been committed",
                  entry.getKey(), first.member(), again.member(), (again.t() - first.t()) / 1e9, committed));
        }
      }
    }
    Map<Integer, String> starts = new TreeMap<>();
    for (int part : new TreeSet<>(leaverPartitions)) {
      long want =
          commits.stream()
              .filter(c -> c.partition() == part && c.t() <= leaver.closedAt)
              .mapToLong(Commit::offset)
              .max()
              .orElse(0);
      Processed firstAfter =
          processed.stream()
              .filter(e -> e.partition() == part && !e.member().equals(leaver.name))
              .min((a, b) -> a.t() != b.t() ? Long.compare(a.t(), b.t()) : Long.compare(a.offset(), b.offset()))
              .orElse(null);
      if (firstAfter == null) {
        p.add("not taken over", "partition " + part + ": no other member processed any record of it");
        continue;
      }
      starts.put(part, "committed " + want + ", " + firstAfter.member() + " started at " + firstAfter.offset());
      if (firstAfter.offset() != want) {
        p.add(
            "taken over elsewhere than the committed offset",
            "partition " + part + ": " + leaver.name + " last committed " + want + ", " + firstAfter.member() + " started at " + firstAfter.offset());
      }
    }
    p.failIfAny("consumer group check");
    String commitErrors;
    synchronized (rec) {
      commitErrors = rec.commitErrors.size() + " commits failed";
    }
    return String.format(
        "%d records produced, %d processed (%d duplicates), %d partition commits (%s); new owners: %s",
        delivered.size(), processed.size(), duplicates, commits.size(), commitErrors, starts);
  }
}
