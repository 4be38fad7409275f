package mysqlx

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/notiflow/notiflow/lib/testkit"
)

func TestMigrateIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("mysql", testkit.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var thens atomic.Int32
	ms := []Migration{
		{Version: 1, Name: "widgets", Stmts: []string{`CREATE TABLE widgets (id INT PRIMARY KEY)`}},
		{Version: 2, Name: "widget name", Stmts: []string{`ALTER TABLE widgets ADD COLUMN name VARCHAR(10) NOT NULL DEFAULT ''`},
			Then: func(ctx context.Context, conn *sql.Conn) error {
				thens.Add(1)
				_, err := conn.ExecContext(ctx, `INSERT INTO widgets (id, name) VALUES (1, 'first')`)
				return err
			}},
	}
	ctx := context.Background()
	// Five replicas at once: the lock serialises them, each version runs once.
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Go(func() { errs[i] = Migrate(ctx, db, "test_migrations", ms) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	if err := Migrate(ctx, db, "test_migrations", ms); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if v, err := Version(ctx, db, "test_migrations"); err != nil || v != 2 {
		t.Fatalf("Version = %d, %v; want 2", v, err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM test_migrations`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("recorded versions = %d, %v; want 2", n, err)
	}

	// A failing statement names its version and leaves earlier ones applied.
	if thens.Load() != 1 {
		t.Fatalf("Then ran %d times, want 1", thens.Load())
	}
	bad := append(ms, Migration{Version: 3, Name: "broken", Stmts: []string{`ALTER TABLE nope ADD COLUMN x INT`}})
	err = Migrate(ctx, db, "test_migrations", bad)
	if err == nil || !strings.Contains(err.Error(), "version 3 (broken)") {
		t.Fatalf("want error naming version 3, got %v", err)
	}
	if v, _ := Version(ctx, db, "test_migrations"); v != 2 {
		t.Fatalf("Version after failure = %d, want 2", v)
	}
	if err := Migrate(ctx, db, "bad-name; DROP", ms); err == nil {
		t.Fatal("want error for a bad table name")
	}
}
