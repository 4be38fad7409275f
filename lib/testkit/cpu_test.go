package testkit

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestProcessCPUSecondsGrowsWithWork(t *testing.T) {
	before := ProcessCPUSeconds(os.Getpid())
	if before < 0 {
		t.Fatal("cannot read this process's CPU time")
	}
	deadline := time.Now().Add(10 * time.Second)
	for ProcessCPUSeconds(os.Getpid()) < before+0.05 {
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %.2f s after 10 s of busy work", before)
		}
		for i := 0; i < 1_000_000; i++ {
			_ = filepath.Base("a/b")
		}
	}
	if got := ProcessCPUSeconds(1 << 30); got != -1 {
		t.Fatalf("CPU of a missing process = %v, want -1", got)
	}
}

func TestParseStatNameWithSpacesAndParens(t *testing.T) {
	line := "4242 (my (odd) proc) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 1 0"
	name, cpu := parseStat(line)
	if name != "my (odd) proc" || cpu != 4 {
		t.Fatalf("parseStat = %q, %v; want %q, 4", name, cpu, "my (odd) proc")
	}
	if _, cpu := parseStat("4242 (short) S 1 2"); cpu != -1 {
		t.Fatalf("a short line gives %v, want -1", cpu)
	}
}

// LocalMySQLServer finds the test server's process (it runs here under
// make test), whose CPU time grows with the work it is given.
func TestLocalMySQLServerCountsItsCPU(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("mysql", MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	srv := LocalMySQLServer(ctx, db)
	if !srv.Local() {
		t.Fatal("the local test server was not found from its pid file")
	}
	c0 := srv.CPU()
	if c0 <= 0 {
		t.Fatalf("server CPU %v, want > 0", c0)
	}
	deadline := time.Now().Add(30 * time.Second)
	for srv.CPU() == c0 {
		if time.Now().After(deadline) {
			t.Fatal("the server's CPU time did not grow with work")
		}
		if _, err := db.ExecContext(ctx, `DO BENCHMARK(2000000, MD5('notiflow'))`); err != nil {
			t.Fatal(err)
		}
	}
	if c := (MySQLServer{}).CPU(); c != -1 {
		t.Fatalf("a server not found reports CPU %v, want -1", c)
	}
}

// LocalRedisServer finds the test server's process (it runs here under
// make test): a redis-server whose CPU time grows with the work it is
// given.
func TestLocalRedisServerCountsItsCPU(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := Redis(t)
	pid := LocalRedisServer(ctx, rdb)
	if pid < 0 {
		t.Fatal("the local test Redis was not found from its INFO process_id")
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	if name, _ := parseStat(string(stat)); name != "redis-server" {
		t.Fatalf("pid %d is %q, want redis-server", pid, name)
	}
	c0 := ProcessCPUSeconds(pid)
	if c0 <= 0 {
		t.Fatalf("server CPU %v, want > 0", c0)
	}
	deadline := time.Now().Add(30 * time.Second)
	for ProcessCPUSeconds(pid) == c0 {
		if time.Now().After(deadline) {
			t.Fatal("the server's CPU time did not grow with work")
		}
		pipe := rdb.Pipeline()
		for i := range 10000 {
			pipe.Set(ctx, prefix+strconv.Itoa(i), i, time.Minute)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
