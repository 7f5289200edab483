package sluice.compat;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Assumptions;

/**
 * What the Java tests share: where the broker is, the records every client produces (the same
 * shape as compat/python/compat_util.py), and the read-back check.
 *
 * <p>Every record carries its sequence number in a {@code seq} header, so a record read back can be
 * matched with the one produced whatever partition it landed in.
 */
final class Compat {
  static final int N_RECORDS = 10_000;
  static final int PARTITIONS = 3;
  static final int N_KEYS = 50;
  static final int TOMBSTONE_EVERY = 1000;
  static final Duration READ_TIMEOUT = Duration.ofSeconds(60);
  static final Duration ADMIN_TIMEOUT = Duration.ofSeconds(30);

  private Compat() {}

  /** The broker under test: -Dsluice.bootstrap, else env SLUICE_BOOTSTRAP, else 127.0.0.1:9092. */
  static String bootstrap() {
    String fromProperty = System.getProperty("sluice.bootstrap");
    if (fromProperty != null && !fromProperty.isBlank()) {
      return fromProperty;
    }
    String fromEnv = System.getenv("SLUICE_BOOTSTRAP");
    return fromEnv != null && !fromEnv.isBlank() ? fromEnv : "127.0.0.1:9092";
  }

  /** A topic name no other test or run uses; its last 8 characters identify the run. */
  static String uniqueTopic(String client) {
    return "compat-" + client + "-" + UUID.randomUUID().toString().substring(0, 8);
  }

  static String runId(String topic) {
    return topic.substring(topic.length() - 8);
  }

  /** Client properties: the broker and a client.id naming the test; everything else default. */
  static Properties clientProps(String topic, String role) {
    Properties props = new Properties();
    props.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
    props.put(CommonClientConfigs.CLIENT_ID_CONFIG, "compat-java-" + role + "-" + runId(topic));
    return props;
  }

  /** A record as produced. */
  record Rec(int seq, byte[] key, byte[] value, List<Header> headers, long timestampMs) {}

  /** A record as read back. */
  record Got(
      int partition,
      long offset,
      byte[] key,
      byte[] value,
      List<Header> headers,
      long timestampMs,
      TimestampType timestampType) {}

  /** n keyed records with headers (one repeated, one empty) and timestamps base + seq. */
  static List<Rec> makeRecords(String client, long baseTimestampMs, int n) {
    List<Rec> recs = new ArrayList<>(n);
    for (int seq = 0; seq < n; seq++) {
      byte[] prefix = String.format("%s-%05d-", client, seq).getBytes(StandardCharsets.UTF_8);
      byte[] value = Arrays.copyOf(prefix, prefix.length + seq % 97);
      for (int j = 0; j < seq % 97; j++) {
        value[prefix.length + j] = (byte) ((seq * 31 + j) % 256);
      }
      if (seq % TOMBSTONE_EVERY == TOMBSTONE_EVERY - 1) {
        value = null;
      }
      List<Header> headers =
          List.of(
              header("seq", Integer.toString(seq)),
              header("client", client),
              header("dup", "first"),
              header("dup", "second"),
              header("empty", ""));
      byte[] key = String.format("key-%02d", seq % N_KEYS).getBytes(StandardCharsets.UTF_8);
      recs.add(new Rec(seq, key, value, headers, baseTimestampMs + seq));
    }
    return recs;
  }

  static Header header(String name, String value) {
    return new RecordHeader(name, value.getBytes(StandardCharsets.UTF_8));
  }

  static Integer seqOf(Got g) {
    for (Header h : g.headers()) {
      if (h.key().equals("seq") && h.value() != null) {
        try {
          return Integer.parseInt(new String(h.value(), StandardCharsets.UTF_8));
        } catch (NumberFormatException e) {
          return null;
        }
      }
    }
    return null;
  }

  static Map<Integer, List<Got>> byPartition(List<Got> got) {
    Map<Integer, List<Got>> parts = new TreeMap<>();
    for (Got g : got) {
      parts.computeIfAbsent(g.partition(), p -> new ArrayList<>()).add(g);
    }
    parts.values().forEach(l -> l.sort((a, b) -> Long.compare(a.offset(), b.offset())));
    return parts;
  }

  /** Collects mismatches by kind; fails with the first few of each. */
  static final class Problems {
    private final Map<String, List<String>> items = new LinkedHashMap<>();

    void add(String kind, String detail) {
      items.computeIfAbsent(kind, k -> new ArrayList<>()).add(detail);
    }

    void failIfAny(String what) {
      if (items.isEmpty()) {
        return;
      }
      StringBuilder sb = new StringBuilder(what).append(": problems found");
      items.forEach(
          (kind, details) ->
              sb.append("\n- ")
                  .append(kind)
                  .append(": ")
                  .append(details.size())
                  .append(", e.g. ")
                  .append(String.join("; ", details.subList(0, Math.min(3, details.size())))));
      throw new AssertionError(sb.toString());
    }
  }

  static String show(byte[] b) {
    if (b == null) {
      return "null";
    }
    return "'" + new String(b, 0, Math.min(b.length, 40), StandardCharsets.ISO_8859_1) + "'";
  }

  static String show(List<Header> headers) {
    return headers.stream().map(h -> h.key() + "=" + show(h.value())).collect(Collectors.joining(","));
  }

  static boolean sameHeaders(List<Header> a, List<Header> b) {
    if (a.size() != b.size()) {
      return false;
    }
    for (int i = 0; i < a.size(); i++) {
      if (!a.get(i).key().equals(b.get(i).key()) || !Arrays.equals(a.get(i).value(), b.get(i).value())) {
        return false;
      }
    }
    return true;
  }

