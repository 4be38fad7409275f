package consume

import (
	"testing"
	"time"
)

// TestFetcherSetCountsSuccessorBeforeOldFetcherLeaves plays a takeover in
// the order that once ended a generation's fetching early: the watchdog
// takes the fetching over, then the old fetcher's handler returns and the
// old fetcher leaves before its successor has fetched anything. The set
// must not report idle in between, and must report idle once the
// successor returns too.
func TestFetcherSetCountsSuccessorBeforeOldFetcherLeaves(t *testing.T) {
	t.Parallel()
	var f fetcherSet
	p := &partition{}
	const since = 42
	p.inlineSince.Store(since)

	oldHandlerDone := make(chan struct{})
	oldLeft := make(chan bool, 1)
	f.goFetch(func() {
		<-oldHandlerDone
		// The old fetcher's own swap, as in runInline: it fails once the
		// watchdog took over, and the fetcher returns.
		oldLeft <- p.inlineSince.CompareAndSwap(since, 0)
	})
	releaseSuccessor := make(chan struct{})
	if !f.takeOver(p, since, func() { <-releaseSuccessor }) {
		t.Fatal("takeOver refused although the fetcher was running a record inline")
	}
	if f.takeOver(p, since, func() {}) {
		t.Fatal("a second takeOver of the same inline run succeeded")
	}
	close(oldHandlerDone)
	if kept := <-oldLeft; kept {
		t.Fatal("the old fetcher kept its fetching after the takeover")
	}

	idle := make(chan struct{})
	go func() { f.wait(); close(idle) }()
	select {
	case <-idle:
		t.Fatal("fetchers reported idle while the successor still fetches")
	case <-time.After(200 * time.Millisecond):
	}
	close(releaseSuccessor)
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
		t.Fatal("fetchers not idle 10s after the last one returned")
	}
}
