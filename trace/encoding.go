// encoding.go owns the byte layout of a trace file: the file header, the batch frame, the delta
// encoding of one event, the limits a reader enforces and the errors it reports. writer.go and
// reader.go only move these bytes; docs/trace-format.md describes the same layout for people.
package trace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// Version is the format version this package writes. It reads every version from MinVersion on: version 1
// is the uncompressed row format; version 2 compresses the batches (zstd) and lays each batch out in columns;
// version 3 numbers the compressed blocks and follows every group of them with a parity block, so a reader
// rebuilds one damaged block of a group instead of losing the rest of its zstd frame (stream.go); version 4
// says what it holds, so a reader counts exactly what it could not read: every block carries the index of its
// first event, the header its segment's first event index and says how many events open it as a snapshot,
// a copy of the header follows it, the writer's clean close is a block of its own, and a parity block is
// written twice, a row wide, with the group's length (stream.go, parity.go).
const Version = 4

// MinVersion is the oldest format version this package reads.
const MinVersion = 1

// FileSuffix ends the name of every trace file (<host>.<pid>.swtrace).
const FileSuffix = ".swtrace"

// Limits on one event. The writer refuses larger events and the reader treats them as corrupt, so
// a reader never allocates more than these, whatever the input claims.
// MaxPtrs, the entries of Event.Ptrs, is the ABI's limit on a call's pointer array (abi_gen.go).
const MaxText = 4 << 20 // bytes of Event.Text

const (
	headerSize = 20       // magic[8], version u32, payload length u32, CRC32C u32
	maxHeader  = 1 << 20  // header payload limit (host and argv)
	frameSize  = 16       // magic[4], payload length u32, event count u32, CRC32C u32
	maxBatch   = 16 << 20 // batch payload limit; a bigger length is corruption, not a reason to allocate
	flushBytes = 64 << 10 // the writer ends a batch once its payload reaches this size
	zstdWindow = 4 << 20  // the longest zstd window a reader accepts (version 2 wrote it)
	// frameWindow is the window the writer declares, and so what a reader's decoder holds in memory: a
	// zstd frame holds DefaultChunkBytes of batches and the batch that ends it, and a window as long as the
	// batches compresses them as well as a longer one (the last batch barely refers to the first).
	frameWindow = 1 << 20
	numCtx      = 128 // delta contexts: one per KindCall Fn (mod 64), one per other Kind (mod 64)
)

