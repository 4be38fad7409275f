// Package obs holds what every notiflow service exposes to operators: JSON
// logs (log/slog), a Prometheus registry, and the /healthz, /readyz and
// /metrics endpoints with a readiness state that goes false while draining.
package obs
