package deploytest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeKafkaTopics stands in for the apache/kafka image's kafka-topics.sh
// (no broker CLI here): it accepts only the options kafka-topics.sh 4.x
// has, keeps topics as files and prints --describe in the real format.
const fakeKafkaTopics = `#!/usr/bin/env bash
set -euo pipefail
state=${FAKE_KAFKA_STATE:?}
echo "$*" >> "$state/calls"
action= topic= partitions= rf= server=
while [ $# -gt 0 ]; do
	case $1 in
	--bootstrap-server) server=$2; shift 2 ;;
	--list|--create|--describe) action=${1#--}; shift ;;
	--if-not-exists) shift ;;
	--topic) topic=$2; shift 2 ;;
	--partitions) partitions=$2; shift 2 ;;
	--replication-factor) rf=$2; shift 2 ;;
	*) echo "kafka-topics: unknown option $1" >&2; exit 2 ;;
	esac
done
[ -n "$server" ] || { echo "kafka-topics: --bootstrap-server is required" >&2; exit 2; }
[ -f "$state/down" ] && { echo "broker down" >&2; exit 1; }
case $action in
list) ls "$state/topics" ;;
create)
	[ -f "$state/topics/$topic" ] || echo "$partitions $rf" > "$state/topics/$topic" ;;
describe)
	read -r p r < "$state/topics/$topic"
	printf 'Topic: %s\tTopicId: x1\tPartitionCount: %s\tReplicationFactor: %s\tConfigs: \n' "$topic" "$p" "$r"
	for i in $(seq 0 $((p-1))); do printf '\tTopic: %s\tPartition: %d\tLeader: 1\n' "$topic" "$i"; done ;;
esac
`

