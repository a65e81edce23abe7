// v1_test.go writes version-1 traces, the uncompressed row format readers must keep reading, so the tests
// of the batch layer (damage, truncation, absurd lengths) can place bytes exactly.
package trace

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// appendRow encodes ev as a version-1 record: the columns of one event back to back.
func (c *codec) appendRow(b []byte, ev *Event) []byte {
	var cs columns
	c.appendEvent(&cs, ev)
	for _, col := range cs {
		b = append(b, col...)
	}
	return b
}

// encodeV1 is encode for version 1: a batch every flushEvery events (0: one batch, split at 64 KiB).
func encodeV1(t testing.TB, h Header, evs []Event, flushEvery int) []byte {
	t.Helper()
	b := make([]byte, headerSize, 256)
	b = appendHeader(b, &h, 1)
	payload := b[headerSize:]
	copy(b, fileMagic[:])
	binary.LittleEndian.PutUint32(b[8:], 1)
	binary.LittleEndian.PutUint32(b[12:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(payload, castagnoli))
	out := bytes.NewBuffer(b)
	var c codec
	var batch []byte
	n := 0
	flush := func() {
		if n == 0 {
			return
		}
		out.Write(batchBytes(batch, uint32(n)))
		batch, n, c = batch[:0], 0, codec{}
	}
	for i := range evs {
		batch = c.appendRow(batch, &evs[i])
		n++
		if flushEvery > 0 && n == flushEvery || flushEvery == 0 && len(batch) >= flushBytes {
			flush()
		}
	}
	flush()
	return out.Bytes()
}
