// Package domain is the sink's model of a dispatch result and the rule that
// decides what one stored notification row says when several results of the
// same notification arrive (retries, redeliveries, duplicates). It does no
// I/O; the MySQL adapter implements the same rule in SQL and is tested
// against Merge.
package domain
