// drainer's Kafka sink, producing on the Spark server: one transactional KafkaProducer in the
// server's JVM, shared by the write's tasks (they run in that JVM on a `local[*]` master).
// docs/kafka-sink.md says why it is exactly once; spark_jobs/sinks/kafka/server.py drives it.
//
// The protocol is drainer.sinks.kafka.protocol's, handed over as options, never defined here:
// the header names (`run_header_name`, `source_header_name`), the marker's JSON as a template
// with two placeholders for the counts only this producer knows (`fill`), and the kinds of
// failure as `kind=ExceptionClass,...;...` (`kinds`, asked in order for each cause).
//
// A run's attempt is one transaction, found by its key in OPEN:
//   - a write with `open=true` creates the producer, fences every older attempt of the drain
//     (`initTransactions` on the drain's transactional.id) and begins the transaction; its
//     tasks send the rows; its commit flushes them, so every record is on the broker (or its
//     error known) when the write returns. Further writes (the dead letters) add to it.
//     The fence and the begin (broker round trips, ~0.1 s) run beside the tasks' first reads:
//     a task's first send, the write's commit and the transaction's end wait for them, and a
//     failed open fails each of those with its own kind.
//   - the driver then checks its Postgres lease and reads this source with `action=commit`:
//     the marker (which carries the counts per topic) is sent and the transaction committed,
//     once (a repeated read returns the same result). `action=abort` aborts it. An attempt
//     whose transaction a newer attempt of the drain closed is `fenced`, as a Kafka producer
//     fenced by the newer one's `initTransactions` would be.
// A failure names its kind for the driver: `drainer-kafka-sink[kind][source][topic] detail`.
package drainer;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.LocalScan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;

public class KafkaTxnSink implements TableProvider {
  /** The open (and last committed) transaction of each attempt, by its key. */
  static final ConcurrentHashMap<String, RunTxn> OPEN = new ConcurrentHashMap<>();
  /** Keys of attempts whose transaction a newer attempt of the drain closed (bounded). */
  static final Set<String> FENCED = ConcurrentHashMap.newKeySet();

