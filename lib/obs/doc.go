// Package obs holds what every notiflow service exposes to operators: JSON
// logs (log/slog), a Prometheus registry, and the /healthz, /readyz and
// /metrics endpoints with a readiness state that goes false while draining,
// and the HTTP server every service runs (Serve, with read, write and idle
// timeouts from ServerConfig).
//
// /readyz is served to anyone who can reach the port, so it answers the
// status and the names of failing checks only ("not ready: mysql, redis");
// a check's error, which may name internal addresses, goes to the log when
// the check starts failing or its error changes, and its recovery once.
package obs
