package harness

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
)

// FloorTable is one table the floor writes: shadow copies of the rows of
// Source, written in transactions of Batch rows by Writers connections at
// once (at least one).
type FloorTable struct {
	Source  string
	Batch   int
	Writers int
	// ReadBack, when positive, reads the written rows back in the order of
	// Key (an increasing unique column), ReadBack rows per query, as the
	// relay reads the outbox.
	ReadBack int
	Key      string
	// OrderBy lists the columns of Source (an ORDER BY list) whose order
	// the rows are copied and written in; required. Shuffle writes them in
	// a random order instead.
	OrderBy string
	Shuffle bool
}

// Floor is the least work the pipeline's design needs for N notifications,
// with none of notiflow's logic: the same rows written to tables of the
// same shape in the same transaction sizes, the same number of records
// produced (acks=all) and consumed through two topics by the same number
// of consumers, and one pipelined Redis write per record. Everything runs
// at once, as the pipeline does, on the same dependencies.
type Floor struct {
	DSN         string // the run's database, holding the Source tables' rows
	Tables      []FloorTable
	Brokers     []string
	Redis       string
	Name        string // prefix of the floor's tables, topics and keys
	N           int
	Partitions  int
	Consumers   int // consumers of the first topic (the dispatchers)
	RecordBytes int // size of each record's value
	// CPU names the processes (by pid) whose CPU time the floor's timed
	// part is measured on: the dependencies and the process running the
	// floor, which stands in for the services. Empty: no CPU figures.
	CPU map[string]int

	db *sql.DB
}

// FloorResult is what the floor measured.
type FloorResult struct {
	Notifications int     `json:"notifications"`
	Seconds       float64 `json:"seconds"`
	PerSecond     float64 `json:"perSecond"`
	// Rows is how many rows the floor wrote, by source table.
	Rows map[string]int `json:"rows"`
	// PartSeconds is when each part of the floor was done, from its start:
	// "write <table>", "read back <table>" and "kafka and redis".
	PartSeconds map[string]float64 `json:"partSeconds"`
	// CPUSec is the CPU seconds each process of Floor.CPU used over the
	// timed part; CPUMicrosPerNotification is that per notification, each
	// process's and their "total", as the run's cost states its own.
	CPUSec                   map[string]float64 `json:"cpuSec,omitempty"`
	CPUMicrosPerNotification map[string]float64 `json:"cpuMicrosPerNotification,omitempty"`
}

// shadow is a source table's rows, held in memory, and its copy's name.
type shadow struct {
	FloorTable
	name string
	cols []string
	rows [][]any
}

