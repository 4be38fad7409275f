// Package config loads a service's settings from NOTIFLOW_* environment
// variables into a struct whose fields carry `env:"NAME"` tags (and an
// optional `default:"value"`). The struct is the single source of truth for
// which variables a service reads: Vars lists them for the deployment tests.
//
// A value that does not parse stops the load with an error that names the
// variable, so a misconfigured process exits saying what to fix.
package config
