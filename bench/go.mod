module github.com/notiflow/notiflow/bench

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.10.2
	github.com/notiflow/notiflow/lib v0.0.0
	github.com/segmentio/kafka-go v0.4.51
	github.com/standard-webhooks/standard-webhooks/libraries v1.3.0
	github.com/valyala/fasthttp v1.79.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/molecule-man/go-brrr v1.3.1 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/notiflow/notiflow/proto v0.0.0
	github.com/notiflow/notiflow/services/sink v0.0.0
	github.com/pierrec/lz4/v4 v4.1.15 // indirect
	github.com/redis/go-redis/v9 v9.23.0
	github.com/rs/dnscache v0.0.0-20230804202142-fc85eb664529 // indirect
	github.com/tsenart/vegeta/v12 v12.13.0
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sync v0.25.0
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/protobuf v1.36.12
)

replace github.com/notiflow/notiflow/lib => ../lib

replace github.com/notiflow/notiflow/proto => ../proto

replace github.com/notiflow/notiflow/services/sink => ../services/sink
