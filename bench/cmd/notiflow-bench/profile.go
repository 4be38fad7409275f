package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/notiflow/notiflow/bench/harness"
)

// profiler takes, when a run is profiled (-profile dir), a CPU profile of
// every service over the first seconds of the run window and sums the
// statements MariaDB runs in the run's database over the run window;
// finish writes dir/<process>.pprof and dir/mariadb-statements.txt.
type profiler struct {
	dir   string
	span  time.Duration
	stmts *harness.StatementLog
	done  chan error
	files []string
}

// newProfiler starts MariaDB's statement log (before the services
// connect) for o.Profile, or returns nil when the run is not profiled.
// Call restore after the run.
func newProfiler(ctx context.Context, root string, o options, db *sql.DB, database string) (*profiler, error) {
	if o.Profile == "" {
		return nil, nil
	}
	dir := outPath(root, o.Profile)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create the profile directory: %w", err)
	}
	stmts, err := harness.StartStatementLog(ctx, db, database)
	if err != nil {
		return nil, err
	}
	return &profiler{dir: dir, span: o.ProfileSpan, stmts: stmts}, nil
}

// start begins the profiles at due, in the background.
func (p *profiler) start(ctx context.Context, due time.Time, procs []*harness.Proc, token string) {
	p.done = make(chan error, 1)
	go func() {
		select {
		case <-ctx.Done():
			p.done <- ctx.Err()
			return
		case <-time.After(time.Until(due)):
		}
		var err error
		p.files, err = harness.CPUProfiles(ctx, procs, token, p.span, p.dir)
		p.done <- err
	}()
}

// finish waits for the profiles and writes the summary of the statements
// of run's window; it prints where everything is.
func (p *profiler) finish(ctx context.Context, run *harness.Run) error {
	perr := <-p.done
	end := run.DueAt.Add(time.Duration(run.Report.TotalSec * float64(time.Second)))
	stats, err := p.stmts.Summary(ctx, run.DueAt, end)
	if err != nil {
		return err
	}
	path := filepath.Join(p.dir, "mariadb-statements.txt")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write the statement summary: %w", err)
	}
	werr := harness.WriteStatementTable(f, stats, 0, 0)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("write %s: %w", path, werr)
	}
	fmt.Printf("\nMariaDB statements in the run window, by server time (all of them in %s):\n", path)
	var b strings.Builder
	_ = harness.WriteStatementTable(&b, stats, 110, 12)
	fmt.Print(b.String())
	for _, f := range p.files {
		fmt.Printf("CPU profile over the first %s of the run window: %s\n", p.span, f)
	}
	return perr
}

// restore puts MariaDB's log settings back.
func (p *profiler) restore() {
	if err := p.stmts.Restore(context.Background()); err != nil {
		fmt.Println(err)
	}
}
