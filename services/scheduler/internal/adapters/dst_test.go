package adapters

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// TestClaimDSTFixedTimes claims daily targets in America/New_York through
// both 2026 transitions, every 10 minutes and every 6 hours (so that one
// claim catches up over the transition), with catch-up and with collapse:
// the outbox holds one occurrence per local day, 01:30
// on the fall-back day once (at 01:30 EDT), 02:30 on the spring-forward day
// at 03:00 EDT.
func TestClaimDSTFixedTimes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		expr  string
		from  time.Time
		until time.Time
		want  []time.Time
	}{
		{
			name: "01:30 through fall back", expr: "30 1 * * *",
			from:  time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC),
			until: time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC),
			want:  []time.Time{time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), time.Date(2026, 11, 2, 6, 30, 0, 0, time.UTC)},
		},
		{
			name: "02:30 through spring forward", expr: "30 2 * * *",
			from:  time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC),
			until: time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC),
			want:  []time.Time{time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), time.Date(2026, 3, 9, 6, 30, 0, 0, time.UTC)},
		},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			every  time.Duration
			policy domain.MissedPolicy
		}{
			{10 * time.Minute, domain.MissedPolicy{MaxCatchUp: 10}},
			{6 * time.Hour, domain.MissedPolicy{MaxCatchUp: 10}},
			{6 * time.Hour, domain.MissedPolicy{Collapse: true}},
		} {
			t.Run(fmt.Sprintf("%s every %v collapse %v", tt.name, c.every, c.policy.Collapse), func(t *testing.T) {
				t.Parallel()
				s := openStore(t)
				ctx := context.Background()
				if _, err := s.CreateTargets(ctx, []domain.Target{cronTarget(t, "r", tt.expr, "America/New_York", tt.from)}); err != nil {
					t.Fatal(err)
				}
				for now := tt.from; !now.After(tt.until); now = now.Add(c.every) {
					if _, err := s.ClaimDue(ctx, now, 10, domain.Planner{Policy: c.policy}); err != nil {
						t.Fatalf("claim at %v: %v", now, err)
					}
				}
				upTo, err := s.CommittedUpTo(ctx)
				if err != nil {
					t.Fatal(err)
				}
				notes, err := s.Unpublished(ctx, 0, upTo, 100)
				if err != nil {
					t.Fatal(err)
				}
				var got []time.Time
				for _, n := range notes {
					got = append(got, n.OccurrenceAt)
				}
				if len(got) != len(tt.want) {
					t.Fatalf("outbox occurrences %v, want %v", got, tt.want)
				}
				for i := range got {
					if !got[i].Equal(tt.want[i]) {
						t.Fatalf("outbox occurrences %v, want %v", got, tt.want)
					}
				}
			})
		}
	}
}
