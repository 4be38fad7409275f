package harness

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"
)

// isolatedDB makes a run isolation named prefix_<time> on the local
// dependencies and opens its database (dsn); both are removed when t
// ends. A missing MariaDB fails t.
func isolatedDB(t *testing.T, prefix string) (iso Isolation, dsn string, db *sql.DB) {
	t.Helper()
	if os.Getenv("NOTIFLOW_TEST_MYSQL_DSN") == "" {
		t.Fatal("NOTIFLOW_TEST_MYSQL_DSN is not set (make test sets it)")
	}
	deps := LocalDeps()
	iso = NewIsolation(fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano()))
	if err := iso.Create(context.Background(), deps); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = iso.Remove(context.Background(), deps) })
	dsn, err := iso.DSN(deps)
	if err != nil {
		t.Fatal(err)
	}
	db, err = sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return iso, dsn, db
}