var (
	fileMagic  = [8]byte{'S', 'W', 'T', 'R', 'A', 'C', 'E', 0}
	batchMagic = [4]byte{'S', 'W', 'B', 'T'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// Errors a reader reports, always wrapped with where it happened; test them with errors.Is.
var (
	// ErrFormat: not a trace, a bad header, or a version this package does not read.
	ErrFormat = errors.New("trace: not a valid trace")
	// ErrCorrupt: a batch failed its checksum or does not decode.
	ErrCorrupt = errors.New("trace: corrupt batch")
	// ErrTruncated: the file ends inside a batch; every event before that batch was delivered.
	ErrTruncated = errors.New("trace: truncated batch")
)

// traceError is a one-line message that matches one of the sentinel errors under errors.Is.
type traceError struct {
	kind error
	msg  string
}

func (e *traceError) Error() string        { return e.msg }
func (e *traceError) Is(target error) bool { return target == e.kind }

func errorf(kind error, format string, args ...any) error {
	return &traceError{kind: kind, msg: "trace: " + fmt.Sprintf(format, args...)}
}

// Presence bits of an event record. A field whose bit is clear equals its predicted value (see
// codec), so fields that never change, zero ones included, cost nothing. The most frequent fields
// get the low seven bits so the bitmap of a typical call fits in one byte.
const (
	bitTS = 1 << iota
	bitFn
	bitArg0
	bitArg1
	bitArg2
	bitRet
	bitTID
	bitArg3
	bitArg4
	bitArg5
	bitGroup
	bitHandle
	bitPtrs
	bitText
	bitsKnown = 1<<iota - 1
)

var argBits = [6]uint64{bitArg0, bitArg1, bitArg2, bitArg3, bitArg4, bitArg5}

// slot holds the previous Handle, Ret and Args of one delta context.
type slot struct {
	handle int64
	ret    int64
	args   [6]uint64
}

// codec is the delta state shared by the encoder and the decoder. It starts at zero at every
// batch, so each batch decodes on its own.
type codec struct {
	ts     int64
	tid    uint32
	fn     uint16
	group  uint32
	handle int64  // version 1's Handle prediction: the previous event's
	ptr    uint64 // last pointer of the batch's Ptrs chain
	// ctxHandle is version 2's Handle prediction: the previous Handle of the same context (a save's is
	// the previous save's, an unpack's the previous unpack's), so a region's handles cost a byte or less.
	ctxHandle bool
	ctx       [numCtx]slot
}

// handlePrev is where the Handle prediction of an event in context s lives.
func (c *codec) handlePrev(s *slot) *int64 {
	if c.ctxHandle {
		return &s.handle
	}
	return &c.handle
}

// ctxIndex picks the delta context: calls of one function share one (a malloc's size is
// predicted by the previous malloc's size, not by a launch's workspace size).
func ctxIndex(k Kind, fn uint16) int {
	if k == KindCall {
		return int(fn % 64)
	}
	return 64 + int(k%64)
}

// Columns of a version-2 batch payload. Each field of every record goes to its own column, so values of one
// kind sit together and the compressor sees their repeats; the record layout of version 1 is the same
// sequence with every column being the one row stream.
const (
	colKind = iota
	colBits
	colTS
	colTID
	colFn
	colGroup
	colHandle
	colRet
	colArg0 // colArg0+i holds Args[i]
	colPtrs = colArg0 + 6
	colText = colPtrs + 1
	numCols = colText + 1
)

// columns are the encoder's output for one batch: one byte stream per column.
type columns [numCols][]byte

// size is the payload length the columns make (their lengths' varints included).
func (cs *columns) size() int {
	n := 0
	for _, c := range cs {
		n += len(c) + uvarintLen(uint64(len(c)))
	}
	return n
}

// appendPayload writes the version-2 payload: each column's length, then the columns in order.
func (cs *columns) appendPayload(b []byte) []byte {
	for _, c := range cs {
		b = binary.AppendUvarint(b, uint64(len(c)))
	}
	for _, c := range cs {
		b = append(b, c...)
	}
	return b
}

func (cs *columns) reset() {
	for i := range cs {
		cs[i] = cs[i][:0]
	}
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// appendEvent encodes ev into the columns and advances the state. The caller has checked the limits. Each
// field goes to its own column as it is compared with its prediction, so one pass does both; the bitmap
// that says which fields were written comes last, in its column.
func (c *codec) appendEvent(cs *columns, ev *Event) {
	s := &c.ctx[ctxIndex(ev.Kind, ev.Fn)]
	var bits uint64
	if ev.TS != c.ts {
		bits |= bitTS
		cs[colTS] = appendVarint(cs[colTS], ev.TS-c.ts)
		c.ts = ev.TS
	}
	if ev.TID != c.tid {
		bits |= bitTID
		cs[colTID] = appendUvarint(cs[colTID], uint64(ev.TID))
		c.tid = ev.TID
	}
	if ev.Fn != c.fn {
		bits |= bitFn
		cs[colFn] = appendUvarint(cs[colFn], uint64(ev.Fn))
		c.fn = ev.Fn
	}
	if ev.Group != c.group {
		bits |= bitGroup
		cs[colGroup] = appendUvarint(cs[colGroup], uint64(ev.Group))
		c.group = ev.Group
	}
	if h := c.handlePrev(s); ev.Handle != *h {
		bits |= bitHandle
		cs[colHandle] = appendVarint(cs[colHandle], ev.Handle-*h)
		*h = ev.Handle
	}
	if ev.Ret != s.ret {
		bits |= bitRet
		cs[colRet] = appendVarint(cs[colRet], ev.Ret-s.ret)
		s.ret = ev.Ret
	}
	for i := range len(ev.Args) { // by index: ranging over the array would copy it
		if a := ev.Args[i]; a != s.args[i] {
			bits |= argBits[i]
			cs[colArg0+i] = appendVarint(cs[colArg0+i], int64(a-s.args[i]))
			s.args[i] = a
		}
	}
	if len(ev.Ptrs) > 0 {
		bits |= bitPtrs
		p := appendUvarint(cs[colPtrs], uint64(len(ev.Ptrs)))
		for _, v := range ev.Ptrs {
			p = appendVarint(p, int64(v-c.ptr))
			c.ptr = v
		}
		cs[colPtrs] = p
	}
	if ev.Text != "" {
		bits |= bitText
		cs[colText] = appendUvarint(cs[colText], uint64(len(ev.Text)))
		cs[colText] = append(cs[colText], ev.Text...)
	}
	cs[colKind] = append(cs[colKind], byte(ev.Kind))
	cs[colBits] = appendUvarint(cs[colBits], bits)
}

// appendUvarint is binary.AppendUvarint with the one-byte case, most of a trace's values, inlined.
func appendUvarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return binary.AppendUvarint(b, v)
}

// appendVarint is binary.AppendVarint (zig-zag) by way of appendUvarint.
func appendVarint(b []byte, v int64) []byte {
	return appendUvarint(b, uint64(v<<1)^uint64(v>>63))
}

// decoder reads varints from a batch payload; the first error sticks and ends decoding.
type decoder struct {
	b   []byte
	i   int
	err string
}

func (d *decoder) fail(msg string) {
	if d.err == "" {
		d.err = msg
	}
	d.i = len(d.b)
}

// raw reads one unsigned varint; most values in a batch are one byte, so that case comes first.
func (d *decoder) raw(what string) uint64 {
	if d.i < len(d.b) && d.b[d.i] < 0x80 {
		d.i++
		return uint64(d.b[d.i-1])
	}
	v, n := binary.Uvarint(d.b[d.i:])
	if n <= 0 {
		d.fail("bad varint in " + what)
		return 0
	}
	d.i += n
	return v
}

func (d *decoder) uvarint(max uint64, what string) uint64 {
	v := d.raw(what)
	if v > max {
		d.fail(fmt.Sprintf("%s %d out of range", what, v))
		return 0
	}
	return v
}

// varint reads a zig-zag signed varint (encoding/binary's Varint layout).
func (d *decoder) varint(what string) int64 {
	u := d.raw(what)
	return int64(u>>1) ^ -int64(u&1)
}

// source is where a batch's fields are read from: for version 2 one decoder per column, for version 1 the
// one row stream in every slot.
type source [numCols]*decoder

// err returns the first error of any column.
func (src *source) err() string {
	for _, d := range src {
		if d.err != "" {
			return d.err
		}
	}
	return ""
}

// decodeEvent decodes one record into ev (overwriting all of it) and advances the state. It
// allocates only for Ptrs and Text, after checking their length against the limits and against
// the bytes left in their column. On bad input it returns a reason.
func (c *codec) decodeEvent(src *source, ev *Event) string {
	dk := src[colKind]
	if dk.i >= len(dk.b) {
		return "batch ends before its last event"
	}
	k := Kind(dk.b[dk.i])
	dk.i++
	if k == 0 {
		return "event kind 0"
	}
	bits := src[colBits].uvarint(bitsKnown, "presence bitmap")
	if e := src[colBits].err; e != "" {
		return e
	}
	*ev = Event{Kind: k}
	if bits&bitTS != 0 {
		c.ts += src[colTS].varint("timestamp")
	}
	if bits&bitTID != 0 {
		c.tid = uint32(src[colTID].uvarint(math.MaxUint32, "thread id"))
	}
	if bits&bitFn != 0 {
		c.fn = uint16(src[colFn].uvarint(math.MaxUint16, "function id"))
	}
	if bits&bitGroup != 0 {
		c.group = uint32(src[colGroup].uvarint(math.MaxUint32, "group id"))
	}
	s := &c.ctx[ctxIndex(k, c.fn)]
	h := c.handlePrev(s)
	if bits&bitHandle != 0 {
		*h += src[colHandle].varint("handle")
	}
	ev.TS, ev.TID, ev.Fn, ev.Group, ev.Handle = c.ts, c.tid, c.fn, c.group, *h
	if bits&bitRet != 0 {
		s.ret += src[colRet].varint("ret")
	}
	ev.Ret = s.ret
	for i := range ev.Args {
		if bits&argBits[i] != 0 {
			s.args[i] += uint64(src[colArg0+i].varint("argument"))
		}
	}
	ev.Args = s.args
	if bits&bitPtrs != 0 {
		// Each pointer takes at least one byte: a count beyond the bytes left is corrupt.
		d := src[colPtrs]
		n := d.uvarint(MaxPtrs, "pointer count")
		if n == 0 || n > uint64(len(d.b)-d.i) {
			d.fail(fmt.Sprintf("pointer count %d does not fit in the batch", n))
			return d.err
		}
		ev.Ptrs = make([]uint64, n)
		for i := range ev.Ptrs {
			c.ptr += uint64(d.varint("pointer"))
			ev.Ptrs[i] = c.ptr
		}
	}
	if bits&bitText != 0 {
		d := src[colText]
		n := d.uvarint(MaxText, "text length")
		if n == 0 || n > uint64(len(d.b)-d.i) {
			d.fail(fmt.Sprintf("text length %d does not fit in the batch", n))
			return d.err
		}
		ev.Text = string(d.b[d.i : d.i+int(n)])
		d.i += int(n)
	}
	return src.err()
}

// splitColumns points src at the columns of a version-2 payload (kept in cols); a reason when the lengths
// do not add up to the payload.
func splitColumns(p []byte, cols *[numCols]decoder, src *source) string {
	d := decoder{b: p}
	var lens [numCols]uint64
	for i := range lens {
		lens[i] = d.uvarint(uint64(len(p)), "column length")
	}
	if d.err != "" {
		return d.err
	}
	off := uint64(d.i)
	for i := range cols {
		if lens[i] > uint64(len(p))-off {
			return fmt.Sprintf("column %d length %d runs past the batch", i, lens[i])
		}
		cols[i] = decoder{b: p[off : off+lens[i]]}
		src[i] = &cols[i]
		off += lens[i]
	}
	if off != uint64(len(p)) {
		return fmt.Sprintf("%d bytes after the last column", uint64(len(p))-off)
	}
	return ""
}

// leftover returns the bytes no event consumed, over every column.
func (src *source) leftover() int {
	n := 0
	for i, d := range src {
		if i > 0 && d == src[0] {
			continue // version 1: one stream in every slot
		}
		n += len(d.b) - d.i
	}
	return n
}

// checkEvent reports why the writer cannot encode ev, or nil. Every event pays for it, so the test that
// passes is small enough to inline.
func checkEvent(ev *Event) error {
	if ev.Kind != 0 && len(ev.Text) <= MaxText && len(ev.Ptrs) <= MaxPtrs {
		return nil
	}
	return eventError(ev)
}

func eventError(ev *Event) error {
	switch {
	case ev.Kind == 0:
		return errors.New("trace: event has kind 0")
	case len(ev.Text) > MaxText:
		return fmt.Errorf("trace: event text is %d bytes, limit %d", len(ev.Text), MaxText)
	case len(ev.Ptrs) > MaxPtrs:
		return fmt.Errorf("trace: event has %d pointers, limit %d", len(ev.Ptrs), MaxPtrs)
	}
	return nil
}

// appendHeader encodes the header payload (everything after the fixed 20 bytes) of the given version.
func appendHeader(b []byte, h *Header, version uint32) []byte {
	b = binary.AppendVarint(b, int64(h.PID))
	b = appendString(b, h.Host)
	b = binary.AppendVarint(b, int64(h.Rank))
	b = binary.AppendVarint(b, h.StartUnix)
	b = binary.AppendUvarint(b, uint64(len(h.Argv)))
	for _, a := range h.Argv {
		b = appendString(b, a)
	}
	if version >= 2 {
		b = binary.AppendUvarint(b, uint64(h.Segment))
	}
	if version >= 4 {
		b = binary.AppendUvarint(b, h.First)
		b = binary.AppendUvarint(b, uint64(h.Lead))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeHeader decodes a header payload whose checksum has been verified.
func decodeHeader(p []byte, version uint32) (Header, string) {
	d := decoder{b: p}
	h := Header{Version: version}
	h.PID = int(d.varint("pid"))
	h.Host = d.str("host")
	h.Rank = int(d.varint("rank"))
	h.StartUnix = d.varint("start time")
	// Each argument takes at least one byte.
	n := d.uvarint(math.MaxInt32, "argument count")
	if n > uint64(len(p)-d.i) {
		d.fail(fmt.Sprintf("argument count %d does not fit in the header", n))
	}
	if n > 0 && d.err == "" {
		h.Argv = make([]string, 0, n)
		for range n {
			h.Argv = append(h.Argv, d.str("argument"))
		}
	}
	if version >= 2 && d.err == "" {
		h.Segment = int(d.uvarint(math.MaxInt32, "segment"))
	}
	if version >= 4 && d.err == "" {
		h.First = d.raw("first event")
		h.Lead = int(d.uvarint(math.MaxInt32, "snapshot events"))
	}
	if d.err == "" && d.i != len(p) {
		d.fail(fmt.Sprintf("%d unexpected bytes after the header fields", len(p)-d.i))
	}
	return h, d.err
}

func (d *decoder) str(what string) string {
	n := d.uvarint(math.MaxInt32, what+" length")
	if d.err != "" {
		return ""
	}
	if n > uint64(len(d.b)-d.i) {
		d.fail(fmt.Sprintf("%s length %d does not fit in the header", what, n))
		return ""
	}
	s := string(d.b[d.i : d.i+int(n)])
	d.i += int(n)
	return s
}
