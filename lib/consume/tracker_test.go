package consume

import "testing"

func TestTrackerPosition(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		start  int64
		add    []int64
		done   []int64
		want   int64
		wantOK bool
	}{
		{name: "relative start, nothing fetched", start: -2, wantOK: false},
		{name: "absolute start, nothing fetched", start: 42, want: 42, wantOK: true},
		{name: "all done", start: 0, add: []int64{0, 1, 2}, done: []int64{2, 0, 1}, want: 3, wantOK: true},
		{name: "slow low offset holds commit", start: 0, add: []int64{0, 1, 2, 3}, done: []int64{1, 2, 3}, want: 0, wantOK: true},
		{name: "gap in the middle", start: 10, add: []int64{10, 11, 12, 13}, done: []int64{10, 11, 13}, want: 12, wantOK: true},
		{name: "non-contiguous offsets (compaction, markers)", start: 5, add: []int64{5, 9, 20}, done: []int64{5, 9}, want: 20, wantOK: true},
		{name: "unknown offset ignored", start: 0, add: []int64{0, 1}, done: []int64{7, 0}, want: 1, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := newTracker(tt.start)
			for _, o := range tt.add {
				tr.add(o)
			}
			for _, o := range tt.done {
				tr.done(o)
			}
			got, ok := tr.position()
			if ok != tt.wantOK || (ok && got != tt.want) {
				t.Errorf("position() = %d, %v; want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestTrackerCompactsAndStaysCorrect(t *testing.T) {
	t.Parallel()
	tr := newTracker(0)
	const n = 10_000
	for i := int64(0); i < n; i++ {
		tr.add(i)
	}
	// Finish everything but offset 5000, in order.
	for i := int64(0); i < n; i++ {
		if i != 5000 {
			tr.done(i)
		}
	}
	if got, _ := tr.position(); got != 5000 {
		t.Fatalf("position = %d, want 5000", got)
	}
	tr.done(5000)
	if got, _ := tr.position(); got != n {
		t.Fatalf("position = %d, want %d", got, n)
	}
	if len(tr.pending)-tr.head != 0 {
		t.Fatalf("live pending = %d, want 0", len(tr.pending)-tr.head)
	}
}

func TestTrackerWindow(t *testing.T) {
	t.Parallel()
	tr := newTracker(0)
	for i := int64(0); i < 5; i++ {
		tr.add(i)
	}
	steps := []struct {
		done        int64
		wantRetired int
		wantSize    int
	}{
		{done: 1, wantRetired: 0, wantSize: 5}, // offset 0 unfinished holds the window
		{done: 2, wantRetired: 0, wantSize: 5},
		{done: 0, wantRetired: 3, wantSize: 2}, // 0, 1, 2 leave together
		{done: 0, wantRetired: 0, wantSize: 2}, // unknown now: ignored
		{done: 4, wantRetired: 0, wantSize: 2},
		{done: 3, wantRetired: 2, wantSize: 0},
	}
	for _, s := range steps {
		if got := tr.done(s.done); got != s.wantRetired {
			t.Errorf("done(%d) retired %d, want %d", s.done, got, s.wantRetired)
		}
		if got := tr.size(); got != s.wantSize {
			t.Errorf("after done(%d) size %d, want %d", s.done, got, s.wantSize)
		}
	}
}
