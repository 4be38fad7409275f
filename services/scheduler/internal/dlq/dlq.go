package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
)

// Sources are the services that dead-letter records.
var Sources = []string{"dispatcher", "sink"}

// Record is one dead letter as the admin routes show it.
type Record struct {
	// Partition and Offset locate the dead letter in the DLQ topic.
	Partition int       `json:"dlq_partition"`
	Offset    int64     `json:"dlq_offset"`
	Time      time.Time `json:"time"` // the dead letter's Kafka timestamp
	Source    string    `json:"source"`
	// SourceTopic, SourcePartition and SourceOffset locate the original
	// record.
	SourceTopic     string `json:"source_topic"`
	SourcePartition int    `json:"source_partition"`
	SourceOffset    int64  `json:"source_offset"`
	Key             string `json:"key"`
	Reason          string `json:"reason"`
	Attempts        int    `json:"attempts"`
	RedriveCount    int    `json:"redrive_count"`
	Truncated       bool   `json:"truncated,omitempty"`
	// Redriven is set when the record was already redriven (its mark is
	// in Redis).
	Redriven bool `json:"redriven"`

	msg kafka.Message
}

// FromMessage reads a record of the DLQ topic.
func FromMessage(m kafka.Message) Record {
	d := kafkax.ParseDeadLetter(m.Headers)
	return Record{
		Partition: m.Partition, Offset: m.Offset, Time: m.Time.UTC(), Source: d.Service,
		SourceTopic: d.Topic, SourcePartition: d.Partition, SourceOffset: d.Offset,
		Key: string(m.Key), Reason: d.Reason, Attempts: d.Attempts, RedriveCount: d.Redrives, Truncated: d.Truncated,
		msg: m,
	}
}

// Filter selects dead letters: those with From <= time < To, from Source
// (empty: any) whose reason contains Reason (case-insensitive; empty: any).
type Filter struct {
	From, To time.Time
	Source   string
	Reason   string
}

// Match reports whether r is selected.
func (f Filter) Match(r Record) bool {
	if r.Time.Before(f.From) || !r.Time.Before(f.To) {
		return false
	}
	if f.Source != "" && r.Source != f.Source {
		return false
	}
	return f.Reason == "" || strings.Contains(strings.ToLower(r.Reason), strings.ToLower(f.Reason))
}

// Decide says whether r may be redriven with at most maxRedrives
// redrives, and if not why.
func Decide(r Record, maxRedrives int) (ok bool, why string) {
	switch {
	case r.Redriven:
		return false, "already redriven"
	case r.RedriveCount < 0:
		return false, "unreadable " + kafkax.HeaderRedriveCount + " header"
	case r.RedriveCount >= maxRedrives:
		return false, fmt.Sprintf("redrive limit reached (%d of %d)", r.RedriveCount, maxRedrives)
	case r.Truncated:
		return false, "value truncated in the DLQ"
	case r.SourceTopic == "":
		return false, "no source topic"
	}
	return true, ""
}

// Log reads the DLQ topic.
type Log interface {
	// Read calls fn with each record of the topic whose timestamp is in
	// [from, to), partition by partition, reading only the offsets of that
	// window; fn returns false to stop reading the partition.
	Read(ctx context.Context, from, to time.Time, fn func(kafka.Message) bool) error
}

// Marks remembers which dead letters were redriven.
type Marks interface {
	// Marked reports which of the dead letters (by DLQ partition and
	// offset) are marked.
	Marked(ctx context.Context, recs []Record) ([]bool, error)
	// Mark marks the dead letter; false: it was already marked.
	Mark(ctx context.Context, r Record) (bool, error)
	// Unmark removes the marks (of records whose produce failed).
	Unmark(ctx context.Context, recs []Record) error
}

// Producer writes records to their topics and returns once Kafka
// acknowledged them all.
type Producer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Options tune a Service.
type Options struct {
	MaxRedrives int // a record with this many redrives is skipped
	RedriveMax  int // the most records one Redrive handles
}

// Service lists and redrives dead letters. It is safe for concurrent use.
type Service struct {
	topic string
	log   Log
	marks Marks
	prod  Producer
	opt   Options
	l     *slog.Logger
}

// NewService returns a Service over the DLQ topic read through log.
func NewService(topic string, log Log, marks Marks, prod Producer, opt Options, l *slog.Logger) *Service {
	return &Service{topic: topic, log: log, marks: marks, prod: prod, opt: opt, l: l}
}

// MaxRedrives is the redrive limit.
func (s *Service) MaxRedrives() int { return s.opt.MaxRedrives }

// List returns the first limit records f selects, oldest first, and
// whether there were more.
func (s *Service) List(ctx context.Context, f Filter, limit int) ([]Record, bool, error) {
	recs, more, err := s.read(ctx, f, limit)
	if err != nil {
		return nil, false, err
	}
	marked, err := s.marks.Marked(ctx, recs)
	if err != nil {
		return nil, false, fmt.Errorf("read redrive marks: %w", err)
	}
	for i := range recs {
		recs[i].Redriven = marked[i]
	}
	return recs, more, nil
}

