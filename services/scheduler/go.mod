module github.com/notiflow/notiflow/services/scheduler

go 1.26.0

require (
	github.com/chromedp/chromedp v0.23.1
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/go-sql-driver/mysql v1.10.2
	github.com/notiflow/notiflow/lib v0.0.0
	github.com/notiflow/notiflow/proto v0.0.0
	github.com/notiflow/notiflow/services/sink v0.0.0
	github.com/prometheus/client_golang v1.25.0
	github.com/prometheus/client_model v0.6.3
	github.com/redis/go-redis/v9 v9.23.0
	github.com/robfig/cron/v3 v3.0.1
	github.com/segmentio/kafka-go v0.4.51
	go.yaml.in/yaml/v2 v2.4.4
	golang.org/x/sync v0.25.0
	google.golang.org/protobuf v1.36.12
	gorm.io/driver/mysql v1.5.7
	gorm.io/gorm v1.31.2
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/chromedp/cdproto v0.160.1 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pierrec/lz4/v4 v4.1.15 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace (
	github.com/notiflow/notiflow/lib => ../../lib
	github.com/notiflow/notiflow/proto => ../../proto
	github.com/notiflow/notiflow/services/sink => ../sink
)
