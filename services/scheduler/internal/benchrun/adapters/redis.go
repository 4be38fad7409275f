package adapters

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/simsend"
	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
)

// SimSends reads the dispatcher's record of simulated sends: for a run, one
// hash with a field per occurrence sent, valued with the number of sends
// (the format of lib/simsend). It is safe for concurrent use.
type SimSends struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewSimSends reads the hashes under prefix (the dispatcher's
// NOTIFLOW_REDIS_PREFIX).
func NewSimSends(rdb redis.UniversalClient, prefix string) *SimSends {
	return &SimSends{rdb: rdb, prefix: prefix}
}

// Key is the hash of run runID.
func (s *SimSends) Key(runID string) string { return simsend.Key(s.prefix, runID) }

// Distinct returns how many distinct occurrences of the run were sent.
func (s *SimSends) Distinct(ctx context.Context, runID string) (int64, error) {
	n, err := s.rdb.HLen(ctx, s.Key(runID)).Result()
	if err != nil {
		return 0, fmt.Errorf("count simulated sends: %w", err)
	}
	return n, nil
}

// SentMoreThanOnce returns the occurrences of the run sent more than once,
// scanning the hash with HSCAN (no single long command).
func (s *SimSends) SentMoreThanOnce(ctx context.Context, runID string) ([]domain.Occurrence, error) {
	var out []domain.Occurrence
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, s.Key(runID), cursor, "", 10000).Result()
		if err != nil {
			return nil, fmt.Errorf("scan simulated sends: %w", err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			n, err := strconv.ParseInt(kv[i+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("simulated sends of %q: %w", kv[i], err)
			}
			if n <= 1 {
				continue
			}
			occ, err := parseOccurrence(kv[i])
			if err != nil {
				return nil, err
			}
			out = append(out, occ)
		}
		if next == 0 {
			// HSCAN may return a field twice across calls; the report
			// counts each occurrence once.
			return out, nil
		}
		cursor = next
	}
}

// Delete removes the run's hash.
func (s *SimSends) Delete(ctx context.Context, runID string) error {
	if err := s.rdb.Del(ctx, s.Key(runID)).Err(); err != nil {
		return fmt.Errorf("delete simulated sends: %w", err)
	}
	return nil
}

func parseOccurrence(field string) (domain.Occurrence, error) {
	target, at, err := simsend.ParseField(field)
	if err != nil {
		return domain.Occurrence{}, err
	}
	return domain.Occurrence{TargetID: target, OccurrenceUS: at}, nil
}
