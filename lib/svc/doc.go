// Package svc is the part of main that every notiflow service shares: read
// and validate the configuration, optionally print it (-print-config),
// build the logger, set the GC target, run until SIGINT or SIGTERM, and exit
// once with a status that says why. A service's main.go is one Program
// literal handed to Main; the wiring itself lives in the service's
// internal/service package (New / Run / Handler).
//
// It is its own package rather than part of obs because it owns the
// process (flags, signals, exit codes), which no library code below main
// may touch.
package svc
