package app

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// NewUUIDv7 returns a random, time-ordered UUID (RFC 9562 version 7) as 36
// characters. Time order keeps inserts into the outbox's unique event id
// index near its right edge. It is safe for concurrent use.
func NewUUIDv7() string {
	var u [16]byte
	ms := uint64(time.Now().UnixMilli())
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	_, _ = rand.Read(u[6:]) // crypto/rand.Read never fails
	u[6] = u[6]&0x0f | 0x70 // version 7
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
