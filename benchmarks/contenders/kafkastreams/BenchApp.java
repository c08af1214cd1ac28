package kstreambench;

import com.fasterxml.jackson.annotation.JsonPropertyOrder;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.ObjectReader;
import com.fasterxml.jackson.databind.ObjectWriter;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.processor.api.RecordMetadata;

/**
 * The Kafka Streams contender of the kstream benchmark (see benchmarks/README.md).
 *
 * <p>Jobs, written with the DSL as its documentation shows:
 *
 * <ul>
 *   <li>{@code --job stateless} (workload 1): JSON decode, filter (kind click or purchase and
 *       amount at least 1), map (amount to integer cents), JSON encode, sink;
 *   <li>{@code --job window} (workloads 2, 3 and recovery): a keyed tumbling-window count in a
 *       RocksDB window store with no grace, one final result per key and window when the window
 *       closes ({@code suppress(untilWindowCloses)}); value {@code {"start","end","value"}}.
 * </ul>
 *
 * <p>One stream thread, {@code processing.guarantee} from {@code --guarantee}, {@code
 * commit.interval.ms} from {@code --commit-interval}, no standby replicas. A pass-through
 * processor right after the source tracks the offsets of the records the job was fed against the
 * end offsets the harness captured; once every partition is done the main thread calls {@code
 * close()}, which commits (under exactly-once: the transaction) before it returns. Then the
 * report line is printed. With {@code --forever} the job runs until it is killed.
 */
public final class BenchApp {
  private BenchApp() {}

  // ------------------------------------------------------------------ the records

  /** An input event: {@code {"user": "u1", "kind": "click", "amount": 12.5, "ts": 17...}}. */
  public static final class Event {
    public String user;
    public String kind;
    public double amount;
    public long ts;
  }

  /** Workload 1's output: the amount in integer cents, the other fields kept. */
  @JsonPropertyOrder({"user", "kind", "cents", "ts"})
  public static final class OutEvent {
    public String user;
    public String kind;
    public long cents;
    public long ts;
  }

  /** A final window count: the same fields as kstream's and Quix's results. */
  @JsonPropertyOrder({"start", "end", "value"})
  public static final class WindowCount {
    public long start;
    public long end;
    public long value;

    WindowCount(long start, long end, long value) {
      this.start = start;
      this.end = end;
      this.value = value;
    }
  }

