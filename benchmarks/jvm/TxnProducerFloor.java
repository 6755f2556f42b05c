// The JVM's transactional producer on the records producer_floor.py gives drainer's Python
// loop: what a producer on the Spark server (issue 27) would cost, measured, not guessed.
// Built and run by benchmarks/producer_floor.py against Spark's own kafka-clients jar.
import java.lang.management.ManagementFactory;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnProducerFloor {
  // args: bootstrap topic records rounds runHeader [key=value producer settings...]
  public static void main(String[] args) throws Exception {
    String topic = args[1];
    int records = Integer.parseInt(args[2]);
    int rounds = Integer.parseInt(args[3]);
    byte[] run = args[4].getBytes();
    Properties settings = new Properties();
    settings.put("bootstrap.servers", args[0]);
    settings.put("transactional.id", "floor-" + topic);
    settings.put("key.serializer", ByteArraySerializer.class.getName());
    settings.put("value.serializer", ByteArraySerializer.class.getName());
    for (int i = 5; i < args.length; i++) {
      String[] kv = args[i].split("=", 2);
      settings.put(kv[0], kv[1]);
    }
    // the records producer_floor.records() builds: 100-byte values, 1,000 keys, a source each
    byte[][] values = new byte[records][], keys = new byte[records][], sources = new byte[records][];
    String pad = "x".repeat(100);
    for (int i = 0; i < records; i++) {
      values[i] = (pad + i).getBytes();
      keys[i] = ("key-" + (i % 1000)).getBytes();
      sources[i] = ("bench-" + (i % 3) + "/" + (i % 4) + "/" + i).getBytes();
    }
    var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(settings)) {
      producer.initTransactions();
      for (int round = 0; round < rounds; round++) {
        long cpu = os.getProcessCpuTime(), wall = System.nanoTime();
        producer.beginTransaction();
        for (int i = 0; i < records; i++) {
          List<Header> headers =
              List.of(new RecordHeader("drainer.run", run), new RecordHeader("drainer.source", sources[i]));
          producer.send(new ProducerRecord<>(topic, null, keys[i], values[i], headers));
        }
        producer.commitTransaction();
        System.out.printf(
            "{\"round\": %d, \"wall_s\": %.3f, \"cpu_s\": %.3f}%n",
            round, (System.nanoTime() - wall) / 1e9, (os.getProcessCpuTime() - cpu) / 1e9);
      }
    }
  }
}
