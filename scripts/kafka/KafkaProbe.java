// Readiness probe for scripts/kafka.sh: a real Kafka round trip (Metadata via
// the Admin client: DescribeCluster, then ListTopics) against one bootstrap
// address, retried until it answers or the deadline passes.
//
//   java -cp "$KAFKA_HOME/libs/*" scripts/kafka/KafkaProbe.java HOST:PORT SECONDS
//
// Exit 0 and one line "nodes=... topics=..." on stdout once the broker answers;
// exit 1 with the last error on stderr when it did not within SECONDS.
// Run by the JDK's single-file source launcher, so nothing is compiled ahead.

import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;

public class KafkaProbe {
    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: KafkaProbe HOST:PORT SECONDS");
            System.exit(2);
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(args[1]));
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "deltapilot-kafka-probe");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "2000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "3000");
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "200");
        String last = "no attempt";
        // Bounded: at most one attempt per 200 ms until the deadline, each
        // attempt bounded by its own 3 s timeouts.
        try (Admin admin = Admin.create(p)) {
            for (int attempt = 0; attempt < 10_000 && System.nanoTime() < deadline; attempt++) {
                try {
                    var nodes = admin.describeCluster().nodes().get(3, TimeUnit.SECONDS);
                    var topics = admin.listTopics().names().get(3, TimeUnit.SECONDS);
                    if (!nodes.isEmpty()) {
                        System.out.println("nodes=" + nodes + " topics=" + topics);
                        return;
                    }
                    last = "the cluster reported no nodes";
                } catch (Exception e) {
                    last = e.toString();
                }
                Thread.sleep(200);
            }
        }
        System.err.println("KafkaProbe: no answer from " + args[0] + " within " + args[1] + " s: " + last);
        System.exit(1);
    }
}
