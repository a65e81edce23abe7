// writer.go owns writing a trace: the header at once, then events collected into batches, each
// batch framed, checksummed and handed to the underlying writer in one Write call.
package trace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Writer encodes events into a trace. Everything up to the last Flush survives a crash of the
// process (SIGKILL, a fatal signal): a reader stops cleanly before a batch that was cut short.
// A Writer is not safe for concurrent use; the agent writes from one goroutine.
type Writer struct {
	w      io.Writer
	buf    []byte // frame header space followed by the payload of the current batch
	n      uint32 // events in the current batch
	c      codec
	events uint64
	bytes  uint64
	err    error // sticky: after a failed write the file may end in a partial batch
}

// NewWriter writes the header to w at once and returns a Writer for the events. The header is
// written as Version whatever h.Version says.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	b := make([]byte, headerSize, 256)
	b = appendHeader(b, &h)
	payload := b[headerSize:]
	if len(payload) > maxHeader {
		return nil, fmt.Errorf("trace: header is %d bytes, limit %d", len(payload), maxHeader)
	}
	copy(b, fileMagic[:])
	binary.LittleEndian.PutUint32(b[8:], Version)
	binary.LittleEndian.PutUint32(b[12:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(payload, castagnoli))
	n, err := w.Write(b)
	if err != nil {
		return nil, fmt.Errorf("trace: write header: %w", err)
	}
	tw := &Writer{w: w, buf: make([]byte, frameSize, flushBytes+1024), bytes: uint64(n)}
	return tw, nil
}

// Add appends ev to the current batch and writes the batch once it is full. It does not keep ev.
// An event over the limits (MaxText, MaxPtrs) or of Kind 0 is refused and nothing is written.
func (w *Writer) Add(ev *Event) error {
	if w.err != nil {
		return w.err
	}
	if err := checkEvent(ev); err != nil {
		return err
	}
	w.buf = w.c.appendEvent(w.buf, ev)
	w.n++
	w.events++
	if len(w.buf)-frameSize >= flushBytes {
		return w.Flush()
	}
	return nil
}

// Flush writes the current batch, if it holds any event, as one Write of its frame and payload.
// Once it returns nil the batch is in the file; the next batch starts a fresh delta state.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if w.n == 0 {
		return nil
	}
	b := w.buf
	copy(b, batchMagic[:])
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-frameSize))
	binary.LittleEndian.PutUint32(b[8:], w.n)
	crc := crc32.Update(0, castagnoli, b[4:12])
	binary.LittleEndian.PutUint32(b[12:], crc32.Update(crc, castagnoli, b[frameSize:]))
	n, err := w.w.Write(b)
	w.bytes += uint64(n)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = fmt.Errorf("trace: write batch: %w", err)
		return w.err
	}
	w.buf = b[:frameSize]
	w.n = 0
	w.c = codec{}
	return nil
}

var errClosed = errors.New("trace: writer is closed")

// Close flushes the last batch. It does not close the underlying writer; later calls to Add or
// Flush fail, and a second Close does nothing.
func (w *Writer) Close() error {
	if w.err == errClosed {
		return nil
	}
	err := w.Flush()
	if w.err == nil {
		w.err = errClosed
	}
	return err
}

// Events returns the number of events added so far, written or still in the current batch.
func (w *Writer) Events() uint64 { return w.events }

// Bytes returns the number of bytes written to the underlying writer, header included.
func (w *Writer) Bytes() uint64 { return w.bytes }
