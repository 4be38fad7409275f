package harness

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Remove drops the run's database and deletes its Redis keys, and only
// those: another run's keys stay.
func TestIsolationRemoveLeavesNothingOfTheRun(t *testing.T) {
	deps := LocalDeps()
	if os.Getenv("NOTIFLOW_TEST_MYSQL_DSN") == "" {
		t.Fatal("NOTIFLOW_TEST_MYSQL_DSN is not set (make test sets it)")
	}
	ctx := context.Background()
	stamp := time.Now().UnixNano()
	iso := NewIsolation(fmt.Sprintf("removetest_%d", stamp))
	other := NewIsolation(fmt.Sprintf("removetest_%d_other", stamp))
	if err := iso.Create(ctx, deps); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = iso.Remove(context.Background(), deps) })
	rdb := redis.NewClient(&redis.Options{Addr: deps.Redis})
	defer rdb.Close()
	const n = 2500 // more than one SCAN page and one DEL batch
	pipe := rdb.Pipeline()
	for i := range n {
		pipe.Set(ctx, fmt.Sprintf("%sdedup:%d", iso.RedisPrefix, i), "done", time.Hour)
	}
	pipe.Set(ctx, other.RedisPrefix+"dedup:1", "done", time.Hour)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	defer rdb.Del(context.Background(), other.RedisPrefix+"dedup:1")

	if err := iso.Remove(ctx, deps); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", deps.MySQLDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var name string
	switch err := db.QueryRowContext(ctx, "SELECT schema_name FROM information_schema.schemata WHERE schema_name = ?", iso.Database).Scan(&name); err {
	case sql.ErrNoRows:
	case nil:
		t.Errorf("database %s is still there", name)
	default:
		t.Fatal(err)
	}
	if keys, err := rdb.Keys(ctx, iso.RedisPrefix+"*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("%d of the run's keys left (err %v)", len(keys), err)
	}
	if n, err := rdb.Exists(ctx, other.RedisPrefix+"dedup:1").Result(); err != nil || n != 1 {
		t.Errorf("another run's key was deleted (exists %d, err %v)", n, err)
	}
}
