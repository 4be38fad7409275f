// Package domain holds the scheduler's model without any I/O: targets (who
// to notify, how, and when), their schedules (a one-shot due time, or a cron
// expression in an IANA time zone), and the occurrences a target yields when
// it falls due. Every function takes the current time as an argument, so the
// same inputs always give the same result, across time zones and DST changes.
package domain
