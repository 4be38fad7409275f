module github.com/notiflow/notiflow/services/sink

go 1.26.0

require (
	github.com/notiflow/notiflow/lib v0.0.0
	github.com/notiflow/notiflow/proto v0.0.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/go-sql-driver/mysql v1.10.2 // indirect
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.15 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/segmentio/kafka-go v0.4.51 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	gorm.io/driver/mysql v1.5.7 // indirect
	gorm.io/gorm v1.31.2 // indirect
)

replace (
	github.com/notiflow/notiflow/lib => ../../lib
	github.com/notiflow/notiflow/proto => ../../proto
)
