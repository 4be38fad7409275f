package consume

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// accumulate groups records into batches: a batch is handed to the flushers
// when it holds BatchSize records, when no record arrived for BatchIdle, or
// when its first record has waited BatchMaxAge. When batchIn is closed
// (generation end, shutdown) the partial batch is handed over too. While
// every flusher is busy it blocks, which stops the fetchers: backpressure.
func (g *generation[T]) accumulate() {
	defer close(g.flushCh)
	cfg := g.c.cfg
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	age := time.NewTimer(time.Hour)
	age.Stop()
	var buf []*job[T]
	flush := func() {
		if len(buf) == 0 {
			return
		}
		idle.Stop()
		age.Stop()
		g.flushCh <- buf
		buf = make([]*job[T], 0, cfg.BatchSize)
	}
	for {
		select {
		case j, ok := <-g.batchIn:
			if !ok {
				flush()
				return
			}
			if len(buf) == 0 {
				age.Reset(cfg.BatchMaxAge)
			}
			buf = append(buf, j)
			if len(buf) >= cfg.BatchSize {
				flush()
				continue
			}
			idle.Reset(cfg.BatchIdle)
		case <-idle.C:
			flush()
		case <-age.C:
			flush()
		}
	}
}

// flushLoop hands batches to the batch handler until the accumulator is
// done. Once a batch was abandoned, the later ones are abandoned unhandled
// (see batchStopped).
func (g *generation[T]) flushLoop() {
	for batch := range g.flushCh {
		if g.batchStopped.Load() {
			for _, j := range batch {
				g.abandon(j)
			}
		} else {
			g.handleBatch(batch)
		}
		for _, j := range batch {
			g.recycle(j)
		}
	}
}

// callBatch calls the batch handler once on recs; a panic in it comes back
// as a permanent error wrapping ErrPanic, so the batch is dead lettered at
// once, as for any permanent batch failure.
func (g *generation[T]) callBatch(recs []*Record[T]) (err error) {
	defer func() {
		if v := recover(); v != nil {
			first := recs[0].Msg
			err = g.c.recovered(v, "records", len(recs), "first_partition", first.Topic+"/"+strconv.Itoa(first.Partition), "first_offset", first.Offset)
		}
	}()
	return g.c.batch.HandleBatch(g.hctx, recs)
}

// handleBatch dead letters the undecodable records of batch, then runs the
// handler on the rest until it succeeds, retrying with backoff. With
// BatchMaxAttempts set, a batch that keeps failing is dead lettered whole.
// When the handler context ends first, or the handler gave way to the drain
// (ErrDraining), the batch is abandoned (left uncommitted).
func (g *generation[T]) handleBatch(batch []*job[T]) {
	c := g.c
	var dead, good []*job[T]
	for _, j := range batch {
		if j.err != nil {
			dead = append(dead, j)
		} else {
			good = append(good, j)
		}
	}
	if len(dead) > 0 {
		g.deadLetter(dead, nil, 0)
	}
	if len(good) == 0 {
		return
	}
	recs := make([]*Record[T], len(good))
	for i, j := range good {
		recs[i] = &j.rec
	}
	c.m.batchSize.WithLabelValues(c.cfg.GroupID).Observe(float64(len(recs)))
	for attempt := 1; ; attempt++ {
		start := time.Now()
		err := g.callBatch(recs)
		g.latency.Observe(time.Since(start).Seconds())
		if err == nil {
			c.failing.Store(nil)
			for _, j := range good {
				j.part.nProcessed.Add(1)
				g.complete(j)
			}
			return
		}
		if g.hctx.Err() != nil || g.gaveWay(err) {
			g.batchStopped.Store(true)
			for _, j := range good {
				g.abandon(j)
			}
			return
		}
		c.failing.Store(&err)
		if errors.Is(err, ErrPermanent) || (c.cfg.BatchMaxAttempts > 0 && attempt >= c.cfg.BatchMaxAttempts) {
			c.failing.Store(nil)
			g.deadLetter(good, fmt.Errorf("batch of %d failed: %w", len(good), err), attempt)
			return
		}
		if attempt == 1 || attempt%10 == 0 {
			c.cfg.Logger.Warn("batch handler failed; retrying", "group", c.cfg.GroupID, "records", len(good), "attempt", attempt, "err", err)
		}
		for _, j := range good {
			j.part.retried.Inc()
		}
		if !sleep(g.hctx, Backoff(attempt, c.cfg.BackoffMin, c.cfg.BackoffMax)) {
			g.batchStopped.Store(true)
			for _, j := range good {
				g.abandon(j)
			}
			return
		}
	}
}