  static final ObjectMapper MAPPER =
      new ObjectMapper().configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);

  static <T> Serde<T> jsonSerde(Class<T> type) {
    ObjectReader reader = MAPPER.readerFor(type);
    ObjectWriter writer = MAPPER.writerFor(type);
    return Serdes.serdeFrom(
        (topic, value) -> {
          try {
            return value == null ? null : writer.writeValueAsBytes(value);
          } catch (Exception e) {
            throw new SerializationException(e);
          }
        },
        (topic, bytes) -> {
          try {
            return bytes == null ? null : reader.readValue(bytes);
          } catch (Exception e) {
            throw new SerializationException(e);
          }
        });
  }

  static final Set<String> KEPT_KINDS = Set.of("click", "purchase");

  static boolean keep(Event e) {
    return KEPT_KINDS.contains(e.kind) && e.amount >= 1.0;
  }

  static OutEvent transform(Event e) {
    OutEvent o = new OutEvent();
    o.user = e.user;
    o.kind = e.kind;
    o.cents = Math.round(e.amount * 100);
    o.ts = e.ts;
    return o;
  }

  // ------------------------------------------------------------------ the stop condition

  /** Offsets fed to the job against the end offsets; counts down {@code done} at the end. */
  static final class Progress {
    final Map<Integer, Long> ends;
    final CountDownLatch done = new CountDownLatch(1);
    final long total;
    volatile double tFirst = 0;
    private final Set<Integer> remaining;

    Progress(Map<Integer, Long> ends) {
      this.ends = ends;
      long t = 0;
      remaining = new java.util.HashSet<>();
      for (Map.Entry<Integer, Long> e : ends.entrySet()) {
        t += e.getValue();
        if (e.getValue() > 0) {
          remaining.add(e.getKey());
        }
      }
      total = t;
      if (remaining.isEmpty()) {
        done.countDown();
      }
    }

    synchronized void partitionDone(int partition) {
      if (remaining.remove(partition) && remaining.isEmpty()) {
        done.countDown();
      }
    }
  }

  /** Passes every record on, then notes its offset (one per task: one input partition). */
  static final class Tap<V> implements FixedKeyProcessor<Bytes, V, V> {
    private final Progress progress;
    private FixedKeyProcessorContext<Bytes, V> ctx;
    private long end = -1;
    private boolean finished;

    Tap(Progress progress) {
      this.progress = progress;
    }

    @Override
    public void init(FixedKeyProcessorContext<Bytes, V> context) {
      ctx = context;
    }

    @Override
    public void process(FixedKeyRecord<Bytes, V> record) {
      if (progress.tFirst == 0) {
        progress.tFirst = System.currentTimeMillis() / 1000.0;
      }
      ctx.forward(record);
      if (finished) {
        return;
      }
      RecordMetadata m = ctx.recordMetadata().orElseThrow();
      if (end < 0) {
        end = progress.ends.getOrDefault(m.partition(), 0L);
      }
      if (m.offset() + 1 >= end) {
        finished = true;
        progress.partitionDone(m.partition());
      }
    }
  }

  // ------------------------------------------------------------------ topologies

  static Topology stateless(Args a, Progress p) {
    StreamsBuilder b = new StreamsBuilder();
    KStream<Bytes, Event> in = b.stream(a.input, Consumed.with(Serdes.Bytes(), jsonSerde(Event.class)));
    if (p != null) {
      in = in.processValues(() -> new Tap<>(p));
    }
    in.filter((k, e) -> keep(e))
        .mapValues(BenchApp::transform)
        .to(a.output, Produced.with(Serdes.Bytes(), jsonSerde(OutEvent.class)));
    return b.build();
  }

  static Topology windowCount(Args a, Progress p) {
    StreamsBuilder b = new StreamsBuilder();
    KStream<Bytes, Event> in = b.stream(a.input, Consumed.with(Serdes.Bytes(), jsonSerde(Event.class)));
    if (p != null) {
      in = in.processValues(() -> new Tap<>(p));
    }
    in.groupByKey()
        .windowedBy(TimeWindows.ofSizeWithNoGrace(Duration.ofMillis(a.windowMs)))
        .count()
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .map((w, n) -> KeyValue.pair(w.key(), new WindowCount(w.window().start(), w.window().end(), n)))
        .to(a.output, Produced.with(Serdes.Bytes(), jsonSerde(WindowCount.class)));
    return b.build();
  }

  static Properties config(Args a) {
    Properties c = new Properties();
    c.put(StreamsConfig.APPLICATION_ID_CONFIG, a.group);
    c.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.bootstrap);
    c.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    c.put(
        StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
        a.exactlyOnce ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
    c.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, a.commitIntervalMs);
    c.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, 0);
    c.put(StreamsConfig.STATE_DIR_CONFIG, a.stateDir);
    c.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    if (!a.instanceId.isEmpty()) {
      c.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG), a.instanceId);
    }
    return c;
  }

  // ------------------------------------------------------------------ main

  public static void main(String[] argv) throws Exception {
    Args a = Args.parse(argv);
    Progress progress = a.forever ? null : new Progress(a.ends);
    Topology topology =
        switch (a.job) {
          case "stateless" -> stateless(a, progress);
          case "window" -> windowCount(a, progress);
          default -> throw new IllegalArgumentException("--job stateless|window, not " + a.job);
        };
    KafkaStreams streams = new KafkaStreams(topology, config(a));
    Throwable[] failure = new Throwable[1];
    CountDownLatch failed = new CountDownLatch(1);
    streams.setUncaughtExceptionHandler(
        e -> {
          failure[0] = e;
          failed.countDown();
          if (progress != null) {
            progress.done.countDown();
          }
          return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    streams.start();
    if (progress == null) {
      failed.await(); // --forever: until killed, or until the job fails
      streams.close(Duration.ofSeconds(30));
      failure[0].printStackTrace();
      System.exit(1);
    }
    progress.done.await();
    streams.close(Duration.ofMinutes(5)); // commits: the final transaction / offsets
    double tEnd = System.currentTimeMillis() / 1000.0;
    if (failure[0] != null) {
      failure[0].printStackTrace();
      System.exit(1);
    }
    System.out.printf(
        "BENCH_REPORT {\"contender\": \"kafka_streams_%s\", \"records_in\": %d, "
            + "\"records_out\": -1, \"t_first\": %.3f, \"t_end\": %.3f}%n",
        a.job, progress.total, progress.tFirst, tEnd);
    System.out.flush();
    System.exit(0);
  }

  /** The contender options the Python launcher passes (contenders/kafkastreams.py). */
  static final class Args {
    String job = "";
    String bootstrap = "";
    String input = "";
    String output = "";
    String group = "";
    Map<Integer, Long> ends = new HashMap<>();
    boolean exactlyOnce;
    long windowMs = 60_000;
    long commitIntervalMs = 1_000;
    String stateDir = "";
    String instanceId = "";
    boolean forever;

    static Args parse(String[] argv) {
      Args a = new Args();
      for (int i = 0; i < argv.length; i++) {
        String k = argv[i];
        if (k.equals("--forever")) {
          a.forever = true;
          continue;
        }
        if (i + 1 >= argv.length) {
          throw new IllegalArgumentException(k + " needs a value");
        }
        String v = argv[++i];
        switch (k) {
          case "--job" -> a.job = v;
          case "--bootstrap" -> a.bootstrap = v;
          case "--input" -> a.input = v;
          case "--output" -> a.output = v;
          case "--group" -> a.group = v;
          case "--ends" -> {
            for (String pair : v.split(",")) {
              if (!pair.isEmpty()) {
                String[] po = pair.split("=");
                a.ends.put(Integer.parseInt(po[0]), Long.parseLong(po[1]));
              }
            }
          }
          case "--guarantee" -> a.exactlyOnce = v.equals("exactly-once");
          case "--window-ms" -> a.windowMs = Long.parseLong(v);
          case "--commit-interval-ms" -> a.commitIntervalMs = Long.parseLong(v);
          case "--state-dir" -> a.stateDir = v;
          case "--instance-id" -> a.instanceId = v;
          default -> throw new IllegalArgumentException("unknown option " + k);
        }
      }
      return a;
    }
  }
}
