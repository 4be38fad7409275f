// Command scheduler is notiflow's scheduler: it hosts the targets API, and
// while it holds the scan lock it claims due targets into the outbox and
// relays the outbox to Kafka. Configuration: README.md; wiring:
// internal/service.
package main

import (
	_ "time/tzdata" // IANA zones even in images without /usr/share/zoneinfo

	"github.com/notiflow/notiflow/lib/svc"
	"github.com/notiflow/notiflow/services/scheduler/internal/config"
	"github.com/notiflow/notiflow/services/scheduler/internal/service"
)

func main() {
	svc.Main(svc.Program[config.Config]{
		Name:      "scheduler",
		LogLevel:  func(c config.Config) string { return c.LogLevel },
		GCPercent: service.GCPercent,
		Run:       service.Run,
	})
}
