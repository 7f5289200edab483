package sluice.compat.streams;

import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Counts the words of the lines on an input topic and writes every new count to an output topic
 * (key: the word, value: its count as a big-endian 8-byte long), as an application would.
 *
 * <p>The topology has the two kinds of internal topic Streams makes: re-keying each word with
 * {@code groupBy} goes through the repartition topic {@code <application.id>-words-repartition}
 * (which Streams purges with DeleteRecords once it has committed past records), and the counts
 * live in the RocksDB store {@code word-counts}, backed by the compacted changelog topic
 * {@code <application.id>-word-counts-changelog}, from which a lost state directory is restored.
 *
 * <p>Run by compat/python/test_streams.py:
 * {@code WordCount BOOTSTRAP APPLICATION_ID INPUT_TOPIC OUTPUT_TOPIC STATE_DIR}. It prints its
 * state changes on stdout ({@code STATE RUNNING}, ...) and runs until SIGTERM/SIGKILL; on a
 * fatal error it exits with status 1.
 */
public final class WordCount {
    private WordCount() {}

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 5) {
            System.err.println("usage: WordCount BOOTSTRAP APPLICATION_ID INPUT_TOPIC OUTPUT_TOPIC STATE_DIR");
            System.exit(2);
        }
        String bootstrap = args[0];
        String applicationId = args[1];
        String input = args[2];
        String output = args[3];
        String stateDir = args[4];

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("[^a-z0-9]+")))
                .filter((key, word) -> !word.isEmpty())
                .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
                .count(Materialized.as("word-counts"))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        Topology topology = builder.build();

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        // Commit (and so purge the repartition topic up to what was committed) every 200 ms
        // rather than every 30 s, so the test sees it within seconds.
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 200);
        // No record cache: every count update goes to the output topic and the changelog at once.
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        // A member killed with SIGKILL never leaves its group; the one restarted after it waits
        // for the group to drop it, after the session timeout (45 s by default).
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);

        KafkaStreams streams = new KafkaStreams(topology, props);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((newState, oldState) -> {
            System.out.println("STATE " + newState);
            System.out.flush();
            if (newState == KafkaStreams.State.ERROR || newState == KafkaStreams.State.NOT_RUNNING) {
                done.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println("FATAL " + e);
            e.printStackTrace();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(10));
            done.countDown();
        }));
        System.out.println("TOPOLOGY " + topology.describe().toString().replace('\n', ' '));
        streams.start();
        done.await();
        KafkaStreams.State last = streams.state();
        streams.close(Duration.ofSeconds(10));
        System.exit(last == KafkaStreams.State.ERROR ? 1 : 0);
    }
}
