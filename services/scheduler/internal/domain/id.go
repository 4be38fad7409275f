package domain

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// NotificationID is the id of the occurrence at of a target: a UUID
// (RFC 9562 version 8) laid out like a version 7 one, so that ids sort by
// occurrence time and, within one millisecond, by the low 32 bits of the
// target id:
//
//	48 bits  the occurrence time, Unix milliseconds
//	 4 bits  the version (8)
//	12 bits  bits 31..20 of the target id
//	 2 bits  the variant (10)
//	20 bits  bits 19..0 of the target id
//	42 bits  of SHA-256 over the target id, the target's creation time and
//	         the occurrence time (microseconds)
//
// Being derived from the occurrence, it is unique with it (the outbox's
// unique key) and the same whoever claims it; the hash keeps ids apart
// should target ids ever be reused (a truncated table). Ids made in the
// order occurrences are claimed land next to each other in the sink's
// unique index on notification_id, where random ones would land anywhere
// in it (bench/README.md, BenchmarkUpsertSchemaCost).
func NotificationID(targetID int64, targetCreatedAt, occurrenceAt time.Time) string {
	sum := occurrenceHash(targetID, targetCreatedAt, occurrenceAt)
	ms, tid := uint64(occurrenceAt.UnixMilli()), uint64(targetID)
	var u [16]byte
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6] = 0x80 | byte(tid>>28)&0x0f // version 8, target id bits 31..28
	u[7] = byte(tid >> 20)
	u[8] = 0x80 | byte(tid>>14)&0x3f // variant 10, target id bits 19..14
	u[9] = byte(tid >> 6)
	u[10] = byte(tid<<2) | sum[0]>>6 // target id bits 5..0, then the hash
	copy(u[11:], sum[1:6])
	return formatUUID(u[:])
}

// HashedNotificationID is a version 8 UUID of the first 16 bytes of the
// same SHA-256: the id of an outbox row at or below
// outbox_relay.ordered_ids_after, a row claimed under schema version 10
// or below, which may have been published with it (see the scheduler's
// README); published again, it keeps that id.
func HashedNotificationID(targetID int64, targetCreatedAt, occurrenceAt time.Time) string {
	sum := occurrenceHash(targetID, targetCreatedAt, occurrenceAt)
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // variant 10
	return formatUUID(u)
}

// occurrenceHash is SHA-256 over the target id, its creation time and the
// occurrence time (Unix microseconds), each 8 bytes big-endian.
func occurrenceHash(targetID int64, targetCreatedAt, occurrenceAt time.Time) [32]byte {
	var in [24]byte
	binary.BigEndian.PutUint64(in[0:], uint64(targetID))
	binary.BigEndian.PutUint64(in[8:], uint64(targetCreatedAt.UnixMicro()))
	binary.BigEndian.PutUint64(in[16:], uint64(occurrenceAt.UnixMicro()))
	return sha256.Sum256(in[:])
}

// formatUUID writes the 16 bytes of u in the canonical 8-4-4-4-12 form.
func formatUUID(u []byte) string {
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
