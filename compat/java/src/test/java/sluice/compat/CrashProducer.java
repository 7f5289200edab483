package sluice.compat;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.Writer;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.zip.CRC32;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.Utils;

/**
 * The producer side of the crash test (compat/python/test_crash.py), not a JUnit test: a program
 * that sends records continuously with the Java client's defaults plus {@code acks=all},
 * idempotence (the default, stated explicitly) and a delivery timeout long enough to ride out a
 * broker restart, while the test kills and restarts the broker underneath it.
 *
 * <pre>
 *   java -cp target/test-classes:DEPENDENCIES sluice.compat.CrashProducer \
 *       bootstrap=127.0.0.1:9092 topic=T partitions=3 out=acks.txt run=1234 \
 *       [rate=2000] [linger-ms=5] [max-payload=400] [max-outstanding=20000] [max-seconds=300] [seed=N]
 * </pre>
 *
 * <p>It sends until its standard input reaches end of file (or says {@code stop}) or max-seconds
 * pass, then flushes and closes the producer. A line {@code burst N} on standard input sends N
 * records at once on top of the rate. Each record goes to an explicit partition (the one the
 * default partitioner picks for its key; several keys per partition) and its value is
 *
 * <pre>
 *   "SLCR" | run id (i64) | partition (i32) | sequence in the partition (i64) | global sequence (i64)
 *   | send time in ms (i64) | payload length (i32) | CRC-32 of the payload (i32) | payload
 * </pre>
 *
 * (big-endian), with a random payload of 0 to max-payload bytes. The output file gets one line per
 * completed send, flushed every 100 ms: {@code ack PARTITION OFFSET SEQ TIME_MS} when the callback
 * reported success (an acknowledged record), {@code fail PARTITION SEQ TIME_MS global=N EXCEPTION}
 * otherwise, and a last line {@code done sent=N acked=N failed=N}.
 */
public final class CrashProducer {
  static final byte[] MAGIC = "SLCR".getBytes(StandardCharsets.US_ASCII);
  static final int KEYS_PER_PARTITION = 4;

  private CrashProducer() {}

