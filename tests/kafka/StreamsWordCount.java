// A word count Kafka Streams application for tests/kafka/test_streams_app.py, run in source-file
// mode (java -cp <Kafka 4.3.1 classpath> StreamsWordCount.java app.properties input output).
// Input lines -> words -> groupBy word (a repartition topic) -> count (a state store with its
// changelog topic) -> "word" = "count" as strings on the output topic. It runs until its stdin
// is closed, then closes; it prints its state changes ("STATE OLD -> NEW") on stdout.

import java.io.FileReader;
import java.io.Reader;
import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Produced;

public class StreamsWordCount {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (Reader reader = new FileReader(args[0])) {
            props.load(reader);
        }
        String input = args[1];
        String output = args[2];

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word, Grouped.with(Serdes.String(), Serdes.String()))
            .count()
            .toStream()
            .mapValues(count -> Long.toString(count))
            .to(output, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(props), props);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + before + " -> " + now);
            System.out.flush();
        });
        streams.setUncaughtExceptionHandler(exc -> {
            System.out.println("UNCAUGHT " + exc);
            System.out.flush();
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        while (System.in.read() != -1) {
            // run until stdin is closed
        }
        streams.close(Duration.ofSeconds(15));
        System.out.println("CLOSED");
        System.out.flush();
    }
}
