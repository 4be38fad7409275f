package harness

import (
	"os"
	"strconv"
	"strings"

	"github.com/notiflow/notiflow/lib/testkit"
)

// Pid returns the process id of a running Proc, or 0.
func (p *Proc) Pid() int {
	run := p.current()
	if run == nil {
		return 0
	}
	return run.Cmd.Process.Pid
}

// CPUMeter measures the CPU seconds a set of processes use between Start
// and Stop.
type CPUMeter struct {
	pids  map[string]int
	start map[string]float64
}

// StartCPUMeter records the CPU time of pids now.
func StartCPUMeter(pids map[string]int) *CPUMeter {
	m := &CPUMeter{pids: pids, start: map[string]float64{}}
	for name, pid := range pids {
		m.start[name] = testkit.ProcessCPUSeconds(pid)
	}
	return m
}

// Stop returns the CPU seconds each process used since the start.
func (m *CPUMeter) Stop() map[string]float64 {
	out := map[string]float64{}
	for name, pid := range m.pids {
		if now := testkit.ProcessCPUSeconds(pid); now >= 0 && m.start[name] >= 0 {
			out[name] = float64(int((now-m.start[name])*100)) / 100
		}
	}
	return out
}

// MachineCPUSeconds returns the busy (not idle, not iowait) and total CPU
// seconds of the whole machine since boot, summed over its cores, from
// /proc/stat; both are -1 when it is not readable.
func MachineCPUSeconds() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1, -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return -1, -1
	}
	var idle float64
	for i, s := range f[1:] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return -1, -1
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return (total - idle) / testkit.ClockTicks, total / testkit.ClockTicks
}
