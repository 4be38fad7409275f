// Package testkit connects tests to the real Kafka, MariaDB and Redis that
// `make deps` starts, and gives each test its own topic, consumer group,
// database and key prefix so tests run in parallel and clean up after
// themselves. Addresses come from NOTIFLOW_TEST_KAFKA, NOTIFLOW_TEST_MYSQL_DSN
// and NOTIFLOW_TEST_REDIS, with localhost defaults. A service that cannot be
// reached fails the test: it is never skipped.
//
// It also holds the helpers the tests of every module share: Go runs a
// component until the test ends; Binary, FreeAddr and StartProc build a
// service binary once and run it as a subprocess with its log captured;
// Receiver is a webhook endpoint that records every call.
package testkit
