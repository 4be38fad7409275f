package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/notiflow/notiflow/bench/harness"
	"github.com/notiflow/notiflow/services/sink/notifications"
)

// TestValidateFloorOrder checks that -floor-order takes its three orders
// and refuses anything else, naming the setting.
func TestValidateFloorOrder(t *testing.T) {
	base := options{Notifications: 10, Recipients: 1, Partitions: 1, Dispatchers: 1, Channel: "sim"}
	for _, order := range []string{"key", "arrival", "random"} {
		o := base
		o.FloorOrder = order
		if err := o.validate(); err != nil {
			t.Errorf("floor order %q: %v", order, err)
		}
	}
	for _, order := range []string{"", "sorted", "KEY"} {
		o := base
		o.FloorOrder = order
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), "floor order") {
			t.Errorf("floor order %q: err %v, want one naming the floor order", order, err)
		}
	}
}

// TestFloorOrdersReadTheSinkTable runs each floor order's ORDER BY on the
// sink's notifications table as its migrations make it, so that a column
// an order names and the table lacks fails here rather than after a run.
func TestFloorOrdersReadTheSinkTable(t *testing.T) {
	if os.Getenv("NOTIFLOW_TEST_MYSQL_DSN") == "" {
		t.Fatal("NOTIFLOW_TEST_MYSQL_DSN is not set (make test sets it)")
	}
	ctx := context.Background()
	deps := harness.LocalDeps()
	iso := harness.NewIsolation(fmt.Sprintf("floororders_%d", time.Now().UnixNano()))
	if err := iso.Create(ctx, deps); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = iso.Remove(context.Background(), deps) })
	dsn, err := iso.DSN(deps)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := notifications.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	for name, orderBy := range floorOrders {
		rows, err := db.QueryContext(ctx, "SELECT * FROM notifications ORDER BY "+orderBy+" LIMIT 1")
		if err != nil {
			t.Errorf("floor order %s (%s): %v", name, orderBy, err)
			continue
		}
		rows.Close()
	}
}
