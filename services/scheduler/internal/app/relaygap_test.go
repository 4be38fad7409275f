package app_test

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// sequences returns the set of outbox ids (sequences) the consumer saw.
func (c *consumer) sequences() map[uint64]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[uint64]bool, len(c.byID))
	for _, rs := range c.byID {
		for _, r := range rs {
			out[r.sequence] = true
		}
	}
	return out
}

// outboxIDs returns the ids of the outbox rows up to upTo.
func outboxIDs(tb testing.TB, s *adapters.MySQLStore, upTo uint64) []uint64 {
	tb.Helper()
	rows, err := s.DB().QueryContext(context.Background(), `SELECT id FROM outbox WHERE id <= ? ORDER BY id`, upTo)
	if err != nil {
		tb.Fatalf("read outbox ids: %v", err)
	}
	defer rows.Close()
	var ids []uint64
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			tb.Fatalf("read outbox id: %v", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("read outbox ids: %v", err)
	}
	return ids
}

// waitPublishedBelowCursor waits until the topic holds every outbox row at
// or below the relay cursor, and fails naming the rows it lacks.
func waitPublishedBelowCursor(tb testing.TB, s *adapters.MySQLStore, cons *consumer) (cursor uint64, rows int) {
	tb.Helper()
	cursor, err := s.PublishedUpTo(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	ids := outboxIDs(tb, s, cursor)
	testkit.Eventually(tb, 60*time.Second, func() error {
		seen := cons.sequences()
		var missing []uint64
		for _, id := range ids {
			if !seen[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return testkit.Errorf("%d of the %d outbox rows at or below the cursor %d are not in the topic, first %v",
				len(missing), len(ids), cursor, missing[:min(len(missing), 10)])
		}
		return nil
	})
	return cursor, len(ids)
}

// TestRelayCursorNeverPassesCommittedRows races many small claims on two
// connections against a relay loop, while side connections keep many
// read-write transactions and long consistent snapshots open (the longer
// the list of open transactions a new snapshot has to walk, the wider the
// window in which a reader can see a later claim committed and an earlier
// one not). Every outbox row at or below the cursor must be in the topic.
func TestRelayCursorNeverPassesCommittedRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	in := e.instance(t, instanceOpts{relayBatch: 50})
	cons := e.consume(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const targets = 12000
	now := time.Now()
	createDue(t, in.store, targets, 500, now.Add(-time.Minute), "")
	// The side connections have their own pool: the store's keeps 8.
	db, err := sql.Open("mysql", e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE side_rw (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, conn INT NOT NULL) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}

	var claimers sync.WaitGroup
	var claimErrs atomic.Int64
	for c := 0; c < 2; c++ {
		claimers.Add(1)
		go func() {
			defer claimers.Done()
			for ctx.Err() == nil {
				res, err := in.store.ClaimDue(ctx, now, 1+rand.IntN(3), domain.Planner{})
				if err != nil {
					claimErrs.Add(1)
					continue
				}
				if res.Targets == 0 {
					return
				}
			}
		}()
	}

	sideCtx, stopSide := context.WithCancel(ctx)
	var side sync.WaitGroup
	for c := 0; c < 24; c++ {
		side.Add(1)
		go func() {
			defer side.Done()
			conn, err := db.Conn(sideCtx)
			if err != nil {
				return
			}
			defer conn.Close()
			snapshot := c%4 == 0 // a quarter hold long consistent snapshots, the rest open write transactions
			for sideCtx.Err() == nil {
				if snapshot {
					_, err = conn.ExecContext(sideCtx, `START TRANSACTION WITH CONSISTENT SNAPSHOT`)
					if err == nil {
						_, err = conn.ExecContext(sideCtx, `SELECT COUNT(*) FROM outbox`)
					}
				} else {
					_, err = conn.ExecContext(sideCtx, `BEGIN`)
					if err == nil {
						_, err = conn.ExecContext(sideCtx, `INSERT INTO side_rw (conn) VALUES (?)`, c)
					}
				}
				hold := time.Duration(5+rand.IntN(200)) * time.Millisecond
				if snapshot {
					hold = time.Second
				}
				select {
				case <-sideCtx.Done():
				case <-time.After(hold):
				}
				_, _ = conn.ExecContext(context.Background(), `COMMIT`)
				if err != nil && sideCtx.Err() == nil {
					return
				}
			}
		}()
	}
	claimsDone := make(chan struct{})
	go func() { claimers.Wait(); close(claimsDone) }()
	// A failed pass is retried, as the scheduler's relay loop does: the
	// property under test is that no pass moves the cursor over a row.
	passes, failed := 0, 0
relay:
	for {
		select {
		case <-claimsDone:
			break relay
		default:
		}
		if _, err := in.relay.Drain(ctx); err != nil {
			if failed++; failed == 1 {
				t.Logf("relay pass %d failed (retried): %v", passes, err)
			}
		}
		passes++
	}
	stopSide()
	side.Wait()
	testkit.Eventually(t, 60*time.Second, func() error {
		if _, err := in.relay.Drain(ctx); err != nil {
			return err
		}
		if backlog, err := in.store.Backlog(ctx); err != nil || backlog != 0 {
			return testkit.Errorf("backlog %d, %v", backlog, err)
		}
		return nil
	})
	if ctx.Err() != nil {
		t.Fatalf("the race did not finish in time: %v", ctx.Err())
	}
	cursor, rows := waitPublishedBelowCursor(t, in.store, cons)
	t.Logf("%d relay passes (%d failed), %d outbox rows up to cursor %d, %d claim errors", passes, failed, rows, cursor, claimErrs.Load())
	if rows != targets {
		t.Fatalf("%d outbox rows at or below the cursor, want %d", rows, targets)
	}
	// Reading up to the committed end, no pass can miss a row: the gap
	// check never has to stop the cursor.
	if n := value(in.metrics.HiddenRows); n != 0 {
		t.Fatalf("%v rows were missing from a pass's read below the committed end", n)
	}
}

// hidingStore is the real store except that its first read of unpublished
// rows leaves one row out, as a reader whose snapshot misses a committed
// row would.
type hidingStore struct {
	*adapters.MySQLStore
	hide uint64
	once sync.Once
}

func (h *hidingStore) Unpublished(ctx context.Context, afterID, upTo uint64, limit int) ([]domain.Notification, error) {
	notes, err := h.MySQLStore.Unpublished(ctx, afterID, upTo, limit)
	if err != nil {
		return nil, err
	}
	h.once.Do(func() {
		for i := range notes {
			if notes[i].Sequence == h.hide {
				notes = append(notes[:i:i], notes[i+1:]...)
				return
			}
		}
	})
	return notes, nil
}

// TestRelayDoesNotPassAHiddenRow hides one committed row from the relay's
// first read: the pass publishes the rows around it but leaves the cursor
// below it, and the next pass publishes it.
func TestRelayDoesNotPassAHiddenRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	in := e.instance(t, instanceOpts{})
	cons := e.consume(t)
	ctx := context.Background()
	now := time.Now()
	createDue(t, in.store, 10, 10, now.Add(-time.Second), "")
	if res, err := in.store.ClaimDue(ctx, now, 10, domain.Planner{}); err != nil || res.Inserted != 10 {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	ids := outboxIDs(t, in.store, 1<<62)
	hidden := ids[4]
	store := &hidingStore{MySQLStore: in.store, hide: hidden}
	relay := app.NewRelay(store, adapters.NewDuePublisher(in.writer, e.topic), 100, time.Now, in.metrics, testLogger(t))

	if _, err := relay.Drain(ctx); err != nil {
		t.Fatalf("first pass: %v", err)
	}
	if cursor, err := in.store.PublishedUpTo(ctx); err != nil || cursor != hidden-1 {
		t.Fatalf("cursor after the pass that missed row %d = %d, %v; want %d, just below it", hidden, cursor, err, hidden-1)
	}
	if n := value(in.metrics.HiddenRows); n != 1 {
		t.Fatalf("hidden rows counted: %v, want 1", n)
	}
	if _, err := relay.Drain(ctx); err != nil {
		t.Fatalf("second pass: %v", err)
	}
	if cursor, err := in.store.PublishedUpTo(ctx); err != nil || cursor != ids[len(ids)-1] {
		t.Fatalf("cursor after the second pass = %d, %v; want %d", cursor, err, ids[len(ids)-1])
	}
	waitPublishedBelowCursor(t, in.store, cons)
}
