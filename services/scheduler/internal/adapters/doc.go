// Package adapters connects the scheduler to the outside world: the MySQL
// store of targets and the transactional outbox (with its versioned
// migrations), and the Kafka publisher of due notifications. The hot paths
// (claiming due targets, relaying the outbox) use raw parameterised SQL with
// multi-row statements; gorm serves the API's simple reads and updates.
//
// The doc comments state each method's contract. How the claim, the relay
// cursor and the settling of one-shots fit together, and why no occurrence
// is lost or published out of order, is explained once, in
// services/scheduler/README.md ("How a due target becomes a Kafka record").
package adapters
