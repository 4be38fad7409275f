package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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

// ProcessByName returns the id of a running process whose command name
// (/proc/<pid>/stat) is one of names, or 0 when none runs here.
func ProcessByName(names ...string) int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		name, _ := parseStat(string(b))
		for _, n := range names {
			if name == n {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				return pid
			}
		}
	}
	return 0
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

// MySQLServerCPU returns the CPU time (user + system) the local MariaDB or
// MySQL server has used so far, or -1 when none runs on this machine: a
// benchmark's measure of the database's cost of its work.
func MySQLServerCPU() time.Duration {
	sec := ProcessCPUSeconds(ProcessByName("mariadbd", "mysqld"))
	if sec < 0 {
		return -1
	}
	return time.Duration(sec * float64(time.Second))
}
