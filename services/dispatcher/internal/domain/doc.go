// Package domain is the dispatcher's logic without I/O: the outcome of one
// dispatch and how it is remembered in a deduplication marker, and the
// templates notifications are rendered with.
package domain