// read returns the first limit records f selects, oldest first (by
// timestamp, then partition and offset).
func (s *Service) read(ctx context.Context, f Filter, limit int) ([]Record, bool, error) {
	var recs []Record
	perPartition := map[int]int{}
	more := false
	err := s.log.Read(ctx, f.From, f.To, func(m kafka.Message) bool {
		r := FromMessage(m)
		if !f.Match(r) {
			return true
		}
		// The first limit of the window are among the first limit of
		// each partition.
		if perPartition[m.Partition] == limit {
			more = true
			return false
		}
		perPartition[m.Partition]++
		recs = append(recs, r)
		return true
	})
	if err != nil {
		return nil, false, fmt.Errorf("read dead letters from %s: %w", s.topic, err)
	}
	sort.Slice(recs, func(i, j int) bool {
		a, b := recs[i], recs[j]
		if !a.Time.Equal(b.Time) {
			return a.Time.Before(b.Time)
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
	if len(recs) > limit {
		recs, more = recs[:limit], true
	}
	return recs, more, nil
}

// Outcome is one record of a redrive and what became of it.
type Outcome struct {
	Record
	// Action is "redrive" (dry run: would be redriven), "redriven" or
	// "skipped".
	Action string `json:"action"`
	Why    string `json:"skip_reason,omitempty"`
}

// Result is the answer of a redrive.
type Result struct {
	DryRun   bool      `json:"dry_run"`
	Matched  int       `json:"matched"`
	Redriven int       `json:"redriven"`
	Skipped  int       `json:"skipped"`
	More     bool      `json:"more"` // the window held more than NOTIFLOW_DLQ_REDRIVE_MAX records
	Records  []Outcome `json:"records"`
}

// ErrNoSource is returned by Redrive without a source.
var ErrNoSource = errors.New("source is required")

// Redrive produces the records f selects (f.Source is required) back to
// their source topics with their original key, value and headers, the
// redrive count raised by one (kafkax.RedriveHeaders), skipping the ones
// Decide refuses. Each record is marked before it is produced; a record
// whose mark is already there (a concurrent redrive) is skipped. With
// dryRun it only says what it would do. On a produce error the marks of
// the batch are removed and the error returned: nothing of it counts as
// redriven (Kafka may still hold some of them: the dedup downstream makes
// a later second copy harmless).
func (s *Service) Redrive(ctx context.Context, f Filter, dryRun bool) (Result, error) {
	if f.Source == "" {
		return Result{}, ErrNoSource
	}
	recs, more, err := s.List(ctx, f, s.opt.RedriveMax)
	if err != nil {
		return Result{}, err
	}
	res := Result{DryRun: dryRun, Matched: len(recs), More: more, Records: make([]Outcome, len(recs))}
	var send []Record
	var out []kafka.Message
	var idx []int
	for i, r := range recs {
		res.Records[i] = Outcome{Record: r, Action: "redrive"}
		ok, why := Decide(r, s.opt.MaxRedrives)
		if ok && !dryRun {
			if ok, err = s.marks.Mark(ctx, r); err != nil {
				_ = s.marks.Unmark(context.WithoutCancel(ctx), send)
				return Result{}, fmt.Errorf("mark dead letter %d/%d: %w", r.Partition, r.Offset, err)
			} else if !ok {
				why = "already redriven"
			}
		}
		if !ok {
			res.Records[i].Action, res.Records[i].Why = "skipped", why
			res.Skipped++
			continue
		}
		if dryRun {
			continue
		}
		send = append(send, r)
		idx = append(idx, i)
		out = append(out, kafka.Message{
			Topic: r.SourceTopic, Key: r.msg.Key, Value: r.msg.Value,
			Headers: kafkax.RedriveHeaders(r.msg.Headers, r.RedriveCount+1, fmt.Sprintf("%s/%d/%d", s.topic, r.Partition, r.Offset)),
		})
	}
	if len(out) > 0 {
		if err := s.prod.WriteMessages(ctx, out...); err != nil {
			if uerr := s.marks.Unmark(context.WithoutCancel(ctx), send); uerr != nil {
				err = errors.Join(err, fmt.Errorf("remove redrive marks: %w", uerr))
			}
			return Result{}, fmt.Errorf("produce %d dead letter(s) back to their topics: %w", len(out), err)
		}
		for _, i := range idx {
			res.Records[i].Action, res.Records[i].Redriven = "redriven", true
		}
		res.Redriven = len(out)
		s.l.Info("dead letters redriven", "source", f.Source, "from", f.From, "to", f.To, "redriven", len(out), "skipped", res.Skipped)
	}
	return res, nil
}
