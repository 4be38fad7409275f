package deploytest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
