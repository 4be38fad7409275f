package webhooksig_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/lib/webhooksig"
)

func TestGenerateDecode(t *testing.T) {
	t.Parallel()
	a, err := webhooksig.Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := webhooksig.Generate()
	if a == b {
		t.Fatal("two generated secrets are equal")
	}
	key, err := webhooksig.Decode(a)
	if err != nil || len(key) != webhooksig.KeyBytes {
		t.Fatalf("Decode(generated) = %d bytes, %v", len(key), err)
	}
	tests := []struct{ give string }{
		{""}, {"abc"}, {"whsec_"}, {"whsec_!!!"}, {"whsec_c2hvcnQ="}, {a[len("whsec_"):]},
	}
	for _, tt := range tests {
		if _, err := webhooksig.Decode(tt.give); !errors.Is(err, webhooksig.ErrBadSecret) {
			t.Errorf("Decode(%q) = %v, want ErrBadSecret", tt.give, err)
		}
	}
}

func TestRecordValid(t *testing.T) {
	t.Parallel()
	now := time.Now()
	r := webhooksig.Record{Current: "new", Previous: "old", PreviousUntil: now.Add(time.Minute)}
	if got := r.Valid(now); len(got) != 2 || got[0] != "new" || got[1] != "old" {
		t.Errorf("during grace: %v", got)
	}
	if got := r.Valid(now.Add(time.Minute)); len(got) != 1 || got[0] != "new" {
		t.Errorf("after grace: %v", got)
	}
}

// Store keeps the highest version: a sync writing an older Record after a
// rotation does not undo it.
func TestStoreLoadVersionGuard(t *testing.T) {
	t.Parallel()
	rdb, prefix := testkit.Redis(t)
	ctx := context.Background()
	if _, ok, err := webhooksig.Load(ctx, rdb, prefix, 7); err != nil || ok {
		t.Fatalf("Load of a missing record: ok=%v err=%v", ok, err)
	}
	until := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	v2 := webhooksig.Record{Version: 2, Current: "whsec_b", Previous: "whsec_a", PreviousUntil: until}
	if err := webhooksig.Store(ctx, rdb, prefix, 7, v2); err != nil {
		t.Fatal(err)
	}
	if err := webhooksig.Store(ctx, rdb, prefix, 7, webhooksig.Record{Version: 1, Current: "whsec_a"}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := webhooksig.Load(ctx, rdb, prefix, 7)
	if err != nil || !ok || got.Version != 2 || got.Current != "whsec_b" || got.Previous != "whsec_a" || !got.PreviousUntil.Equal(until) {
		t.Fatalf("Load = %+v ok=%v err=%v, want %+v", got, ok, err, v2)
	}
}

// StoreNewer writes only the records Redis holds an older version of or
// none (a key without its current secret counts as none), and leaves one
// stored at the same or a higher version untouched.
func TestStoreNewerWritesOnlyRecordsBehind(t *testing.T) {
	t.Parallel()
	rdb, prefix := testkit.Redis(t)
	ctx := context.Background()
	v := func(n int64, cur string) webhooksig.Record { return webhooksig.Record{Version: n, Current: cur} }
	for id, rec := range map[uint64]webhooksig.Record{1: v(1, "whsec_one"), 2: v(1, "whsec_two"), 3: v(1, "whsec_three"), 4: v(3, "whsec_four3"), 6: v(1, "whsec_six")} {
		if err := webhooksig.Store(ctx, rdb, prefix, id, rec); err != nil {
			t.Fatal(err)
		}
	}
	// The observation device: a record that is written again loses this.
	if err := rdb.HSet(ctx, webhooksig.RedisKey(prefix, 1), "cur", "whsec_in_place").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, webhooksig.RedisKey(prefix, 2)).Err(); err != nil { // lost, as in a failover
		t.Fatal(err)
	}
	if err := rdb.HDel(ctx, webhooksig.RedisKey(prefix, 6), "cur").Err(); err != nil { // a version without its secret
		t.Fatal(err)
	}
	n, err := webhooksig.StoreNewer(ctx, rdb, prefix, map[uint64]webhooksig.Record{
		1: v(1, "whsec_one"), 2: v(1, "whsec_two"), 3: v(2, "whsec_three2"), 4: v(2, "whsec_four2"), 5: v(1, "whsec_five"), 6: v(1, "whsec_six"),
	})
	if err != nil || n != 4 {
		t.Fatalf("StoreNewer = %d, %v; want 4 (targets 2, 3, 5 and 6)", n, err)
	}
	want := map[uint64]webhooksig.Record{1: v(1, "whsec_in_place"), 2: v(1, "whsec_two"), 3: v(2, "whsec_three2"), 4: v(3, "whsec_four3"), 5: v(1, "whsec_five"), 6: v(1, "whsec_six")}
	for id, w := range want {
		got, ok, err := webhooksig.Load(ctx, rdb, prefix, id)
		if err != nil || !ok || got.Version != w.Version || got.Current != w.Current {
			t.Errorf("target %d: %+v ok=%v err=%v, want version %d current %s", id, got, ok, err, w.Version, w.Current)
		}
	}
	if n, err := webhooksig.StoreNewer(ctx, rdb, prefix, nil); n != 0 || err != nil {
		t.Errorf("StoreNewer of nothing = %d, %v", n, err)
	}
}

// SigningCmd reads what Store wrote, but the version: a record with a
// grace period, one without, and none.
func TestSigningCmdReadsStoredRecord(t *testing.T) {
	t.Parallel()
	rdb, prefix := testkit.Redis(t)
	ctx := context.Background()
	until := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	recs := map[uint64]webhooksig.Record{
		1: {Version: 2, Current: "whsec_b", Previous: "whsec_a", PreviousUntil: until},
		2: {Version: 1, Current: "whsec_c"},
	}
	for id, rec := range recs {
		if err := webhooksig.Store(ctx, rdb, prefix, id, rec); err != nil {
			t.Fatal(err)
		}
	}
	for id := uint64(1); id <= 3; id++ {
		cmd := webhooksig.SigningCmd(ctx, prefix, id)
		if err := rdb.Process(ctx, cmd); err != nil {
			t.Fatal(err)
		}
		got, ok := webhooksig.SigningRecordOf(cmd.Val())
		want, wantOK := recs[id]
		want.Version = 0
		if ok != wantOK || got.Current != want.Current || got.Previous != want.Previous || !got.PreviousUntil.Equal(want.PreviousUntil) || got.Version != 0 {
			t.Errorf("target %d: %+v ok=%v, want %+v ok=%v", id, got, ok, want, wantOK)
		}
	}
}
