package deploytest

// kafkaImage is the broker image of docker-compose.yml, also used by the
// Kubernetes topic-setup Job.
const kafkaImage = "apache/kafka:4.1.1"
