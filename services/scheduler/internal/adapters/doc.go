// Package adapters connects the scheduler to the outside world: the MySQL
// store of targets and the transactional outbox (with its versioned
// migrations), and the Kafka publisher of due notifications. The hot paths
// (claiming due targets, relaying the outbox) use raw parameterised SQL with
// multi-row statements; gorm serves the API's simple reads and updates.
package adapters
