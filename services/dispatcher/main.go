// Command dispatcher is notiflow's dispatcher: it consumes due
// notifications, deduplicates and rate-limits them in Redis, delivers them
// (webhook, inbox, sim) and publishes one result per notification.
// Configuration and behaviour: README.md; wiring: internal/service.
package main

import (
	"github.com/notiflow/notiflow/lib/svc"
	"github.com/notiflow/notiflow/services/dispatcher/internal/config"
	"github.com/notiflow/notiflow/services/dispatcher/internal/service"
)

func main() {
	svc.Main(svc.Program[config.Config]{
		Name:      "dispatcher",
		LogLevel:  func(c config.Config) string { return c.LogLevel },
		GCPercent: service.GCPercent,
		Run:       service.Run,
	})
}
