package mysqlx

import (
	"context"
	"database/sql"
	"strings"
	"sync"
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
	ms := []Migration{
		{1, "widgets", []string{`CREATE TABLE widgets (id INT PRIMARY KEY)`}},
		{2, "widget name", []string{`ALTER TABLE widgets ADD COLUMN name VARCHAR(10) NOT NULL DEFAULT ''`}},
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
	bad := append(ms, Migration{3, "broken", []string{`ALTER TABLE nope ADD COLUMN x INT`}})
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
