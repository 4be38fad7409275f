package domain

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// NotificationID is the id of the occurrence at of a target: a UUID
// (RFC 9562 version 8, name-based on SHA-256) of the target id, the
// target's creation time and the occurrence time. Being derived from the
// occurrence, it is unique with it (the outbox's unique key) and the same
// whoever claims it; the creation time keeps ids apart should target ids
// ever be reused (a truncated table).
func NotificationID(targetID int64, targetCreatedAt, occurrenceAt time.Time) string {
	var in [24]byte
	binary.BigEndian.PutUint64(in[0:], uint64(targetID))
	binary.BigEndian.PutUint64(in[8:], uint64(targetCreatedAt.UnixMicro()))
	binary.BigEndian.PutUint64(in[16:], uint64(occurrenceAt.UnixMicro()))
	sum := sha256.Sum256(in[:])
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // variant 10
	var out [36]byte
	hex.Encode(out[0:8], u[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], u[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], u[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], u[8:10])
	out[23] = '-'
	hex.Encode(out[24:], u[10:])
	return string(out[:])
}
