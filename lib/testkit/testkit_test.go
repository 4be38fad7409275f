package testkit

import (
	"context"
	"strconv"
	"testing"
)

// UnlinkPrefix removes every key under its prefix, over several pages of
// the scan, and nothing else, even when the prefix holds glob characters.
func TestUnlinkPrefix(t *testing.T) {
	ctx := context.Background()
	rdb, base := Redis(t)
	prefix := base + "a*b?[x]:"
	pipe := rdb.Pipeline()
	for i := range 2500 {
		pipe.Set(ctx, prefix+strconv.Itoa(i), i, 0)
	}
	// Keys the prefix would match as a pattern, and one beside it.
	others := []string{base + "aZZb?[x]:1", base + "a*bQx:2", base + "a*b?x:3", base + "other"}
	for _, k := range others {
		pipe.Set(ctx, k, 1, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := UnlinkPrefix(ctx, rdb, prefix)
	if err != nil || n != 2500 {
		t.Fatalf("UnlinkPrefix: %d removed, %v; want 2500, nil", n, err)
	}
	if left := rdb.Exists(ctx, prefix+"0", prefix+"1999", prefix+"2499").Val(); left != 0 {
		t.Fatalf("%d keys under the prefix left", left)
	}
	if kept := rdb.Exists(ctx, others...).Val(); kept != int64(len(others)) {
		t.Fatalf("%d of the %d keys outside the prefix kept", kept, len(others))
	}
}