  public static void main(String[] argv) throws Exception {
    Map<String, String> args = new HashMap<>();
    for (String a : argv) {
      int eq = a.indexOf('=');
      if (eq < 1) {
        throw new IllegalArgumentException("arguments are NAME=VALUE, got " + a);
      }
      args.put(a.substring(0, eq), a.substring(eq + 1));
    }
    String bootstrap = required(args, "bootstrap");
    String topic = required(args, "topic");
    int partitions = Integer.parseInt(required(args, "partitions"));
    Path out = Path.of(required(args, "out"));
    long runId = Long.parseLong(required(args, "run"));
    int rate = Integer.parseInt(args.getOrDefault("rate", "2000"));
    int maxOutstanding = Integer.parseInt(args.getOrDefault("max-outstanding", "20000"));
    long maxMs = 1000L * Long.parseLong(args.getOrDefault("max-seconds", "300"));
    int maxPayload = Integer.parseInt(args.getOrDefault("max-payload", "400"));
    Random random = new Random(Long.parseLong(args.getOrDefault("seed", Long.toString(runId))));

    // Keys: KEYS_PER_PARTITION for each partition, mapped the way the default partitioner does.
    List<List<byte[]>> keys = new ArrayList<>();
    for (int p = 0; p < partitions; p++) {
      keys.add(new ArrayList<>());
    }
    int placed = 0;
    for (int i = 0; placed < KEYS_PER_PARTITION * partitions; i++) {
      byte[] key = String.format("key-%03d", i).getBytes(StandardCharsets.UTF_8);
      List<byte[]> forPartition = keys.get(Utils.toPositive(Utils.murmur2(key)) % partitions);
      if (forPartition.size() < KEYS_PER_PARTITION) {
        forPartition.add(key);
        placed++;
      }
    }

    Properties props = new Properties();
    props.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(CommonClientConfigs.CLIENT_ID_CONFIG, "compat-java-crash-" + runId);
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    props.put(ProducerConfig.ACKS_CONFIG, "all");
    props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
    props.put(ProducerConfig.LINGER_MS_CONFIG, args.getOrDefault("linger-ms", "5"));

    // Stop when standard input ends or says "stop"; "burst N" sends N records at once, on top
    // of the rate (the test asks for one just before a kill, so produce requests are in flight).
    AtomicLong burst = new AtomicLong();
    Thread stdinWatch =
        new Thread(
            () -> {
              try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null && !line.trim().equals("stop")) {
                  String[] words = line.trim().split("\\s+");
                  if (words.length == 2 && words[0].equals("burst")) {
                    burst.addAndGet(Long.parseLong(words[1]));
                  }
                }
              } catch (IOException | NumberFormatException e) {
                // treat like end of input
              }
            },
            "stdin-watch");
    stdinWatch.setDaemon(true);
    stdinWatch.start();

    Semaphore outstanding = new Semaphore(maxOutstanding);
    AtomicLong acked = new AtomicLong();
    AtomicLong failed = new AtomicLong();
    long[] nextSeq = new long[partitions];
    long sent = 0; // records handed to send(), also the global sequence
    long paced = 0; // sends the rate allowed so far
    long start = System.currentTimeMillis();
    try (BufferedWriter w = Files.newBufferedWriter(out, StandardCharsets.UTF_8);
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
      long lastFlush = start;
      while (stdinWatch.isAlive() && System.currentTimeMillis() - start < maxMs) {
        long now = System.currentTimeMillis();
        long due = (now - start) * rate / 1000;
        // Never more than 100 ms of catching up, so a long stall does not end in a rush of sends.
        paced = Math.max(paced, due - rate / 10);
        paced -= burst.getAndSet(0);
        while (paced < due && stdinWatch.isAlive()) {
          if (!outstanding.tryAcquire(100, TimeUnit.MILLISECONDS)) {
            break;
          }
          byte[] key = keys.get(random.nextInt(partitions)).get(random.nextInt(KEYS_PER_PARTITION));
          int partition = Utils.toPositive(Utils.murmur2(key)) % partitions;
          long seq = nextSeq[partition]++;
          long global = sent++;
          byte[] value = value(random, maxPayload, runId, partition, seq, global);
          paced++;
          producer.send(
              new ProducerRecord<>(topic, partition, key, value),
              (md, e) -> {
                outstanding.release();
                long t = System.currentTimeMillis();
                synchronized (w) {
                  try {
                    if (e == null) {
                      acked.incrementAndGet();
                      w.write("ack " + md.partition() + " " + md.offset() + " " + seq + " " + t + "\n");
                    } else {
                      failed.incrementAndGet();
                      String why = (e.getClass().getName() + ": " + e.getMessage()).replaceAll("\\s+", " ");
                      w.write("fail " + partition + " " + seq + " " + t + " global=" + global + " " + why + "\n");
                    }
                  } catch (IOException io) {
                    throw new java.io.UncheckedIOException(io);
                  }
                }
              });
        }
        now = System.currentTimeMillis();
        if (now - lastFlush >= 100) {
          flush(w);
          lastFlush = now;
        }
        // Sending in small steps keeps the producer's requests close together (with linger.ms=0),
        // so that a kill is likely to find produce requests in flight.
        LockSupport.parkNanos(250_000);
      }
      System.err.println("crash-producer: stopping after " + sent + " sends; flushing");
      flush(w);
      producer.flush();
      // For the log: how busy the connection was (the recent window of the client's own metrics).
      StringBuilder metrics = new StringBuilder("crash-producer: client metrics:");
      producer.metrics().forEach(
          (name, metric) -> {
            if (name.group().equals("producer-metrics")
                && List.of("request-rate", "request-latency-avg", "records-per-request-avg", "batch-size-avg")
                    .contains(name.name())) {
              metrics.append(' ').append(name.name()).append('=').append(metric.metricValue());
            }
          });
      System.err.println(metrics);
      producer.close(Duration.ofSeconds(30));
      synchronized (w) {
        w.write("done sent=" + sent + " acked=" + acked.get() + " failed=" + failed.get() + "\n");
      }
      flush(w);
    }
    System.err.println("crash-producer: done sent=" + sent + " acked=" + acked.get() + " failed=" + failed.get());
  }

  static byte[] value(Random random, int maxPayload, long runId, int partition, long seq, long global) {
    byte[] payload = new byte[random.nextInt(maxPayload + 1)];
    random.nextBytes(payload);
    CRC32 crc = new CRC32();
    crc.update(payload);
    ByteBuffer b = ByteBuffer.allocate(MAGIC.length + 8 + 4 + 8 + 8 + 8 + 4 + 4 + payload.length);
    b.put(MAGIC)
        .putLong(runId)
        .putInt(partition)
        .putLong(seq)
        .putLong(global)
        .putLong(System.currentTimeMillis())
        .putInt(payload.length)
        .putInt((int) crc.getValue())
        .put(payload);
    return b.array();
  }

  static void flush(Writer w) throws IOException {
    synchronized (w) {
      w.flush();
    }
  }

  static String required(Map<String, String> args, String name) {
    String v = args.get(name);
    if (v == null || v.isBlank()) {
      throw new IllegalArgumentException("missing argument " + name + "=...");
    }
    return v;
  }
}