func runCreateTopics(t *testing.T, state string, env map[string]string) (string, error) {
	t.Helper()
	bin := filepath.Join(state, "bin")
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "deploy", "kafka", "create-topics.sh"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "KAFKA_BIN=" + bin, "FAKE_KAFKA_STATE=" + state}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestCreateTopicsScript(t *testing.T) {
	state := t.TempDir()
	for _, d := range []string{"bin", "topics"} {
		if err := os.MkdirAll(filepath.Join(state, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(state, "bin", "kafka-topics.sh"), []byte(fakeKafkaTopics), 0o755); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"NOTIFLOW_KAFKA_BROKERS":            "k1:9092,k2:9092",
		"NOTIFLOW_KAFKA_PARTITIONS":         "12",
		"NOTIFLOW_KAFKA_REPLICATION_FACTOR": "3",
		"NOTIFLOW_TOPIC_DUE":                "due.t",
		"NOTIFLOW_TOPIC_DISPATCHED":         "dispatched.t",
		"NOTIFLOW_TOPIC_DLQ":                "dlq.t",
	}
	out, err := runCreateTopics(t, state, env)
	if err != nil {
		t.Fatalf("first run: %v\n%s", err, out)
	}
	for _, topic := range []string{"due.t", "dispatched.t", "dlq.t"} {
		b, err := os.ReadFile(filepath.Join(state, "topics", topic))
		if err != nil || strings.TrimSpace(string(b)) != "12 3" {
			t.Errorf("topic %s: %q, %v; want 12 partitions, replication 3", topic, b, err)
		}
	}
	calls, _ := os.ReadFile(filepath.Join(state, "calls"))
	if !strings.Contains(string(calls), "--bootstrap-server k1:9092,k2:9092 --create --if-not-exists --topic due.t --partitions 12 --replication-factor 3") {
		t.Errorf("unexpected kafka-topics calls:\n%s", calls)
	}

	// Idempotent.
	if out, err := runCreateTopics(t, state, env); err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}

	// A topic with another partition count fails the run, naming it, and
	// is left alone (no automatic --alter).
	if err := os.WriteFile(filepath.Join(state, "topics", "dlq.t"), []byte("6 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runCreateTopics(t, state, env)
	if err == nil || !strings.Contains(out, "dlq.t has 6 partitions") {
		t.Errorf("mismatched partitions: err %v, output:\n%s", err, out)
	}

	// Brokers required.
	delete(env, "NOTIFLOW_KAFKA_BROKERS")
	if out, err := runCreateTopics(t, state, env); err == nil || !strings.Contains(out, "NOTIFLOW_KAFKA_BROKERS") {
		t.Errorf("without brokers: err %v, output:\n%s", err, out)
	}
}

// kafkaToolsVersion is the broker version of scripts/deps.sh and of the
// apache/kafka image the Job and compose run the script in.
const kafkaToolsVersion = "4.1.1"

// realKafkaTopics returns a kafka-topics.sh that runs Kafka's own
// TopicCommand: the broker jars scripts/deps.sh installed (.deps/kafka/lib)
// plus org.apache.kafka:kafka-tools from Maven Central, fetched once into
// the user cache directory.
func realKafkaTopics(t *testing.T) string {
	t.Helper()
	lib := filepath.Join(repoRoot(t), ".deps", "kafka", "lib")
	if _, err := os.Stat(filepath.Join(lib, "kafka-clients-"+kafkaToolsVersion+".jar")); err != nil {
		t.Fatalf("Kafka %s jars missing (%v): run `make deps` (scripts/deps.sh up)", kafkaToolsVersion, err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	tools := filepath.Join(cache, "notiflow", "kafka-tools-"+kafkaToolsVersion)
	jar := filepath.Join(tools, "kafka-tools-"+kafkaToolsVersion+".jar")
	if _, err := os.Stat(jar); err != nil {
		mvn, err := exec.LookPath("mvn")
		if err != nil {
			t.Fatalf("kafka-tools %s is not cached in %s and mvn is not on PATH to fetch it", kafkaToolsVersion, tools)
		}
		cmd := exec.Command(mvn, "-B", "-q", "dependency:copy",
			"-Dartifact=org.apache.kafka:kafka-tools:"+kafkaToolsVersion, "-DoutputDirectory="+tools)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("fetch kafka-tools with mvn: %v\n%s", err, out)
		}
	}
	bin := t.TempDir()
	wrapper := "#!/usr/bin/env bash\nexec java -Xmx256m -cp '" + lib + "/*:" + tools + "/*' org.apache.kafka.tools.TopicCommand \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "kafka-topics.sh"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestCreateTopicsScriptRealBroker runs the script with Kafka's own
// kafka-topics against the local broker: the options it passes and the
// --describe output it parses are those of Kafka 4.1.
func TestCreateTopicsScriptRealBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JVM per kafka-topics call")
	}
	brokers := os.Getenv("NOTIFLOW_TEST_KAFKA")
	if brokers == "" {
		brokers = "127.0.0.1:9092"
	}
	bin := realKafkaTopics(t)
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	topics := []string{"deploytest.due." + suffix, "deploytest.dispatched." + suffix, "deploytest.dlq." + suffix}
	t.Cleanup(func() { // one JVM: --topic takes a regular expression for --delete
		exec.Command(filepath.Join(bin, "kafka-topics.sh"), "--bootstrap-server", brokers,
			"--delete", "--topic", `deploytest\..*\.`+suffix).Run()
	})
	run := func(partitions string) (string, error) {
		cmd := exec.Command("bash", filepath.Join(repoRoot(t), "deploy", "kafka", "create-topics.sh"))
		cmd.Env = append(os.Environ(), "KAFKA_BIN="+bin,
			"NOTIFLOW_KAFKA_BROKERS="+brokers, "NOTIFLOW_KAFKA_PARTITIONS="+partitions, "NOTIFLOW_KAFKA_REPLICATION_FACTOR=1",
			"NOTIFLOW_TOPIC_DUE="+topics[0], "NOTIFLOW_TOPIC_DISPATCHED="+topics[1], "NOTIFLOW_TOPIC_DLQ="+topics[2])
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("3")
	if err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	for _, topic := range topics {
		if !strings.Contains(out, "create-topics: "+topic+" ready (3 partitions") {
			t.Errorf("topic %s not reported ready:\n%s", topic, out)
		}
	}
	// A second run creates nothing (--if-not-exists) and reports the
	// partition mismatch; idempotency itself is covered by the fake above.
	out, err = run("4")
	if err == nil || !strings.Contains(out, topics[0]+" has 3 partitions, NOTIFLOW_KAFKA_PARTITIONS says 4") {
		t.Errorf("partition mismatch: err %v, output:\n%s", err, out)
	}
}