  /**
   * Everything produced came back exactly once, unchanged and in order: offsets 0..n-1 in every
   * partition, seq increasing with offset, each key in one partition, and every record where the
   * producer was told it landed ({@code delivered}: seq -> [partition, offset]).
   */
  static void checkReadBack(List<Rec> expected, List<Got> got, Map<Integer, long[]> delivered) {
    Problems p = new Problems();
    if (got.size() != expected.size()) {
      p.add("count", "read " + got.size() + " records, produced " + expected.size());
    }
    Map<Integer, List<Got>> parts = byPartition(got);
    if (parts.size() != PARTITIONS) {
      p.add("partition", "records in partitions " + parts.keySet());
    }
    parts.forEach(
        (part, records) -> {
          for (int i = 0; i < records.size(); i++) {
            if (records.get(i).offset() != i) {
              p.add("offsets", "partition " + part + ": offset " + records.get(i).offset() + " at index " + i);
              break;
            }
          }
          Integer prev = null;
          for (Got g : records) {
            Integer seq = seqOf(g);
            if (prev != null && seq != null && seq <= prev) {
              p.add("order", "partition " + part + " offset " + g.offset() + ": seq " + seq + " after " + prev);
            }
            prev = seq;
          }
        });
    Map<Integer, Got> seen = new HashMap<>();
    Map<String, Set<Integer>> keyPartitions = new HashMap<>();
    for (Got g : got) {
      Integer seq = seqOf(g);
      if (seq == null || seq < 0 || seq >= expected.size()) {
        p.add("seq header", "p" + g.partition() + "@" + g.offset() + ": " + show(g.headers()));
        continue;
      }
      if (seen.containsKey(seq)) {
        p.add("duplicate", "seq " + seq + " at p" + g.partition() + "@" + g.offset());
        continue;
      }
      seen.put(seq, g);
      Rec want = expected.get(seq);
      String where = "seq " + seq + " (p" + g.partition() + "@" + g.offset() + ")";
      keyPartitions.computeIfAbsent(new String(want.key(), StandardCharsets.UTF_8), k -> new TreeSet<>()).add(g.partition());
      if (!Arrays.equals(g.key(), want.key())) {
        p.add("key", where + ": " + show(g.key()) + " != " + show(want.key()));
      }
      if (!Arrays.equals(g.value(), want.value())) {
        p.add("value", where + ": " + show(g.value()) + " != " + show(want.value()));
      }
      if (!sameHeaders(g.headers(), want.headers())) {
        p.add("headers", where + ": " + show(g.headers()) + " != " + show(want.headers()));
      }
      if (g.timestampMs() != want.timestampMs()) {
        p.add("timestamp", where + ": " + g.timestampMs() + " != " + want.timestampMs());
      }
      if (g.timestampType() != TimestampType.CREATE_TIME) {
        p.add("timestamp type", where + ": " + g.timestampType());
      }
      long[] d = delivered.get(seq);
      if (d == null || d[0] != g.partition() || d[1] != g.offset()) {
        p.add("delivery report", where + ": producer was told " + (d == null ? "nothing" : Arrays.toString(d)));
      }
    }
    Set<Integer> missing = new TreeSet<>();
    for (Rec r : expected) {
      if (!seen.containsKey(r.seq())) {
        missing.add(r.seq());
      }
    }
    if (!missing.isEmpty()) {
      p.add("missing", missing.size() + " records never read back, first " + missing.stream().limit(5).toList());
    }
    keyPartitions.forEach(
        (key, ps) -> {
          if (ps.size() > 1) {
            p.add("key partitioning", "key " + key + " in partitions " + ps);
          }
        });
    p.failIfAny("read-back check");
  }

  /** The earliest offset in partition whose timestamp is >= ts, or null if there is none. */
  static Long expectedOffsetForTime(List<Got> got, int partition, long ts) {
    Long best = null;
    for (Got g : got) {
      if (g.partition() == partition && g.timestampMs() >= ts && (best == null || g.offset() < best)) {
        best = g.offset();
      }
    }
    return best;
  }

  /** Timestamps to look offsets up by: before all records, exact hits, after all records. */
  static Map<String, Long> offsetLookups(List<Got> got) {
    long[] stamps = got.stream().mapToLong(Got::timestampMs).distinct().sorted().toArray();
    Map<String, Long> lookups = new LinkedHashMap<>();
    lookups.put("before every record", stamps[0] - 1000);
    lookups.put("first record", stamps[0]);
    for (int pct : new int[] {25, 50, 90}) {
      lookups.put("timestamp at " + pct + "%", stamps[stamps.length * pct / 100]);
    }
    lookups.put("last record", stamps[stamps.length - 1]);
    lookups.put("after every record", stamps[stamps.length - 1] + 1000);
    return lookups;
  }

  /** Poll until the condition holds; fail with `what` after the timeout. */
  static void waitUntil(BooleanSupplier condition, Duration timeout, String what) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("timed out after " + timeout.toSeconds() + " s waiting for " + what);
      }
      Thread.sleep(200);
    }
  }

  /** The ordered steps of one test class: a step whose prerequisite failed is skipped, not failed. */
  static final class Steps {
    private final Set<String> passed = new HashSet<>();

    void ok(String step) {
      passed.add(step);
    }

    void require(String... steps) {
      List<String> missing = Arrays.stream(steps).filter(s -> !passed.contains(s)).toList();
      Assumptions.assumeTrue(
          missing.isEmpty(), () -> "needs earlier step(s) that did not pass: " + String.join(", ", missing));
    }
  }
}
