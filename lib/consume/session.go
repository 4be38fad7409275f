package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/heartbeat"
)

// DrainMargin is the time a generation keeps beyond DrainTimeout for its
// cancelled handlers to return, its final commit and its rejoin request.
// It is also how long before its session could expire a draining member
// whose heartbeats go unanswered cancels its handlers.
const DrainMargin = 3 * time.Second

// MaxDrainTimeout returns the longest DrainTimeout that a heartbeat
// interval and a rebalance timeout allow: a member learns of a rebalance
// up to one heartbeat interval after it began, drains, and must have
// rejoined, DrainMargin later, before the coordinator stops waiting for it.
func MaxDrainTimeout(heartbeat, rebalance time.Duration) time.Duration {
	return rebalance - heartbeat - DrainMargin
}

// holdSession keeps gen's membership alive while the generation drains.
// kafka-go heartbeats from one of the generation's own functions, which
// ends at the first rebalance notice or when the group is closed, that is
// exactly when the drain begins; without heartbeats the coordinator would
// expel the member SessionTimeout later, hand its partitions to another
// member while its handlers still run, and refuse its final commit.
//
// From the end of gctx until stop is closed, holdSession heartbeats every
// HeartbeatInterval on its own connection to the group coordinator. It
// calls cancel (which cancels the handlers) and returns when the
// coordinator answers that the member or its generation is gone, or when
// no heartbeat has been acknowledged for SessionTimeout - DrainMargin, so
// that the handlers stop before another member can be given their records.
func (c *Consumer[T]) holdSession(gctx context.Context, stop <-chan struct{}, gen *kafka.Generation, cancel func(), log *slog.Logger) {
	select {
	case <-gctx.Done():
	case <-stop:
		return
	}
	// The last heartbeat kafka-go had acknowledged is at most one interval
	// old (the one that reported the rebalance is acknowledged too).
	lastAck := time.Now().Add(-c.cfg.HeartbeatInterval)
	expiry := time.NewTimer(time.Until(lastAck.Add(c.cfg.SessionTimeout - DrainMargin)))
	defer expiry.Stop()
	tick := time.NewTicker(c.cfg.HeartbeatInterval)
	defer tick.Stop()
	hb := &heartbeater{
		client:  &kafka.Client{Addr: kafka.TCP(c.cfg.Brokers...)},
		timeout: c.cfg.HeartbeatInterval,
		req:     heartbeat.Request{GroupID: gen.GroupID, GenerationID: gen.ID, MemberID: gen.MemberID},
	}
	defer hb.close()
	for {
		select {
		case <-stop:
			return
		case <-expiry.C:
			log.Error("no heartbeat acknowledged while draining; cancelling handlers before the session can expire",
				"since", time.Since(lastAck).Round(time.Millisecond), "session_timeout", c.cfg.SessionTimeout)
			cancel()
			return
		case <-tick.C:
		}
		sent := time.Now() // the coordinator restarts the session clock no earlier
		err := hb.beat()
		switch {
		case err == nil || errors.Is(err, kafka.RebalanceInProgress):
			lastAck = sent
			expiry.Reset(time.Until(lastAck.Add(c.cfg.SessionTimeout - DrainMargin)))
		case errors.Is(err, kafka.UnknownMemberId), errors.Is(err, kafka.IllegalGeneration), errors.Is(err, kafka.FencedInstanceID):
			log.Error("membership lost while draining; cancelling handlers", "err", err)
			cancel()
			return
		default:
			log.Warn("heartbeat while draining", "err", err)
		}
	}
}

// heartbeater sends one member's heartbeats to its group coordinator on a
// connection of its own. It speaks version 0 of the Heartbeat API through
// kafka-go's protocol package: kafka-go's Client.Heartbeat negotiates a
// later version and decodes its response fields in the wrong order, so
// that every error code reads as success (segmentio/kafka-go#1371). Not
// safe for concurrent use.
type heartbeater struct {
	client  *kafka.Client // finds the coordinator
	timeout time.Duration // per lookup, dial and heartbeat
	req     heartbeat.Request
	conn    net.Conn // to the coordinator; nil until dialled, and after an error
	corr    int32    // last correlation id
}

// beat sends one heartbeat and returns the coordinator's answer as a
// kafka.Error (nil: acknowledged). It looks the coordinator up and
// connects when it has no connection, and drops the connection after any
// answer but success or a rebalance in progress.
func (h *heartbeater) beat() error {
	if h.conn == nil {
		if err := h.connect(); err != nil {
			return err
		}
	}
	h.corr++
	_ = h.conn.SetDeadline(time.Now().Add(h.timeout))
	m, err := protocol.RoundTrip(h.conn, 0, h.corr, "notiflow-consume", &h.req)
	if err == nil {
		if code := m.(*heartbeat.Response).ErrorCode; code != 0 {
			err = kafka.Error(code)
		}
	}
	if err != nil && !errors.Is(err, kafka.RebalanceInProgress) {
		h.close()
		return fmt.Errorf("heartbeat to the coordinator of group %s: %w", h.req.GroupID, err)
	}
	return err
}

// connect finds the group's coordinator and connects to it.
func (h *heartbeater) connect() error {
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	res, err := h.client.FindCoordinator(ctx, &kafka.FindCoordinatorRequest{Key: h.req.GroupID, KeyType: kafka.CoordinatorKeyTypeConsumer})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		return fmt.Errorf("find the coordinator of group %s: %w", h.req.GroupID, err)
	}
	addr := net.JoinHostPort(res.Coordinator.Host, strconv.Itoa(res.Coordinator.Port))
	var d net.Dialer
	if h.conn, err = d.DialContext(ctx, "tcp", addr); err != nil {
		return fmt.Errorf("connect to the coordinator of group %s at %s: %w", h.req.GroupID, addr, err)
	}
	return nil
}

// close drops the connection, if any.
func (h *heartbeater) close() {
	if h.conn != nil {
		_ = h.conn.Close()
		h.conn = nil
	}
}
