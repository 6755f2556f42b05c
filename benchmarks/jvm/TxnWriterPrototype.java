// A prototype, not drainer: issue 27's Kafka sink with its one transactional producer on the
// Spark server instead of the driver, as a DataSource V2 writer. Measured by kafka_sink.py's
// `jvm_writer` path; see benchmarks/README.md ("Issue 27, thirteenth part").
//
// One transaction is one producer: the driver's BatchWrite opens it (initTransactions fences an
// older attempt of the same transactional.id), the tasks send through it, the BatchWrite sends
// the run's marker and commits. That works where the tasks share the driver's JVM (`local[*]`);
// the tasks' classes are loaded apart from the driver's (Connect's session class loaders), so
// the producer is handed over in the JVM's one Properties table. The jar and kafka-clients must
// be on the server's own class path (spark.driver.extraClassPath), not a session artifact.
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

// options: transactional.id, topic, marker_topic, run, and kafka.* producer settings;
// rows: value (binary), key (binary, nullable), source (string: topic/partition/offset)
public class TxnWriterPrototype implements TableProvider {
  static final Map<Object, Object> SHARED = System.getProperties();

  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return new StructType();
  }

  public boolean supportsExternalMetadata() {
    return true;
  }

  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    return new Sink(schema);
  }

  static class Sink implements Table, SupportsWrite {
    final StructType schema;

    Sink(StructType schema) {
      this.schema = schema;
    }

    public String name() {
      return "drainer_txn_writer_prototype";
    }

    public StructType schema() {
      return schema;
    }

    public Set<TableCapability> capabilities() {
      return Set.of(TableCapability.BATCH_WRITE);
    }

    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      Map<String, String> options = new HashMap<>(info.options().asCaseSensitiveMap());
      StructType rows = info.schema();
      return new WriteBuilder() {
        public Write build() {
          return new Write() {
            public BatchWrite toBatch() {
              return new Transaction(options, rows);
            }
          };
        }
      };
    }
  }

  static class Transaction implements BatchWrite {
    final Map<String, String> options;
    final StructType rows;
    final String producerKey, failedKey;

    Transaction(Map<String, String> options, StructType rows) {
      this.options = options;
      this.rows = rows;
      String tid = options.get("transactional.id");
      producerKey = "drainer.prototype.producer." + tid;
      failedKey = "drainer.prototype.failed." + tid;
      Properties settings = new Properties();
      options.forEach((k, v) -> { if (k.startsWith("kafka.")) settings.put(k.substring(6), v); });
      settings.put("transactional.id", tid);
      settings.put("key.serializer", ByteArraySerializer.class.getName());
      settings.put("value.serializer", ByteArraySerializer.class.getName());
      KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(settings);
      producer.initTransactions();
      producer.beginTransaction();
      SHARED.put(producerKey, producer);
      SHARED.put(failedKey, new AtomicReference<Exception>());
    }

    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
      List<String> names = Arrays.asList(rows.fieldNames());
      return new Writers(producerKey, failedKey, options.get("topic"), options.get("run"),
          names.indexOf("value"), names.indexOf("key"), names.indexOf("source"));
    }

    @SuppressWarnings("unchecked")
    public void commit(WriterCommitMessage[] messages) {
      var producer = (KafkaProducer<byte[], byte[]>) SHARED.remove(producerKey);
      var failed = (AtomicReference<Exception>) SHARED.remove(failedKey);
      try {
        producer.flush();
        if (failed.get() != null) {
          throw new RuntimeException("a record was not produced: " + failed.get(), failed.get());
        }
        long records = Arrays.stream(messages).mapToLong(m -> ((Sent) m).records).sum();
        byte[] run = options.get("run").getBytes();
        byte[] marker = ("{\"records\": " + records + "}").getBytes();
        producer.send(new ProducerRecord<>(options.get("marker_topic"), run, marker));
        producer.commitTransaction();
      } catch (RuntimeException e) {
        producer.abortTransaction();
        throw e;
      } finally {
        producer.close();
      }
    }

    @SuppressWarnings("unchecked")
    public void abort(WriterCommitMessage[] messages) {
      var producer = (KafkaProducer<byte[], byte[]>) SHARED.remove(producerKey);
      SHARED.remove(failedKey);
      if (producer != null) {
        try {
          producer.abortTransaction();
        } finally {
          producer.close();
        }
      }
    }
  }

  record Sent(long records) implements WriterCommitMessage {}

  record Writers(String producerKey, String failedKey, String topic, String run, int value,
      int key, int source) implements DataWriterFactory {
    @SuppressWarnings("unchecked")
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      var producer = (KafkaProducer<byte[], byte[]>) SHARED.get(producerKey);
      var failed = (AtomicReference<Exception>) SHARED.get(failedKey);
      Callback delivered = (metadata, e) -> { if (e != null) failed.compareAndSet(null, e); };
      byte[] runHeader = run.getBytes();
      return new DataWriter<InternalRow>() {
        long records = 0;

        public void write(InternalRow row) {
          byte[] k = key < 0 || row.isNullAt(key) ? null : row.getBinary(key);
          List<Header> headers = List.of(
              new RecordHeader("drainer.run", runHeader),
              new RecordHeader("drainer.source", row.getUTF8String(source).getBytes()));
          producer.send(new ProducerRecord<>(topic, null, k, row.getBinary(value), headers), delivered);
          records++;
        }

        public WriterCommitMessage commit() {
          return new Sent(records);
        }

        public void abort() {}

        public void close() {}
      };
    }
  }
}