// Run sets up (untimed: the shadow tables, created LIKE their sources, the
// rows loaded, the topics created), then times the floor's work and cleans
// up after it.
func (f *Floor) Run(ctx context.Context) (FloorResult, error) {
	res := FloorResult{Notifications: f.N, Rows: map[string]int{}, PartSeconds: map[string]float64{}}
	// Rows are copied as the server's text: no time parsing.
	cfg, err := mysql.ParseDSN(f.DSN)
	if err != nil {
		return res, fmt.Errorf("floor: parse the dsn: %w", err)
	}
	cfg.ParseTime = false
	if f.db, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		return res, fmt.Errorf("floor: open the database: %w", err)
	}
	defer f.db.Close()
	// Every connection the floor uses at once stays open, so that each
	// prepares its statement once: a writer per table's Writers, a reader
	// per ReadBack.
	conns := 1
	for _, t := range f.Tables {
		conns += max(t.Writers, 1)
		if t.ReadBack > 0 {
			conns++
		}
	}
	f.db.SetMaxIdleConns(conns)
	shadows := make([]*shadow, len(f.Tables))
	for i, t := range f.Tables {
		s, err := f.load(ctx, t)
		if err != nil {
			return res, err
		}
		shadows[i] = s
		res.Rows[t.Source] = len(s.rows)
		defer func() { _, _ = f.db.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS `"+s.name+"`") }()
	}
	due, dispatched := f.Name+".floor.due", f.Name+".floor.dispatched"
	topics := []kafka.TopicConfig{
		{Topic: due, NumPartitions: f.Partitions, ReplicationFactor: 1},
		{Topic: dispatched, NumPartitions: f.Partitions, ReplicationFactor: 1},
	}
	if err := kafkax.EnsureTopics(ctx, f.Brokers, topics...); err != nil {
		return res, fmt.Errorf("floor: create topics: %w", err)
	}
	defer func() {
		client := &kafka.Client{Addr: kafka.TCP(f.Brokers...), Timeout: 30 * time.Second}
		_, _ = client.DeleteTopics(context.WithoutCancel(ctx), &kafka.DeleteTopicsRequest{Topics: []string{due, dispatched}})
	}()
	rdb := redis.NewClient(&redis.Options{Addr: f.Redis})
	defer rdb.Close()
	keyPrefix := f.Name + ":floor:"
	defer func() { _, _ = testkit.UnlinkPrefix(context.WithoutCancel(ctx), rdb, keyPrefix) }()

	cpu := StartCPUMeter(f.CPU)
	start := time.Now()
	var mu sync.Mutex
	part := func(name string, fn func() error) func() error {
		return func() error {
			err := fn()
			mu.Lock()
			res.PartSeconds[name] = round(time.Since(start).Seconds(), 3)
			mu.Unlock()
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range shadows {
		g.Go(part("write "+s.Source, func() error { return f.write(gctx, s) }))
		if s.ReadBack > 0 {
			g.Go(part("read back "+s.Source, func() error { return f.readBack(gctx, s) }))
		}
	}
	g.Go(part("kafka and redis", func() error { return f.stream(gctx, rdb, due, dispatched) }))
	if err := g.Wait(); err != nil {
		return res, err
	}
	res.Seconds = round(time.Since(start).Seconds(), 3)
	res.PerSecond = round(float64(f.N)/res.Seconds, 1)
	if len(f.CPU) > 0 {
		res.CPUSec = cpu.Stop()
		res.CPUMicrosPerNotification = perNotification(res.CPUSec, int64(f.N))
	}
	// Untimed: the work was all done.
	for _, s := range shadows {
		var n int
		if err := f.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+s.name+"`").Scan(&n); err != nil {
			return res, fmt.Errorf("floor: count %s: %w", s.name, err)
		}
		if n != len(s.rows) {
			return res, fmt.Errorf("floor: %s holds %d rows, %d written", s.name, n, len(s.rows))
		}
	}
	n, err := testkit.UnlinkPrefix(ctx, rdb, keyPrefix)
	if err != nil {
		return res, fmt.Errorf("floor: redis keys: %w", err)
	}
	if n != f.N {
		return res, fmt.Errorf("floor: %d redis keys written, want %d", n, f.N)
	}
	return res, nil
}

// load creates the shadow of t LIKE its source and reads the first N of
// the source's rows by t.OrderBy into memory, in that order or, with
// t.Shuffle, in a random one.
func (f *Floor) load(ctx context.Context, t FloorTable) (*shadow, error) {
	if t.OrderBy == "" {
		return nil, fmt.Errorf("floor: table %s has no OrderBy", t.Source)
	}
	s := &shadow{FloorTable: t, name: f.Name + "_floor_" + t.Source}
	for _, q := range []string{"DROP TABLE IF EXISTS `" + s.name + "`", "CREATE TABLE `" + s.name + "` LIKE `" + t.Source + "`"} {
		if _, err := f.db.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("floor: %s: %w", q, err)
		}
	}
	rows, err := f.db.QueryContext(ctx, "SELECT * FROM `"+t.Source+"` ORDER BY "+t.OrderBy+" LIMIT ?", f.N)
	if err != nil {
		return nil, fmt.Errorf("floor: read the rows of %s: %w", t.Source, err)
	}
	defer rows.Close()
	if s.cols, err = rows.Columns(); err != nil {
		return nil, fmt.Errorf("floor: columns of %s: %w", t.Source, err)
	}
	for rows.Next() {
		row, err := scanText(rows, len(s.cols))
		if err != nil {
			return nil, fmt.Errorf("floor: read a row of %s: %w", t.Source, err)
		}
		s.rows = append(s.rows, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("floor: read the rows of %s: %w", t.Source, err)
	}
	if len(s.rows) < f.N {
		return nil, fmt.Errorf("floor: %s holds %d rows, the floor needs %d", t.Source, len(s.rows), f.N)
	}
	if t.Shuffle {
		rand.Shuffle(len(s.rows), func(i, j int) { s.rows[i], s.rows[j] = s.rows[j], s.rows[i] })
	}
	return s, nil
}

// floorPartRows is the most rows one of the floor's INSERT statements
// carries.
const floorPartRows = 1000

// write inserts s's rows into its shadow, Batch rows per transaction, in
// statements of at most floorPartRows rows; s.Writers connections each
// take the next transaction's rows as they finish one. A statement of the
// full size runs prepared (once per connection, as the sink's full batch
// does), others interpolated.
func (f *Floor) write(ctx context.Context, s *shadow) error {
	cols := "(`" + strings.Join(s.cols, "`,`") + "`)"
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?,", len(s.cols)), ",") + ")"
	insert := func(rows int) string {
		return "INSERT INTO `" + s.name + "` " + cols + " VALUES " + strings.TrimSuffix(strings.Repeat(tuple+",", rows), ",")
	}
	partRows := min(s.Batch, floorPartRows)
	full, err := f.db.PrepareContext(ctx, insert(partRows))
	if err != nil {
		return fmt.Errorf("floor: prepare the insert into %s: %w", s.name, err)
	}
	defer full.Close()
	var next atomic.Int64 // index of the next batch's first row
	g, gctx := errgroup.WithContext(ctx)
	for range max(s.Writers, 1) {
		g.Go(func() error {
			for {
				from := int(next.Add(int64(s.Batch))) - s.Batch
				if from >= len(s.rows) {
					return nil
				}
				batch := s.rows[from:min(from+s.Batch, len(s.rows))]
				if err := f.writeBatch(gctx, s, batch, partRows, full, insert); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}

// writeBatch inserts batch into s's shadow in one transaction, partRows
// rows a statement: full runs a statement of partRows rows, insert(n)
// is the statement of n rows.
func (f *Floor) writeBatch(ctx context.Context, s *shadow, batch [][]any, partRows int, full *sql.Stmt, insert func(int) string) error {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("floor: begin a write of %s: %w", s.name, err)
	}
	for i := 0; i < len(batch); i += partRows {
		part := batch[i:min(i+partRows, len(batch))]
		args := make([]any, 0, len(part)*len(s.cols))
		for _, r := range part {
			args = append(args, r...)
		}
		if len(part) == partRows {
			_, err = tx.StmtContext(ctx, full).ExecContext(ctx, args...)
		} else {
			_, err = tx.ExecContext(ctx, insert(len(part)), args...)
		}
		if err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("floor: insert into %s: %w", s.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("floor: commit a write of %s: %w", s.name, err)
	}
	return nil
}

// readBack reads s's shadow in the order of s.Key, ReadBack rows at a time,
// until it has read every row (waiting for the writer when it is ahead).
func (f *Floor) readBack(ctx context.Context, s *shadow) error {
	key := slices.Index(s.cols, s.Key)
	if key < 0 {
		return fmt.Errorf("floor: read back %s: no column %q", s.name, s.Key)
	}
	q := "SELECT * FROM `" + s.name + "` WHERE `" + s.Key + "` > ? ORDER BY `" + s.Key + "` LIMIT " + strconv.Itoa(s.ReadBack)
	var last any = int64(-1)
	for read := 0; read < len(s.rows); {
		rows, err := f.db.QueryContext(ctx, q, last)
		if err != nil {
			return fmt.Errorf("floor: read back %s: %w", s.name, err)
		}
		n := 0
		for rows.Next() {
			row, err := scanText(rows, len(s.cols))
			if err != nil {
				rows.Close()
				return fmt.Errorf("floor: read back %s: %w", s.name, err)
			}
			last = row[key]
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("floor: read back %s: %w", s.name, err)
		}
		read += n
		if n == 0 { // ahead of the writer
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	}
	return nil
}

// scanText scans the current row of n columns as the server's text (nil
// for NULL), copied out of the driver's buffer.
func scanText(rows *sql.Rows, n int) ([]any, error) {
	raw := make([]sql.RawBytes, n)
	ptrs := make([]any, n)
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	row := make([]any, n)
	for i, b := range raw {
		if b != nil {
			row[i] = string(b) // a copy: RawBytes is reused by the next Scan
		}
	}
	return row, nil
}

// stream produces N records to due, consumes them with Consumers readers
// (each a share of the partitions), writes one pipelined Redis key per
// record and produces each to dispatched, where one reader consumes them
// all.
func (f *Floor) stream(ctx context.Context, rdb *redis.Client, due, dispatched string) error {
	g, ctx := errgroup.WithContext(ctx)
	w := kafkax.NewWriter(f.Brokers, kafkax.WriterOptions{})
	defer w.Close()
	value := make([]byte, f.RecordBytes)
	g.Go(func() error {
		const batch = 5000 // the relay's batch
		for from := 0; from < f.N; from += batch {
			msgs := make([]kafka.Message, 0, batch)
			for i := from; i < min(from+batch, f.N); i++ {
				msgs = append(msgs, kafka.Message{Topic: due, Key: []byte("r" + strconv.Itoa(i%10_000)), Value: value})
			}
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				return fmt.Errorf("floor: produce to %s: %w", due, err)
			}
		}
		return nil
	})
	var forwarded atomic.Int64
	for c := range f.Consumers {
		g.Go(func() error { return f.forward(ctx, w, rdb, due, dispatched, c, &forwarded) })
	}
	g.Go(func() error { return f.drain(ctx, dispatched) })
	return g.Wait()
}

// forward is consumer c of due: it reads its partitions until every record
// of the floor was forwarded by some consumer.
func (f *Floor) forward(ctx context.Context, w *kafka.Writer, rdb *redis.Client, due, dispatched string, c int, forwarded *atomic.Int64) error {
	g, ctx := errgroup.WithContext(ctx)
	for p := c; p < f.Partitions; p += f.Consumers {
		g.Go(func() error {
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: f.Brokers, Topic: due, Partition: p, MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 100 * time.Millisecond})
			defer r.Close()
			for forwarded.Load() < int64(f.N) {
				batch := fetchAvailable(ctx, r, 500)
				if ctx.Err() != nil {
					return nil
				}
				pipe := rdb.Pipeline()
				out := make([]kafka.Message, len(batch))
				for i, m := range batch {
					pipe.Set(ctx, f.Name+":floor:"+strconv.Itoa(m.Partition)+":"+strconv.FormatInt(m.Offset, 10), "1", time.Hour)
					out[i] = kafka.Message{Topic: dispatched, Key: m.Key, Value: m.Value}
				}
				if _, err := pipe.Exec(ctx); err != nil {
					return fmt.Errorf("floor: redis: %w", err)
				}
				if err := w.WriteMessages(ctx, out...); err != nil {
					return fmt.Errorf("floor: produce to %s: %w", dispatched, err)
				}
				forwarded.Add(int64(len(batch)))
			}
			return nil
		})
	}
	return g.Wait()
}

// drain reads every partition of dispatched until N records arrived.
func (f *Floor) drain(ctx context.Context, dispatched string) error {
	var got atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	for p := range f.Partitions {
		g.Go(func() error {
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: f.Brokers, Topic: dispatched, Partition: p, MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 100 * time.Millisecond})
			defer r.Close()
			for got.Load() < int64(f.N) {
				got.Add(int64(len(fetchAvailable(ctx, r, 500))))
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// fetchAvailable returns up to max messages of r: it waits up to 50 ms for
// the first and takes what follows without waiting.
func fetchAvailable(ctx context.Context, r *kafka.Reader, max int) []kafka.Message {
	var out []kafka.Message
	wait := 50 * time.Millisecond
	for len(out) < max {
		fctx, cancel := context.WithTimeout(ctx, wait)
		m, err := r.FetchMessage(fctx)
		cancel()
		if err != nil {
			return out
		}
		out = append(out, m)
		wait = time.Millisecond
	}
	return out
}
