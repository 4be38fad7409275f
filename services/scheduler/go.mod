module github.com/notiflow/notiflow/services/scheduler

go 1.26.0

require github.com/robfig/cron/v3 v3.0.1

replace (
	github.com/notiflow/notiflow/lib => ../../lib
	github.com/notiflow/notiflow/proto => ../../proto
)
