package testkit

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
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

// TestThreadsByName: a Threads reads the CPU of the threads named with one
// of its prefixes (one thread of this process, given a name of its own,
// spinning), not of the others; -1 when no thread has the name, again once
// the named thread is gone.
func TestThreadsByName(t *testing.T) {
	// A name no thread had (a renamed thread of an earlier run of the
	// test ends asynchronously), at most 15 bytes.
	name := fmt.Sprintf("nf%d", time.Now().UnixNano()%1e12)
	threads := NewThreads(os.Getpid(), "no such thread", name)
	if v := threads.CPUSeconds(); v != -1 {
		t.Fatalf("no thread named %q yet: %v, want -1", name, v)
	}
	named, stop, stopped := make(chan error, 1), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		// Locked and never unlocked: the thread ends with the goroutine
		// (the process's main thread would be parked instead, so its name
		// is put back first).
		runtime.LockOSThread()
		comm := fmt.Sprintf("/proc/self/task/%d/comm", syscall.Gettid())
		old, err := os.ReadFile(comm)
		if err == nil {
			err = os.WriteFile(comm, []byte(name), 0)
		}
		named <- err
		if err != nil {
			return
		}
		defer func() { _ = os.WriteFile(comm, old, 0) }()
		for x := 0; ; x++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = x * x
		}
	}()
	if err := <-named; err != nil {
		close(stop)
		t.Fatalf("name a thread: %v", err)
	}
	start := threads.CPUSeconds()
	if start < 0 {
		close(stop)
		t.Fatalf("the named thread is not found: %v", start)
	}
	deadline := time.Now().Add(10 * time.Second)
	for threads.CPUSeconds() < start+0.1 {
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("the spinning thread's CPU did not grow by 0.1 s in 10 s (%v, from %v)", threads.CPUSeconds(), start)
		}
		time.Sleep(10 * time.Millisecond) // polling the condition above
	}
	if all, mine := ProcessCPUSeconds(os.Getpid()), threads.CPUSeconds(); mine > all {
		t.Errorf("the named thread's CPU %v exceeds the process's %v", mine, all)
	}
	close(stop)
	<-stopped
	Eventually(t, 10*time.Second, func() error {
		if v := threads.CPUSeconds(); v != -1 {
			return fmt.Errorf("the named thread ended (or got its name back), still read %v", v)
		}
		return nil
	})
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
// make test): the CPU time /proc gives for that pid grows as the server's
// own account of its CPU (INFO cpu) does while it works, which another
// process's would not. Each INFO is read between two /proc readings, so
// work of other clients between the readings cannot fail the test.
func TestLocalRedisServerCountsItsCPU(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := Redis(t)
	pid, err := LocalRedisServer(ctx, rdb)
	if err != nil {
		t.Fatalf("the local test Redis was not found: %v", err)
	}
	// read returns the server's own CPU seconds and /proc's just before
	// and just after it.
	read := func() (before, server, after float64) {
		t.Helper()
		before = ProcessCPUSeconds(pid)
		info, err := rdb.Info(ctx, "cpu").Result()
		after = ProcessCPUSeconds(pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
			v, ok := infoField(info, f)
			x, err := strconv.ParseFloat(v, 64)
			if !ok || err != nil {
				t.Fatalf("INFO cpu: %s = %q", f, v)
			}
			server += x
		}
		return before, server, after
	}
	b0, s0, a0 := read()
	deadline := time.Now().Add(30 * time.Second)
	for ProcessCPUSeconds(pid)-a0 < 0.3 {
		if time.Now().After(deadline) {
			t.Fatal("the process's CPU time did not grow with the server's work")
		}
		pipe := rdb.Pipeline()
		for i := range 10000 {
			pipe.Set(ctx, prefix+strconv.Itoa(i), i, time.Minute)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	b1, s1, a1 := read()
	// /proc counts in ticks of 10 ms: each difference of two readings may
	// be off by up to two ticks.
	const tick = 0.02
	if ds := s1 - s0; ds < b1-a0-tick || ds > a1-b0+tick {
		t.Fatalf("the server says it used %.2f CPU s while pid %d used between %.2f and %.2f", ds, pid, b1-a0, a1-b0)
	}
}

func TestInfoField(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nprocess_id:4242\r\nprocess_supervised:no\r\n"
	for _, c := range []struct {
		name, want string
		ok         bool
	}{
		{"process_id", "4242", true},
		{"redis_version", "7.0.15", true},
		{"process", "", false},
		{"missing", "", false},
	} {
		if v, ok := infoField(info, c.name); v != c.want || ok != c.ok {
			t.Errorf("infoField(%q) = %q, %v; want %q, %v", c.name, v, ok, c.want, c.ok)
		}
	}
}