  static final StructType RESULT = new StructType(new StructField[] {
      DataTypes.createStructField("topic", DataTypes.StringType, false),
      DataTypes.createStructField("records", DataTypes.LongType, false),
      DataTypes.createStructField("bytes", DataTypes.LongType, false),
      DataTypes.createStructField("marker_offset", DataTypes.LongType, false),
      // where the attempt's time went on the server, `step=ms;...` (the run's phases)
      DataTypes.createStructField("steps", DataTypes.StringType, false)});

  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return options.containsKey("action") ? RESULT : new StructType();
  }

  public boolean supportsExternalMetadata() {
    return true;
  }

  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    return new SinkTable(schema);
  }

  // failures the driver turns into drainer's own errors

  static RuntimeException failure(String kind, String source, String topic, String detail) {
    return new IllegalStateException("drainer-kafka-sink[" + kind + "]["
        + (source == null ? "" : source)
        + "][" + (topic == null ? "" : topic) + "] " + detail);
  }

  /** The kind of `error` by the driver's table (`kind=Class,Class;...`): the first kind one
   * of whose classes `error` or a cause is (by class or superclass), else `unavailable`. */
  static String kindOf(Throwable error, String kinds) {
    for (Throwable e = error; e != null; e = e.getCause()) {
      for (String entry : (kinds == null ? "" : kinds).split(";")) {
        int eq = entry.indexOf('=');
        if (eq < 0) continue;
        for (String name : entry.substring(eq + 1).split(",")) {
          for (Class<?> c = e.getClass(); c != null; c = c.getSuperclass()) {
            if (c.getName().equals(name)) return entry.substring(0, eq);
          }
        }
      }
    }
    return "unavailable";
  }

  /** The marker's JSON: the driver's template with the counts in place of its placeholders
   * (drainer.sinks.kafka.protocol.fill: topics with records only, sorted, compact). */
  static String fill(String template, String producedToken, String bytesToken,
      Map<String, long[]> produced) {
    StringBuilder counts = new StringBuilder("{");
    long bytes = 0;
    for (Map.Entry<String, long[]> e : new TreeMap<>(produced).entrySet()) {
      bytes += e.getValue()[1];
      if (e.getValue()[0] == 0) continue;
      counts.append(counts.length() == 1 ? "" : ",").append('"').append(e.getKey())
          .append("\":").append(e.getValue()[0]);
    }
    counts.append('}');
    return replaceOnce(replaceOnce(template, producedToken, "\"produced\":" + counts),
        bytesToken, "\"bytes\":" + bytes);
  }

  static String replaceOnce(String text, String token, String by) {
    int at = text.indexOf(token);
    if (at < 0) throw new IllegalArgumentException("the marker template lacks " + token);
    return text.substring(0, at) + by + text.substring(at + token.length());
  }

  static String describe(Throwable e) {
    String text = e.getClass().getSimpleName() + ": " + e.getMessage();
    return text.replace('\n', ' ');
  }

  /** One attempt's transaction: its producer, its first failure, what it produced. */
  static final class RunTxn {
    final String key;
    final String tid;
    final String kinds;
    final KafkaProducer<byte[], byte[]> producer;
    final AtomicReference<RuntimeException> failed = new AtomicReference<>();
    final Map<String, long[]> produced = new TreeMap<>(); // topic -> {records, bytes}
    volatile String state = "open"; // open, committed or aborted; read by the writes' threads
    List<Object[]> result;
    // milliseconds per step, for the run's phases: open (producer made, initTransactions,
    // beginTransaction), flush (the writes' last records), marker, commit, close
    final Map<String, Double> steps = new TreeMap<>();
    // initTransactions (the fence) and beginTransaction, on a thread of their own (`begin`)
    final CompletableFuture<Void> opened = new CompletableFuture<>();

    synchronized void took(String step, long sinceNanos) {
      steps.merge(step, (System.nanoTime() - sinceNanos) / 1e6, Double::sum);
    }

    String steps() {
      StringBuilder text = new StringBuilder();
      for (Map.Entry<String, Double> e : steps.entrySet()) {
        text.append(text.length() == 0 ? "" : ";").append(e.getKey()).append('=')
            .append(String.format(java.util.Locale.ROOT, "%.1f", e.getValue()));
      }
      return text.toString();
    }

    RunTxn(String key, String tid, String kinds, KafkaProducer<byte[], byte[]> producer) {
      this.key = key;
      this.tid = tid;
      this.kinds = kinds;
      this.producer = producer;
    }

    void check() {
      RuntimeException e = failed.get();
      if (e != null) throw e;
    }

    /** Fence older producers of the drain and begin the transaction, beside the write's
     * planning and its tasks' reads; `topic` names where a failure is reported. */
    void begin(String topic, long since) {
      Thread opening = new Thread(() -> {
        Throwable error = null;
        try {
          producer.initTransactions(); // fences every older producer of the drain
          producer.beginTransaction();
          took("open", since);
        } catch (Throwable e) { // any: a task waits on `opened` until it is completed
          error = e;
        }
        // `opened` completes under the lock `abort` takes: an abort sees the open ended (and
        // ends the transaction itself), or it left that to this thread
        synchronized (this) {
          if (error != null) {
            producer.close(Duration.ZERO);
            opened.completeExceptionally(
                failure("init_" + kindOf(error, kinds), null, topic, describe(error)));
          } else if ("aborted".equals(state)) {
            end(true);
            opened.completeExceptionally(
                failure("gone", null, topic, "the attempt's transaction was aborted"));
          } else {
            opened.complete(null);
          }
        }
      }, "drainer-kafka-sink-open");
      opening.setDaemon(true);
      opening.start();
    }

    /** Waits for `begin`; its failure, thrown. */
    void awaitOpen() {
      try {
        opened.join();
      } catch (CompletionException e) {
        throw (RuntimeException) e.getCause();
      }
    }

    synchronized void add(String topic, long records, long bytes) {
      long[] sum = produced.computeIfAbsent(topic, t -> new long[2]);
      sum[0] += records;
      sum[1] += bytes;
    }

    List<Object[]> commit(String markerTopic, int partition, String markerKey,
        String template, String producedToken, String bytesToken) {
      awaitOpen(); // outside the lock, which the open's thread takes to end
      return committed(markerTopic, partition, markerKey, template, producedToken, bytesToken);
    }

    synchronized List<Object[]> committed(String markerTopic, int partition, String markerKey,
        String template, String producedToken, String bytesToken) {
      if ("committed".equals(state)) return result;
      if (!"open".equals(state)) {
        throw failure("gone", null, markerTopic, "the attempt's transaction was " + state);
      }
      long closing = 0;
      try {
        long t = System.nanoTime();
        producer.flush();
        check();
        String marker = fill(template, producedToken, bytesToken, produced);
        java.util.concurrent.Future<org.apache.kafka.clients.producer.RecordMetadata> sent =
            producer.send(new ProducerRecord<>(markerTopic, partition,
                markerKey.getBytes(StandardCharsets.UTF_8),
                marker.getBytes(StandardCharsets.UTF_8)));
        producer.flush(); // sent now, not after linger.ms: the commit waits for it anyway
        long offset = sent.get().offset();
        took("marker", t);
        t = System.nanoTime();
        producer.commitTransaction();
        took("commit", t);
        state = "committed";
        closing = System.nanoTime();
        producer.close(Duration.ofSeconds(5));
        took("close", closing);
        result = new ArrayList<>();
        String steps = steps();
        for (Map.Entry<String, long[]> e : produced.entrySet()) {
          result.add(new Object[] {e.getKey(), e.getValue()[0], e.getValue()[1], offset, steps});
        }
        if (result.isEmpty()) result.add(new Object[] {markerTopic, 0L, 0L, offset, steps});
        return result;
      } catch (RuntimeException | InterruptedException | ExecutionException e) {
        abort();
        if (e instanceof IllegalStateException && e.getMessage() != null
            && e.getMessage().startsWith("drainer-kafka-sink[")) {
          throw (IllegalStateException) e;
        }
        throw failure(kindOf(e, kinds), null, markerTopic, describe(e));
      } finally {
        if (closing == 0) producer.close(Duration.ofSeconds(5));
      }
    }

    /** Ends the attempt's transaction uncommitted: now when its open is over, else its open's
     * thread does once the broker answers, so an abort (a driver's Ctrl-C) never waits on it. */
    synchronized void abort() {
      if (!"open".equals(state)) return;
      state = "aborted";
      if (opened.isDone()) end(!opened.isCompletedExceptionally());
    }

    /** The transaction aborted where one began, and the producer closed. */
    private void end(boolean began) {
      try {
        if (began) producer.abortTransaction();
      } catch (KafkaException e) {
        // a fenced or failed producer's transaction is aborted by the coordinator
      } finally {
        producer.close(Duration.ZERO);
      }
    }
  }

  static final class SinkTable implements Table, SupportsWrite, SupportsRead {
    final StructType schema;

    SinkTable(StructType schema) {
      this.schema = schema;
    }

    public String name() {
      return "drainer_kafka_sink";
    }

    public StructType schema() {
      return schema;
    }

    public Set<TableCapability> capabilities() {
      return Set.of(TableCapability.BATCH_WRITE, TableCapability.BATCH_READ);
    }

    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      Map<String, String> options = new HashMap<>(info.options().asCaseSensitiveMap());
      StructType rows = info.schema();
      return new WriteBuilder() {
        public Write build() {
          return new Write() {
            public BatchWrite toBatch() {
              return new Produce(options, rows);
            }
          };
        }
      };
    }

    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      Map<String, String> given = new HashMap<>(options.asCaseSensitiveMap());
      return () -> new Control(given);
    }
  }

  /** A write into the attempt's transaction, opening it when asked to. */
  static final class Produce implements BatchWrite {
    final Map<String, String> options;
    final StructType rows;
    final RunTxn txn;

    Produce(Map<String, String> options, StructType rows) {
      this.options = options;
      this.rows = rows;
      String key = options.get("key");
      txn = "true".equals(options.get("open")) ? open(key, options) : OPEN.get(key);
      if (txn == null && FENCED.contains(key)) {
        throw failure("fenced", null, options.get("topic"), "a newer attempt opened its own");
      }
      if (txn == null || !"open".equals(txn.state)) {
        throw failure("gone", null, options.get("topic"),
            "the attempt's transaction is no longer open on the Spark server");
      }
    }

    static RunTxn open(String key, Map<String, String> options) {
      RunTxn same = OPEN.get(key);
      if (same != null && "open".equals(same.state)) return same; // the same write, planned again
      String tid = options.get("transactional.id");
      Properties settings = new Properties();
      options.forEach((k, v) -> {
        if (k.startsWith("kafka.")) settings.put(k.substring(6), v);
      });
      settings.put("transactional.id", tid);
      settings.put("key.serializer", ByteArraySerializer.class.getName());
      settings.put("value.serializer", ByteArraySerializer.class.getName());
      long opening = System.nanoTime();
      KafkaProducer<byte[], byte[]> producer;
      try {
        producer = new KafkaProducer<>(settings);
      } catch (KafkaException e) {
        throw failure("settings", null, options.get("topic"), describe(e));
      }
      RunTxn txn = new RunTxn(key, tid, options.get("kinds"), producer);
      OPEN.put(key, txn);
      txn.begin(options.get("topic"), opening);
      // once the fence is up, older attempts of the drain are fenced: their producers closed
      txn.opened.thenRunAsync(() -> OPEN.forEach((k, old) -> {
        if (old.tid.equals(tid) && !k.equals(key)) {
          OPEN.remove(k);
          if (FENCED.size() > 1000) FENCED.clear(); // a zombie's answer, not a record to keep
          FENCED.add(k);
          old.abort();
        }
      }));
      return txn;
    }

    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
      List<String> names = List.of(rows.fieldNames());
      int headers = names.indexOf("headers");
      boolean textHeaders = headers >= 0 && ((StructType) ((ArrayType) rows.fields()[headers]
          .dataType()).elementType()).fields()[1].dataType() instanceof StringType;
      String run = options.get("run_header");
      return new Writers(txn.key, options.get("topic"), run, options.get("run_header_name"),
          options.get("source_header_name"), txn.kinds, names.indexOf("value"),
          names.indexOf("key"), headers, textHeaders, names.indexOf("partition"),
          names.indexOf("source"), "true".equals(options.get("tombstones")));
    }

    public boolean useCommitCoordinator() {
      return false;
    }

    public void commit(WriterCommitMessage[] messages) {
      txn.awaitOpen(); // a write without rows still fails on a failed open
      long records = 0;
      long bytes = 0;
      for (WriterCommitMessage m : messages) {
        records += ((Sent) m).records;
        bytes += ((Sent) m).bytes;
      }
      long t = System.nanoTime();
      try {
        txn.producer.flush(); // every record on the broker, or its error known
        txn.took("flush", t);
      } catch (KafkaException e) {
        throw failure(kindOf(e, txn.kinds), null, options.get("topic"), describe(e));
      }
      txn.check();
      txn.add(options.get("topic"), records, bytes);
    }

    public void abort(WriterCommitMessage[] messages) {
      OPEN.remove(txn.key, txn);
      txn.abort();
    }
  }

  record Sent(long records, long bytes) implements WriterCommitMessage {}

  record Writers(String key, String topic, String run, String runName, String sourceName,
      String kinds, int value, int recordKey, int headers, boolean textHeaders, int partition,
      int source, boolean tombstones) implements DataWriterFactory {
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      TaskContext task = TaskContext.get();
      if (task != null && task.attemptNumber() > 0) { // its first attempt may have sent rows
        throw failure("unavailable", null, topic, "Spark retried a task of the write, which "
            + "would produce its rows twice into the run's transaction");
      }
      RunTxn txn = OPEN.get(key);
      if (txn == null) {
        throw failure("gone", null, topic,
            "the attempt's transaction is not open in this JVM: the server-side producer "
            + "needs a local[*] master");
      }
      byte[] runHeader = run == null ? null : run.getBytes(StandardCharsets.UTF_8);
      return new RowWriter(this, txn, runHeader);
    }
  }

  static final class RowWriter implements DataWriter<InternalRow> {
    final Writers at;
    final RunTxn txn;
    final byte[] runHeader;
    long records = 0;
    long bytes = 0;
    boolean begun; // the transaction's open awaited, once per writer

    RowWriter(Writers at, RunTxn txn, byte[] runHeader) {
      this.at = at;
      this.txn = txn;
      this.runHeader = runHeader;
    }

    public void write(InternalRow row) {
      if (!begun) {
        txn.awaitOpen();
        begun = true;
      }
      txn.check();
      byte[] src = at.source() < 0 || row.isNullAt(at.source()) ? null : row.getBinary(at.source());
      // the source's text is made only for a failure that names it, never per record
      // a null value: a tombstone where the sink upserts (protocol.tombstones), else a failure
      boolean tombstone = row.isNullAt(at.value());
      if (tombstone && !at.tombstones()) throw failure("no_value", text(src), at.topic(), "");
      byte[] value = tombstone ? null : row.getBinary(at.value());
      byte[] key = at.recordKey() < 0 || row.isNullAt(at.recordKey()) ? null
          : row.getBinary(at.recordKey());
      Integer partition = at.partition() < 0 || row.isNullAt(at.partition()) ? null
          : row.getInt(at.partition());
      List<Header> headers = new ArrayList<>(3);
      if (at.headers() >= 0 && !row.isNullAt(at.headers())) {
        ArrayData own = row.getArray(at.headers());
        for (int i = 0; i < own.numElements(); i++) {
          InternalRow h = own.getStruct(i, 2);
          byte[] v = h.isNullAt(1) ? null
              : at.textHeaders() ? h.getUTF8String(1).getBytes() : h.getBinary(1);
          headers.add(new RecordHeader(h.getUTF8String(0).toString(), v));
        }
      }
      if (runHeader != null) headers.add(new RecordHeader(at.runName(), runHeader));
      if (src != null) headers.add(new RecordHeader(at.sourceName(), src));
      Callback delivered = (metadata, e) -> {
        if (e != null) txn.failed.compareAndSet(null, failure(kindOf(e, at.kinds()), text(src),
            at.topic(), describe(e)));
      };
      try {
        txn.producer.send(new ProducerRecord<>(at.topic(), partition, key, value, headers),
            delivered);
      } catch (KafkaException e) {
        // A send refused because another task's record already failed the transaction must
        // name that record, not this one: the first failure is the one the user can fix.
        txn.failed.compareAndSet(null, failure(kindOf(e, at.kinds()), text(src), at.topic(),
            describe(e)));
      }
      txn.check();
      records++;
      bytes += (value == null ? 0 : value.length) + (key == null ? 0 : key.length);
    }

    static String text(byte[] source) {
      return source == null ? null : new String(source, StandardCharsets.UTF_8);
    }

    public WriterCommitMessage commit() {
      return new Sent(records, bytes);
    }

    public void abort() {}

    public void close() {}
  }

  /** `action=commit` or `action=abort` of an attempt's transaction, read as its counts.
   * A local scan: Spark takes its rows when it plans the read, on the driver, so the commit
   * costs no Spark job (a one-task job was ~60 ms of every run's commit). */
  static final class Control implements LocalScan {
    final Map<String, String> options;
    InternalRow[] done;

    Control(Map<String, String> options) {
      this.options = options;
    }

    public StructType readSchema() {
      return RESULT;
    }

    public synchronized InternalRow[] rows() {
      if (done != null) return done;
      String key = options.get("key");
      List<Object[]> rows = new ArrayList<>();
      if ("commit".equals(options.get("action"))) {
        RunTxn txn = OPEN.get(key);
        if (txn == null && FENCED.contains(key)) {
          throw failure("fenced", null, null, "a newer attempt opened its own");
        }
        if (txn == null) {
          throw failure("gone", null, null,
              "the attempt's transaction is no longer open on the Spark server");
        }
        rows = txn.commit(options.get("marker_topic"),
            Integer.parseInt(options.get("marker_partition")), options.get("marker_key"),
            options.get("marker_template"), options.get("marker_produced_token"),
            options.get("marker_bytes_token"));
      } else {
        RunTxn txn = OPEN.remove(key);
        if (txn != null) txn.abort();
      }
      InternalRow[] found = new InternalRow[rows.size()];
      for (int i = 0; i < found.length; i++) {
        Object[] r = rows.get(i);
        found[i] = new GenericInternalRow(new Object[] {UTF8String.fromString((String) r[0]),
            r[1], r[2], r[3], UTF8String.fromString((String) r[4])});
      }
      done = found;
      return done;
    }
  }
}
