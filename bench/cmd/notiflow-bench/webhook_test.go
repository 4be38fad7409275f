package main

import (
	"strings"
	"testing"

	"github.com/notiflow/notiflow/bench/receiver"
)

func TestReceiverResultCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give receiver.Stats
		want []string // parts of the error; none: no error
	}{
		{"every occurrence once", receiver.Stats{Calls: 10, Distinct: 10}, nil},
		{"retries are fine", receiver.Stats{Calls: 12, Distinct: 10}, nil},
		{"duplicate", receiver.Stats{Calls: 11, Distinct: 10, Duplicates: 1}, []string{"1 duplicate call(s)"}},
		{"missing key", receiver.Stats{Calls: 11, Distinct: 10, MissingIdempotencyKey: 1}, []string{"1 call(s) without Idempotency-Key"}},
		{"bad signature", receiver.Stats{Calls: 10, Distinct: 9, BadSignatures: 1},
			[]string{"1 call(s) whose signature did not verify", "9 distinct occurrences answered of 10"}},
		{"not every occurrence", receiver.Stats{Calls: 8, Distinct: 8}, []string{"8 distinct occurrences answered of 10"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := (&receiverResult{Stats: tt.give}).check(10)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("check = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("check = nil, want an error with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("check = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}
