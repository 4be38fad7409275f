module github.com/notiflow/notiflow/bench

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.10.2
	github.com/notiflow/notiflow/lib v0.0.0
	github.com/segmentio/kafka-go v0.4.51
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.15 // indirect
)

replace github.com/notiflow/notiflow/lib => ../lib
