package consume

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/notiflow/notiflow/lib/kafkax"
)

// release gives back the in-flight places of j.
func (g *generation[T]) release(j *job[T]) {
	j.part.inFlight.give()
	g.c.inFlight.give()
}

// complete marks j done so its offset may be committed.
func (g *generation[T]) complete(j *job[T]) {
	if n := j.part.tr.done(j.rec.Msg.Offset); n > 0 {
		j.part.window.giveN(n)
	}
	g.release(j)
}

// abandon gives up on j without marking it done: its offset is not
// committed and whoever owns the partition next fetches it again.
func (g *generation[T]) abandon(j *job[T]) { g.release(j) }

// workLoop runs per-record jobs until the lanes are closed and empty.
func (g *generation[T]) workLoop() {
	for j := range g.lanes.ready {
		for j != nil {
			done := false
			if g.hctx.Err() != nil || !g.running.take(g.hctx) {
				g.abandon(j)
			} else {
				done = g.handle(j)
				g.running.give()
			}
			next := g.settle(j, done)
			g.recycle(j)
			j = next
		}
	}
}

// settle is called when j left its worker, done (completed or dead
// lettered) or not (abandoned), and returns the next job of j's stripe to
// run, if any. After an abandoned job the stripe's waiting jobs are
// abandoned too and the stripe takes no more jobs in this generation, so
// that a key's later records never run before an earlier one that is to
// run again.
func (g *generation[T]) settle(j *job[T], done bool) *job[T] {
	if done {
		return g.lanes.next(j)
	}
	for _, w := range g.lanes.stop(j) {
		g.abandon(w)
		g.recycle(w)
	}
	return nil
}

// handle runs the handler on j until it is done: retried with backoff,
// dead lettered when it keeps failing, abandoned when the handler context
// ends or the handler gave way to the drain (ErrDraining). A job that
// failed inline comes with its first attempt made. It reports whether j is
// done (false: abandoned).
func (g *generation[T]) handle(j *job[T]) bool {
	c, p := g.c, j.part
	if j.err != nil {
		return g.deadLetter([]*job[T]{j}, j.err, 0)
	}
	err := j.failed // an attempt made inline (runInline)
	if j.attempt == 0 {
		err = g.runOnce(j)
	}
	for err != nil {
		if g.hctx.Err() != nil || g.gaveWay(err) {
			g.abandon(j)
			return false
		}
		if errors.Is(err, ErrPermanent) || j.attempt >= c.cfg.MaxAttempts {
			return g.deadLetter([]*job[T]{j}, err, j.attempt)
		}
		p.retried.Inc()
		if !sleep(g.hctx, Backoff(j.attempt, c.cfg.BackoffMin, c.cfg.BackoffMax)) {
			g.abandon(j)
			return false
		}
		err = g.runOnce(j)
	}
	return true
}

// runOnce calls the handler once on j and completes j when it succeeded.
func (g *generation[T]) runOnce(j *job[T]) error {
	j.attempt++
	start := g.mono()
	err := g.callHandler(j)
	took := g.mono() - start
	g.latency.Observe(float64(took) / 1e9)
	// A moving average with weight 1/8; concurrent updates may lose one,
	// which only delays it.
	avg := g.c.handlerNanos.Load()
	g.c.handlerNanos.Store(avg + (took-avg)/8)
	if err == nil {
		j.part.nProcessed.Add(1)
		g.complete(j)
	}
	return err
}

// callHandler calls the handler on j once; a panic in it comes back as a
// permanent error wrapping ErrPanic.
func (g *generation[T]) callHandler(j *job[T]) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = g.c.recovered(v, "partition", j.part.name, "offset", j.rec.Msg.Offset)
		}
	}()
	return g.c.handler.Handle(g.hctx, &j.rec)
}

// recovered turns v, recovered from a handler's panic, into a permanent
// error wrapping ErrPanic, counts it and logs it with the stack (call it in
// the deferred function that recovered, so the stack is the panic's);
// attrs say which records the handler had.
func (c *Consumer[T]) recovered(v any, attrs ...any) error {
	c.m.panics.WithLabelValues(c.cfg.GroupID).Inc()
	attrs = append(attrs, "group", c.cfg.GroupID, "panic", v, "stack", string(debug.Stack()))
	c.cfg.Logger.Error("handler panicked; dead-lettering without retry", attrs...)
	return Permanent(fmt.Errorf("%w: %v", ErrPanic, v))
}

// deadLetter sends jobs to the DLQ with reason (each job's own decode error
// wins over reason) and completes them once Kafka acknowledged. It keeps
// trying until the handler context ends; then the jobs are abandoned. It
// reports whether the jobs were dead lettered (false: abandoned).
func (g *generation[T]) deadLetter(jobs []*job[T], reason error, attempts int) bool {
	c := g.c
	recs := make([]kafkax.DeadRecord, len(jobs))
	for i, j := range jobs {
		r := reason
		if j.err != nil {
			r = j.err
		}
		recs[i] = kafkax.DeadRecord{Msg: j.rec.Msg, Reason: r, Attempts: attempts}
	}
	for try := 1; ; try++ {
		err := c.cfg.DLQ.SendMany(g.hctx, recs)
		if err == nil {
			break
		}
		c.cfg.Logger.Error("send to dead-letter topic", "group", c.cfg.GroupID, "records", len(recs), "err", err)
		if !sleep(g.hctx, Backoff(try, c.cfg.BackoffMin, c.cfg.BackoffMax)) {
			for _, j := range jobs {
				g.abandon(j)
			}
			return false
		}
	}
	for _, j := range jobs {
		j.part.deadLettered.Inc()
		g.complete(j)
	}
	return true
}
