package adapters_test

import (
	"context"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/simsend"
	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/benchtest"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
)

func TestSimSends(t *testing.T) {
	t.Parallel()
	rdb, prefix := testkit.Redis(t)
	ctx := context.Background()
	sends := adapters.NewSimSends(rdb, prefix)
	if got := sends.Key("r1"); got != simsend.Key(prefix, "r1") {
		t.Fatalf("key %q, want the dispatcher's %q", got, simsend.Key(prefix, "r1"))
	}
	at := time.Date(2026, 3, 9, 9, 0, 0, 123000, time.UTC)
	// 3000 occurrences (several HSCAN pages); 7 and 2999 sent twice, 11
	// three times; another run's sends are not counted.
	for i := uint64(0); i < 3000; i++ {
		if err := benchtest.RecordSend(ctx, rdb, prefix, "r1", i, at); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []uint64{7, 2999, 11, 11} {
		if err := benchtest.RecordSend(ctx, rdb, prefix, "r1", i, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := benchtest.RecordSend(ctx, rdb, prefix, "r2", 7, at); err != nil {
		t.Fatal(err)
	}
	n, err := sends.Distinct(ctx, "r1")
	if err != nil || n != 3000 {
		t.Fatalf("distinct = %d, %v", n, err)
	}
	twice, err := sends.SentMoreThanOnce(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(twice, func(i, j int) bool { return twice[i].TargetID < twice[j].TargetID })
	want := []domain.Occurrence{{TargetID: 7, OccurrenceUS: at.UnixMicro()}, {TargetID: 11, OccurrenceUS: at.UnixMicro()}, {TargetID: 2999, OccurrenceUS: at.UnixMicro()}}
	if !reflect.DeepEqual(twice, want) {
		t.Fatalf("sent more than once = %v, want %v", twice, want)
	}
	if n, err := sends.Distinct(ctx, "none"); err != nil || n != 0 {
		t.Fatalf("distinct of an unknown run = %d, %v", n, err)
	}
	if err := rdb.HSet(ctx, sends.Key("bad"), "garbage", 2).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := sends.SentMoreThanOnce(ctx, "bad"); err == nil {
		t.Fatal("a malformed field must be an error, not a silent skip")
	}
	if err := sends.Delete(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := sends.Distinct(ctx, "r1"); n != 0 {
		t.Fatalf("after delete: %d", n)
	}
}
