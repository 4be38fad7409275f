package testkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClockTicks is USER_HZ, the unit of /proc CPU times: 100 on every Linux
// this runs on.
const ClockTicks = 100

// ProcessCPUSeconds returns the user+system CPU time pid has used so far,
// from /proc/<pid>/stat, or -1 when it cannot be read.
func ProcessCPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	_, cpu := parseStat(string(b))
	return cpu
}

// Threads reads the CPU time of the threads of a process whose names
// start with one of a set of prefixes (the name a thread has in
// /proc/<pid>/task/<tid>/stat, cut by the kernel at 15 bytes). It lists
// the process's threads only on the first read, when one of the threads
// it found has ended or been renamed, and every rescanEvery reads (to find
// threads started since), and otherwise reads only the stat files of the
// threads it found: a JVM has a hundred threads, and a benchmark reading
// two of them ten times a second should not read them all. Threads that
// ended are not counted, so a delta over a span undercounts a thread that
// ended within it. Not safe for concurrent use.
type Threads struct {
	pid      int
	prefixes []string
	tids     []string
	reads    int
}

// rescanEvery is how many reads of a Threads reuse one listing of the
// process's threads.
const rescanEvery = 50

// NewThreads returns a reader of the CPU time of pid's threads named with
// one of prefixes.
func NewThreads(pid int, prefixes ...string) *Threads {
	return &Threads{pid: pid, prefixes: prefixes}
}

// CPUSeconds returns the user+system CPU time the matching threads have
// used so far, or -1 when the process's threads cannot be read or none
// matches.
func (t *Threads) CPUSeconds() float64 {
	t.reads++
	if t.tids != nil && t.reads%rescanEvery != 0 {
		if sum, _, ok := t.read(t.tids, false); ok {
			return sum
		}
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", t.pid))
	if err != nil {
		t.tids = nil
		return -1
	}
	all := make([]string, len(tasks))
	for i, task := range tasks {
		all[i] = task.Name()
	}
	sum, found, _ := t.read(all, true)
	if len(found) == 0 {
		t.tids = nil
		return -1
	}
	t.tids = found
	return sum
}

// read sums the CPU of the matching threads among tids and returns them.
// In a listing (all the process's threads) a thread that ended or does
// not match is passed over; otherwise (the threads found before) it makes
// ok false.
func (t *Threads) read(tids []string, listing bool) (sum float64, found []string, ok bool) {
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", t.pid, tid))
		var name string
		cpu := -1.0
		if err == nil {
			name, cpu = parseStat(string(b))
		}
		if cpu < 0 || !t.matches(name) {
			if listing {
				continue
			}
			return 0, nil, false
		}
		sum += cpu
		found = append(found, tid)
	}
	return sum, found, true
}

func (t *Threads) matches(name string) bool {
	for _, p := range t.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// parseStat returns the command name and the user+system CPU seconds of a
// /proc/<pid>/stat line (cpu -1 when malformed).
func parseStat(s string) (name string, cpu float64) {
	// The name is in parentheses and may hold spaces and ')'; the fields
	// after it start at the last ')'.
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", -1
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return s[open+1 : end], -1
	}
	ut, err1 := strconv.ParseFloat(f[11], 64) // field 14: utime
	st, err2 := strconv.ParseFloat(f[12], 64) // field 15: stime
	if err1 != nil || err2 != nil {
		return s[open+1 : end], -1
	}
	return s[open+1 : end], (ut + st) / ClockTicks
}

// MySQLServer is the process of a MariaDB or MySQL server running on this
// machine, for a benchmark's measure of the database's cost of its work.
// The zero value is a server that is not local: its CPU is -1.
type MySQLServer struct{ pid int }

// LocalMySQLServer finds the server db is connected to, when it runs on
// this machine: the process whose id is in the server's pid file
// (@@pid_file), whose command is mariadbd or mysqld and whose working
// directory is the server's data directory (@@datadir; the server works
// there). A server elsewhere, or in a container whose paths differ from
// this machine's, is not found: its CPU is then -1.
func LocalMySQLServer(ctx context.Context, db *sql.DB) MySQLServer {
	var file, datadir string
	if err := db.QueryRowContext(ctx, `SELECT @@pid_file, @@datadir`).Scan(&file, &datadir); err != nil {
		return MySQLServer{}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return MySQLServer{}
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return MySQLServer{}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return MySQLServer{}
	}
	if name, _ := parseStat(string(stat)); name != "mariadbd" && name != "mysqld" {
		return MySQLServer{}
	}
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err != nil || filepath.Clean(cwd) != filepath.Clean(datadir) {
		return MySQLServer{}
	}
	return MySQLServer{pid: pid}
}

// Local reports whether the server was found on this machine.
func (s MySQLServer) Local() bool { return s.pid > 0 }

// CPU returns the CPU time (user + system) the server has used so far, or
// -1 when it is not local (or has gone).
func (s MySQLServer) CPU() time.Duration {
	if s.pid <= 0 {
		return -1
	}
	sec := ProcessCPUSeconds(s.pid)
	if sec < 0 {
		return -1
	}
	return time.Duration(sec * float64(time.Second))
}

// LocalRedisServer returns the pid of the Redis server rdb is connected
// to, when it runs on this machine: the process_id of its INFO names a
// redis-server process here whose working directory is the server's own
// (CONFIG GET dir: Redis works there), so the client needs INFO and
// CONFIG GET. The error says why it was not found: the server cannot be
// asked, it runs elsewhere (or in a container whose process ids or paths
// differ from this machine's), or its process cannot be inspected here.
func LocalRedisServer(ctx context.Context, rdb redis.Cmdable) (int, error) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return -1, fmt.Errorf("ask the redis server for its pid: %w", err)
	}
	v, ok := infoField(info, "process_id")
	pid, err := strconv.Atoi(v)
	if !ok || err != nil || pid <= 0 {
		return -1, fmt.Errorf("the redis server's INFO has no process_id (%q)", v)
	}
	cfg, err := rdb.ConfigGet(ctx, "dir").Result()
	if err != nil {
		return -1, fmt.Errorf("ask the redis server for its directory: %w", err)
	}
	dir, ok := cfg["dir"]
	if !ok || dir == "" {
		return -1, errors.New("the redis server did not give its directory (CONFIG GET dir)")
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1, fmt.Errorf("the redis server's pid %d is no process here: %w", pid, err)
	}
	if name, _ := parseStat(string(stat)); name != "redis-server" {
		return -1, fmt.Errorf("the redis server's pid %d is %q here, not redis-server", pid, name)
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return -1, fmt.Errorf("read the directory of the redis-server with pid %d: %w", pid, err)
	}
	if filepath.Clean(cwd) != filepath.Clean(dir) {
		return -1, fmt.Errorf("the redis-server with pid %d here works in %q, not in the server's directory %q", pid, cwd, dir)
	}
	return pid, nil
}

// infoField returns the value of field name in the text of a Redis INFO
// reply ("name:value" lines); ok is false when there is no such line.
func infoField(info, name string) (value string, ok bool) {
	for line := range strings.Lines(info) {
		if v, found := strings.CutPrefix(strings.TrimRight(line, "\r\n"), name+":"); found {
			return v, true
		}
	}
	return "", false
}
