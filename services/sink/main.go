// Command sink is notiflow's sink: it consumes dispatch results from
// notify.dispatched.v1 and persists them in MySQL's notifications table in
// batches, committing offsets only once the rows are durable, and serves
// that table's read API (delivery status, in-app inbox).
// Configuration and design: README.md; wiring: internal/service.
package main

import (
	"github.com/notiflow/notiflow/lib/svc"
	"github.com/notiflow/notiflow/services/sink/internal/config"
	"github.com/notiflow/notiflow/services/sink/internal/service"
)

func main() {
	svc.Main(svc.Program[config.Config]{
		Name:      "sink",
		LogLevel:  func(c config.Config) string { return c.LogLevel },
		GCPercent: service.GCPercent,
		Run:       service.Run,
	})
}
