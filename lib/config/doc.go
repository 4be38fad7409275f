// Package config loads a service's settings from NOTIFLOW_* environment
// variables into a struct whose fields carry `env:"NAME"` tags (and an
// optional `default:"value"`). The struct is the single source of truth for
// which variables a service reads and for their defaults: Vars lists them,
// FillZero fills a struct's zero fields from the tags alone (code that
// builds a configuration by hand), and Print writes the effective values
// (what each service's -print-config shows, and what the deployment tests
// read). Fields tagged `secret:"true"` or `secret:"dsn"`
// are redacted in Print's output.
//
// A value that does not parse stops the load with an error that names the
// variable, so a misconfigured process exits saying what to fix.
package config
