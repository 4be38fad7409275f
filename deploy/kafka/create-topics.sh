#!/usr/bin/env bash
# Creates notiflow's Kafka topics, for clusters where the services may not
# create them (their start-up kafkax.EnsureTopics needs the CreateTopics ACL
# and is skipped by nothing: where the topics exist it is a no-op).
#
# Runs in the apache/kafka image (docker compose service kafka-topics, the
# Kubernetes Job notiflow-topics) and reads the same NOTIFLOW_* variables as
# the services, so topic names, partitions and replication agree:
#
#   NOTIFLOW_KAFKA_BROKERS             comma-separated bootstrap servers
#   NOTIFLOW_KAFKA_PARTITIONS          partitions per topic (default 12)
#   NOTIFLOW_KAFKA_REPLICATION_FACTOR  replication factor (default 1)
#   NOTIFLOW_TOPIC_DUE / _DISPATCHED / _DLQ   topic names
#
# Idempotent (--if-not-exists). An existing topic with a different partition
# count is reported and fails the run: adding partitions moves keys to other
# partitions (per-recipient order breaks for records in flight), so that is
# an operator's decision (kafka-topics.sh --alter), never automatic.
set -euo pipefail

brokers=${NOTIFLOW_KAFKA_BROKERS:?NOTIFLOW_KAFKA_BROKERS is required}
partitions=${NOTIFLOW_KAFKA_PARTITIONS:-12}
replication=${NOTIFLOW_KAFKA_REPLICATION_FACTOR:-1}
topics=(
	"${NOTIFLOW_TOPIC_DUE:-notify.due.v1}"
	"${NOTIFLOW_TOPIC_DISPATCHED:-notify.dispatched.v1}"
	"${NOTIFLOW_TOPIC_DLQ:-notify.dlq.v1}"
)
bin=${KAFKA_BIN:-/opt/kafka/bin}

# Wait for the brokers (a Job may start before Kafka is reachable).
for attempt in $(seq 1 60); do
	if "$bin/kafka-topics.sh" --bootstrap-server "$brokers" --list >/dev/null 2>&1; then
		break
	fi
	if [ "$attempt" -eq 60 ]; then
		echo "create-topics: brokers $brokers not reachable" >&2
		exit 1
	fi
	sleep 2
done

status=0
for topic in "${topics[@]}"; do
	"$bin/kafka-topics.sh" --bootstrap-server "$brokers" --create --if-not-exists \
		--topic "$topic" --partitions "$partitions" --replication-factor "$replication"
	have=$("$bin/kafka-topics.sh" --bootstrap-server "$brokers" --describe --topic "$topic" |
		grep -o 'PartitionCount: *[0-9]*' | grep -o '[0-9]*$' | head -n1)
	if [ "$have" != "$partitions" ]; then
		echo "create-topics: $topic has $have partitions, NOTIFLOW_KAFKA_PARTITIONS says $partitions" >&2
		status=1
	else
		echo "create-topics: $topic ready ($have partitions, replication $replication)"
	fi
done
exit "$status"
