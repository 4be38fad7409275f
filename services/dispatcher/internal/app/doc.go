// Package app is the dispatcher's use case: one due notification in, one
// result out. Dispatcher.Handle deduplicates and rate-limits the
// notification, renders it, delivers it through its channel's provider,
// remembers the outcome and publishes the result; the consumer runtime
// commits the record's offset only after Handle returned nil.
package app
