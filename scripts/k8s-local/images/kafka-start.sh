#!/bin/bash
# Entry point of the local Kafka image (notiflow/kafka:local): one KRaft
# node, broker and controller, for the local overlay's StatefulSet.
#
#   KAFKA_ADVERTISED_HOST  the name clients reach this broker by (required;
#                          the StatefulSet gives the pod's own DNS name)
#   KAFKA_DATA             log directory (default /var/lib/kafka/data); the
#                          storage is formatted on first start only
#   KAFKA_HEAP_OPTS        JVM heap (default -Xms256m -Xmx512m)
set -euo pipefail

host=${KAFKA_ADVERTISED_HOST:?KAFKA_ADVERTISED_HOST is required}
data=${KAFKA_DATA:-/var/lib/kafka/data}
java=(/opt/java/bin/java ${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m} -XX:+UseG1GC
	-Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties -cp '/opt/kafka/libs/*')
props=/tmp/server.properties

cat >"$props" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listeners=PLAINTEXT://:9092,CONTROLLER://localhost:9093
advertised.listeners=PLAINTEXT://$host:9092,CONTROLLER://localhost:9093
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
PROPS

mkdir -p "$data"
if [[ ! -f $data/meta.properties ]]; then
	id=$("${java[@]}" kafka.tools.StorageTool random-uuid)
	"${java[@]}" kafka.tools.StorageTool format --standalone -t "$id" -c "$props"
fi
exec "${java[@]}" kafka.Kafka "$props"
