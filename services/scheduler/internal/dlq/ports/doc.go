// Package ports serves the dead-letter admin routes, GET /admin/dlq and
// POST /admin/dlq/redrive, behind the API's bearer token.
package ports
