// Prints how many requests of each type (and API version) the local Kafka
// broker has answered since it started, from its JMX request metrics, one
// "<type>/<version> <count>" line each. Take it before and after a run and
// subtract (bench/README.md, "What Kafka spends"). The broker's JMX agent
// must be listening on 127.0.0.1:9999: start it with
//   jcmd $(cat .deps/kafka/kafka.pid) ManagementAgent.start jmxremote.port=9999 \
//     jmxremote.host=127.0.0.1 jmxremote.authenticate=false jmxremote.ssl=false
// Run: jshell -q bench/tools/kafka-requests.jsh
import javax.management.ObjectName;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

var jmx = JMXConnectorFactory.connect(new JMXServiceURL("service:jmx:rmi:///jndi/rmi://127.0.0.1:9999/jmxrmi"));
var server = jmx.getMBeanServerConnection();
for (var name : server.queryNames(new ObjectName("kafka.network:type=RequestMetrics,name=RequestsPerSec,*"), null)) {
    long count = (Long) server.getAttribute(name, "Count");
    if (count > 0) System.out.println(name.getKeyProperty("request") + "/" + name.getKeyProperty("version") + " " + count);
}
jmx.close();
/exit
