package io.staticfleet.peer;

import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A tiny KafkaConsumer: the reference client for the KIP-429 two-bounce and for groups that
 * mix it with staticfleet members.
 *
 * <p>It subscribes (the classic group protocol, or KIP-848's with --group-protocol consumer and
 * an optional --remote-assignor uniform|range) with the assignment strategies it is given, counts
 * the records it reads, commits its positions every commit interval and in
 * onPartitionsRevoked, and writes one JSON line per event in the same shape as
 * `staticfleet member run`'s event log (started, assigned, revoked, lost, commit, stopped), so
 * the same ownership analysis reads both. SIGTERM closes it cleanly (a static member does not
 * leave the group, KIP-345).
 *
 * <p>Arguments: --bootstrap HOST:PORT --group-id ID --topics A,B [--instance-id ID]
 * [--strategies range,cooperative-sticky] [--session-timeout-ms N] [--heartbeat-interval-ms
 * N] [--group-protocol classic|consumer] [--remote-assignor NAME] [--commit-interval-ms N] [--events PATH] (default: stdout) [--client-config PATH] (a
 * properties file merged into the consumer's configuration; default: $KAFKA_CLIENT_CONFIG).
 */
public final class ConsumerPeer {
  private static final Map<String, String> ASSIGNORS =
      Map.of(
          "range", "org.apache.kafka.clients.consumer.RangeAssignor",
          "roundrobin", "org.apache.kafka.clients.consumer.RoundRobinAssignor",
          "sticky", "org.apache.kafka.clients.consumer.StickyAssignor",
          "cooperative-sticky", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");

  private final Map<String, String> options;
  private final PrintStream events;
  private final KafkaConsumer<byte[], byte[]> consumer;
  private final Map<TopicPartition, Long> positions = new HashMap<>();
  private volatile boolean running = true;
  private long consumed = 0;

  private ConsumerPeer(Map<String, String> options, PrintStream events) {
    this.options = options;
    this.events = events;
    Properties properties = new Properties();
    properties.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, required("bootstrap"));
    properties.put(ConsumerConfig.GROUP_ID_CONFIG, required("group-id"));
    // KIP-848: with group.protocol=consumer the broker assigns (group.remote.assignor, none:
    // the broker's default); the classic assignors and session/heartbeat settings are then
    // group-level broker configs, and KafkaConsumer refuses them as client settings.
    String protocol = options.getOrDefault("group-protocol", "classic");
    boolean consumerProtocol = protocol.equals("consumer");
    if (!consumerProtocol && !protocol.equals("classic")) {
      throw new IllegalArgumentException("--group-protocol: classic or consumer, not " + protocol);
    }
    properties.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
    String instanceId = options.get("instance-id");
    if (instanceId != null && !instanceId.isEmpty()) {
      properties.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instanceId);
    }
    properties.put(ConsumerConfig.CLIENT_ID_CONFIG, "java-peer-" + (instanceId == null ? ProcessHandle.current().pid() : instanceId));
    if (consumerProtocol) {
      String remoteAssignor = options.get("remote-assignor");
      if (remoteAssignor != null && !remoteAssignor.isEmpty()) {
        properties.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, remoteAssignor);
      }
    } else {
      properties.put(
          ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
          List.of(options.getOrDefault("strategies", "range").split(",")).stream()
              .map(name -> ASSIGNORS.getOrDefault(name.trim(), name.trim()))
              .collect(Collectors.joining(",")));
      properties.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, options.getOrDefault("session-timeout-ms", "10000"));
      properties.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, options.getOrDefault("heartbeat-interval-ms", "1000"));
    }
    properties.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    properties.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    properties.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    properties.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    properties.putAll(clientConfig(options));
    this.consumer = new KafkaConsumer<>(properties);
  }

  /**
   * The client configuration file (security.protocol, sasl.jaas.config, PEM stores: what the
   * staticfleet operator mounts for clientFamily java): --client-config, else the file the
   * KAFKA_CLIENT_CONFIG env variable names; none: nothing added.
   */
  private static Properties clientConfig(Map<String, String> options) {
    String path = options.get("client-config");
    if (path == null || path.isEmpty()) {
      path = System.getenv("KAFKA_CLIENT_CONFIG");
    }
    Properties loaded = new Properties();
    if (path == null || path.isEmpty()) {
      return loaded;
    }
    try (FileInputStream in = new FileInputStream(path)) {
      loaded.load(new InputStreamReader(in, StandardCharsets.UTF_8));
    } catch (IOException error) {
      throw new IllegalArgumentException("cannot read the client configuration " + path + ": " + error.getMessage(), error);
    }
    // Kafka 4 only fetches tokens from endpoints the JVM allows (CVE-2025-27817).
    String endpoint = loaded.getProperty("sasl.oauthbearer.token.endpoint.url");
    String allowed = "org.apache.kafka.sasl.oauthbearer.allowed.urls";
    if (endpoint != null && System.getProperty(allowed) == null) {
      System.setProperty(allowed, endpoint);
    }
    return loaded;
  }

  private String required(String name) {
    String value = options.get(name);
    if (value == null || value.isEmpty()) {
      throw new IllegalArgumentException("missing --" + name);
    }
    return value;
  }

  private void run() {
    List<String> topics = List.of(required("topics").split(","));
    long commitIntervalMs = Long.parseLong(options.getOrDefault("commit-interval-ms", "1000"));
    write("started", Map.of("strategies", quoteAll(List.of(options.getOrDefault("strategies", "range").split(","))), "pid", Long.toString(ProcessHandle.current().pid()), "topics", quoteAll(topics)));
    consumer.subscribe(topics, new Listener());
    long nextCommit = System.currentTimeMillis() + commitIntervalMs;
    try {
      while (running) {
        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
        for (ConsumerRecord<byte[], byte[]> record : records) {
          positions.put(new TopicPartition(record.topic(), record.partition()), record.offset() + 1);
          consumed++;
        }
        if (System.currentTimeMillis() >= nextCommit) {
          commit(positions.keySet());
          nextCommit += commitIntervalMs;
        }
      }
    } catch (WakeupException stopping) {
      // SIGTERM: fall through to close.
    } finally {
      consumer.close(); // revokes (our listener commits) and, static, does not leave
      write("stopped", Map.of("consumed", Long.toString(consumed)));
    }
  }

  private void commit(Collection<TopicPartition> partitions) {
    Map<TopicPartition, OffsetAndMetadata> offsets = new TreeMap<>(
        (a, b) -> a.topic().equals(b.topic()) ? Integer.compare(a.partition(), b.partition()) : a.topic().compareTo(b.topic()));
    for (TopicPartition tp : partitions) {
      Long position = positions.get(tp);
      if (position != null) {
        offsets.put(tp, new OffsetAndMetadata(position));
      }
    }
    if (offsets.isEmpty()) {
      return;
    }
    try {
      consumer.commitSync(offsets);
    } catch (WakeupException wakeup) {
      running = false;
      throw wakeup;
    } catch (RuntimeException error) {
      write("commit_failed", Map.of("error", quote(error.toString())));
      return;
    }
    List<String> triples = new ArrayList<>();
    offsets.forEach((tp, offset) -> triples.add("[" + quote(tp.topic()) + "," + tp.partition() + "," + offset.offset() + "]"));
    write("commit", Map.of("offsets", "[" + String.join(",", triples) + "]"));
  }

  private final class Listener implements ConsumerRebalanceListener {
    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
      commit(partitions);
      partitions.forEach(positions::remove);
      write("revoked", Map.of("partitions", partitionList(partitions)));
    }

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
      write("assigned", Map.of("partitions", partitionList(partitions)));
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> partitions) {
      partitions.forEach(positions::remove);
      write("lost", Map.of("partitions", partitionList(partitions)));
    }
  }

  /** One JSON line; `fields` values are JSON already. */
  private synchronized void write(String event, Map<String, String> fields) {
    Map<String, String> line = new TreeMap<>(fields);
    line.put("ts_ms", Long.toString(System.currentTimeMillis()));
    line.put("event", quote(event));
    line.put("group_id", quote(options.get("group-id")));
    String instanceId = options.get("instance-id");
    line.put("instance_id", instanceId == null || instanceId.isEmpty() ? "null" : quote(instanceId));
    String memberId = "";
    int generation = -1;
    try {
      memberId = consumer.groupMetadata().memberId();
      generation = consumer.groupMetadata().generationId();
    } catch (RuntimeException closed) {
      // After close the metadata is gone; the line still says what happened.
    }
    line.put("member_id", quote(memberId));
    line.put("generation_id", Integer.toString(generation));
    line.put("client", quote("java"));
    events.println(
        line.entrySet().stream()
            .map(entry -> quote(entry.getKey()) + ": " + entry.getValue())
            .collect(Collectors.joining(", ", "{", "}")));
    events.flush();
  }

  private static String partitionList(Collection<TopicPartition> partitions) {
    return partitions.stream()
        .sorted((a, b) -> a.topic().equals(b.topic()) ? Integer.compare(a.partition(), b.partition()) : a.topic().compareTo(b.topic()))
        .map(tp -> "[" + quote(tp.topic()) + "," + tp.partition() + "]")
        .collect(Collectors.joining(",", "[", "]"));
  }

  private static String quoteAll(List<String> values) {
    return values.stream().map(ConsumerPeer::quote).collect(Collectors.joining(",", "[", "]"));
  }

  private static String quote(String text) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : text.toCharArray()) {
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        default -> {
          if (c < 0x20) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
        }
      }
    }
    return out.append('"').toString();
  }

  private static Map<String, String> parse(String[] args) {
    Map<String, String> options = new HashMap<>();
    for (int i = 0; i < args.length; i++) {
      String arg = args[i];
      if (!arg.startsWith("--")) {
        throw new IllegalArgumentException("unexpected argument " + arg);
      }
      int equals = arg.indexOf('=');
      if (equals > 0) {
        options.put(arg.substring(2, equals), arg.substring(equals + 1));
      } else if (i + 1 < args.length) {
        options.put(arg.substring(2), args[++i]);
      } else {
        throw new IllegalArgumentException("no value for " + arg);
      }
    }
    return options;
  }

  public static void main(String[] args) throws IOException, InterruptedException {
    Map<String, String> options = parse(args);
    String path = options.get("events");
    PrintStream events =
        path == null || path.equals("-")
            ? System.out
            : new PrintStream(new FileOutputStream(path, true), true, StandardCharsets.UTF_8);
    ConsumerPeer peer = new ConsumerPeer(options, events);
    CountDownLatch done = new CountDownLatch(1);
    Thread main = Thread.currentThread();
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  peer.running = false;
                  peer.consumer.wakeup();
                  try {
                    done.await();
                  } catch (InterruptedException interrupted) {
                    main.interrupt();
                    return;
                  }
                  // Closed cleanly: exit 0, not the JVM's 143 for a SIGTERM.
                  Runtime.getRuntime().halt(0);
                }));
    try {
      peer.run();
    } finally {
      done.countDown();
      events.flush();
    }
  }
}
