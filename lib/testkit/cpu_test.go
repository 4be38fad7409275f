package testkit

import (
	"os"
	"path/filepath"
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

func TestProcessByNameFindsThisTest(t *testing.T) {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	name := string(b[:len(b)-1])
	if pid := ProcessByName("no-such-process-name", name); pid == 0 {
		t.Fatalf("ProcessByName(%q) found nothing", name)
	}
	if pid := ProcessByName("no-such-process-name"); pid != 0 {
		t.Fatalf("ProcessByName of a missing name = %d, want 0", pid)
	}
}
