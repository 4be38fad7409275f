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
// From the end of gctx until stop is closed, holdSession heartbeats at
// once and then every HeartbeatInterval, on its own connection to the
// group coordinator. It calls cancel (which cancels the handlers) and
// returns when the coordinator answers that the member or its generation
// is gone, or when no heartbeat has been acknowledged for SessionTimeout -
// DrainMargin, so that the handlers stop before another member can be
// given their records. That deadline is kept by a timer of its own, not by
// the heartbeat loop, and each heartbeat (coordinator lookup, dial and
// round trip together) gets at most the time left before it, so a slow
// or hanging coordinator cannot push the cancellation past it.
//
// The session clock is assumed to have restarted one HeartbeatInterval
// before the drain began: kafka-go's last heartbeat, the one that reported
// the rebalance, was acknowledged then at the latest. A generation that
// ended because kafka-go's own heartbeats failed may have a staler
// session; the first heartbeat here then finds the member gone (and
// cancels) or renews it.
func (c *Consumer[T]) holdSession(gctx context.Context, stop <-chan struct{}, gen *kafka.Generation, cancel func(), log *slog.Logger) {
	select {
	case <-gctx.Done():
	case <-stop:
		return
	}
	lastAck := time.Now().Add(-c.cfg.HeartbeatInterval)
	deadline := func() time.Time { return lastAck.Add(c.cfg.SessionTimeout - DrainMargin) }
	expired := make(chan struct{})
	expiry := time.AfterFunc(time.Until(deadline()), func() {
		log.Error("no heartbeat acknowledged while draining; cancelling handlers before the session can expire",
			"session_timeout", c.cfg.SessionTimeout)
		cancel()
		close(expired)
	})
	defer expiry.Stop()
	tick := time.NewTicker(c.cfg.HeartbeatInterval)
	defer tick.Stop()
	hb := &heartbeater{
		client: &kafka.Client{Addr: kafka.TCP(c.cfg.Brokers...)},
		req:    heartbeat.Request{GroupID: gen.GroupID, GenerationID: gen.ID, MemberID: gen.MemberID},
	}
	defer hb.close()
	for {
		sent := time.Now() // the coordinator restarts the session clock no earlier
		limit := sent.Add(c.cfg.HeartbeatInterval)
		if d := deadline(); d.Before(limit) {
			limit = d
		}
		err := hb.beat(limit)
		switch {
		case err == nil || errors.Is(err, kafka.RebalanceInProgress):
			if !expiry.Stop() {
				return // the deadline passed during the beat: handlers are cancelled
			}
			lastAck = sent
			expiry.Reset(time.Until(deadline()))
		case errors.Is(err, kafka.UnknownMemberId), errors.Is(err, kafka.IllegalGeneration), errors.Is(err, kafka.FencedInstanceID):
			log.Error("membership lost while draining; cancelling handlers", "err", err)
			cancel()
			return
		default:
			log.Warn("heartbeat while draining", "err", err)
		}
		select {
		case <-stop:
			return
		case <-expired:
			return
		case <-tick.C:
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
	client *kafka.Client // finds the coordinator
	req    heartbeat.Request
	conn   net.Conn // to the coordinator; nil until dialled, and after an error
	corr   int32    // last correlation id
}

// beat sends one heartbeat and returns the coordinator's answer as a
// kafka.Error (nil: acknowledged). It looks the coordinator up and
// connects when it has no connection, and drops the connection after any
// answer but success or a rebalance in progress. All of it ends by
// deadline.
func (h *heartbeater) beat(deadline time.Time) error {
	if h.conn == nil {
		if err := h.connect(deadline); err != nil {
			return err
		}
	}
	h.corr++
	_ = h.conn.SetDeadline(deadline)
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
func (h *heartbeater) connect(deadline time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
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
