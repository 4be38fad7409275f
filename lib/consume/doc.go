// Package consume is the consumer runtime both notiflow consumers run on:
// key-ordered parallel processing on top of kafka-go's ConsumerGroup and
// Generation API, with offsets that never pass unfinished work.
//
// Within a generation, every assigned partition is read by its own
// partition reader starting at the group's committed offset. Records are
// handed to a fixed pool of workers. In OrderKey mode (the default) records
// with the same key run one at a time in offset order and different keys run
// in parallel, so parallelism is not capped by the partition count;
// OrderPartition runs one record at a time per partition (the classic
// baseline) and OrderNone runs everything in parallel.
//
// Offsets. Each partition tracks the offsets it handed out and which of them
// are done. The position that gets committed is the lowest offset not yet
// done (or the offset after the last fetched record when all are done), so a
// slow record at a low offset holds the commit back however many later
// records finished. Commits go through Generation.CommitOffsets, which
// carries the generation id: a commit from a generation that has ended is
// rejected by the coordinator instead of moving another member's offset.
//
// Generation end and shutdown. When the generation ends (a rebalance) or the
// Run context is cancelled, fetching stops and the records already fetched
// (running or queued) get up to DrainTimeout to finish; then the handler
// context is cancelled and whatever has not finished is abandoned: it stays
// uncommitted and is fetched again by whoever owns the partition next. A
// final commit is made and the generation function returns so the group can
// move on. Handlers learn that the drain began through Draining(ctx), a
// channel closed at that moment: one whose wait holds nothing (a timer, a
// rate-limit wait) gives way by returning an error wrapping ErrDraining,
// and its record is abandoned like a cancelled one (not retried, not dead
// lettered, not committed), with the records queued behind it in its
// ordering stripe, so that the drain need not wait for it; work in
// progress that should finish ignores it. While it drains, the consumer heartbeats for the member itself
// (kafka-go stops at the rebalance notice), so the member keeps its
// partitions and its final commit is accepted; the next generation starts
// only after every member's previous one returned, so two generations never
// handle the same key at once. A generation that ended before its function
// started (a rebalance while the member was still receiving it) is
// skipped: kafka-go would not wait for that function before the next
// generation, and nothing was fetched under it. The settings this rests on (DrainTimeout
// against RebalanceTimeout, HeartbeatInterval and SessionTimeout, checked by
// Config.Validate) and its limits are in README.md, "Rebalances and drains".
//
// Errors. A handler error is retried with exponential backoff and jitter up
// to MaxAttempts; then the record goes to the dead-letter topic with its
// reason and counts as done (ErrDraining during a drain excepted, above). An error wrapped with Permanent skips the
// retries. A handler that panics (per-record or batch, on a worker or on
// a fetcher) is recovered: a panic is a bug that would recur on every
// attempt and on every member, so its records are dead lettered at once
// with ErrPanic and the panic's value as the reason, the stack is logged,
// handler_panics_total counts it, and the consumer moves on. A value the
// Decoder rejects never reaches the handler: it is dead lettered at once.
// Tombstones (nil values) are skipped and counted. A record is only marked
// done once its dead letter has been acknowledged, so nothing disappears
// without a trace.
//
// Backpressure. At most MaxInFlight records per process and
// MaxInFlightPerPartition per partition exist between fetch and completion;
// when either bound is reached the partition reader stops being drained, its
// small prefetch queue fills and fetching pauses, whatever the lag.
//
// Redelivery bound. A partition's window, the records from its lowest
// unfinished offset to its fetch position (finished or not), cannot be
// committed: a crash redelivers it, with whatever left it since the last
// commit (about one CommitInterval's worth). It holds at most
// MaxUncommittedPerPartition records: when it is full, fetching of that
// partition pauses until the record at its start finishes (or is dead
// lettered), so one stuck record stalls its own partition after that many
// records instead of growing the bookkeeping and the redelivery without
// bound. The uncommitted gauge shows each partition's window.
//
// Cost per record. The hot path takes no channel operation for the
// in-flight bounds (atomic gates), recycles its bookkeeping (a record
// handed to a handler is the runtime's again once the handler returns),
// and counts consumed and processed records in per-partition atomics that
// the committer moves into the Prometheus counters and the in-flight gauge
// every CommitInterval: those metrics lag by at most one interval.
//
// Short handlers run on the fetcher. While the handler's average duration
// is under 20 us (a handler that does no I/O; the average starts at 1 ms,
// so this waits until handlers proved short), a record whose ordering
// stripe is idle is run by the goroutine that fetched it instead of being
// handed to a worker, which would cost more than the handler; ordering is
// the same (the stripe is claimed as a worker would), and fetchers and
// workers together never run more than Workers handlers at once. Only its first
// attempt runs there: a failure goes to a worker for the retries and the
// dead letter. A record that runs there for more than 5 ms has the
// fetching taken over by a new goroutine (fetch_takeovers_total), so one
// slow record never holds up the rest of its partition; the new fetcher is
// counted before the old one can leave, so a takeover never looks like the
// end of the partition's fetching.
package consume
