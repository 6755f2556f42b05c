// Prints what the Kafka sink's Java writer makes of the protocol it is handed (for
// tests/unit/test_kafka_writer_protocol.py): the marker filled from a template, and the kind of
// each exception class named on the command line. In package drainer to reach its helpers.
package drainer;

import java.util.Map;
import java.util.TreeMap;

public class ProtocolCheck {
  public static void main(String[] args) throws Exception {
    // args: template, produced token, bytes token, kinds, then topic=records:bytes ... -- classes
    Map<String, long[]> produced = new TreeMap<>();
    int i = 4;
    for (; i < args.length && !args[i].equals("--"); i++) {
      String[] topic = args[i].split("=", 2);
      String[] counts = topic[1].split(":");
      produced.put(topic[0], new long[] {Long.parseLong(counts[0]), Long.parseLong(counts[1])});
    }
    System.out.println(KafkaTxnSink.fill(args[0], args[1], args[2], produced));
    for (i++; i < args.length; i++) {
      Throwable error = (Throwable) Class.forName(args[i]).getConstructor(String.class)
          .newInstance("x");
      System.out.println(KafkaTxnSink.kindOf(new RuntimeException("outer", error), args[3]));
    }
  }
}
