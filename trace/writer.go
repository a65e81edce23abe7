// writer.go owns writing a trace: the header at once, then events collected into batches, each batch
// laid out in columns, framed, checksummed and written through the file's zstd stream, which is flushed
// at the end of every batch so the file holds every whole batch.
package trace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/klauspost/compress/zstd"
)

// Writer encodes events into a trace. Everything up to the last Flush survives a crash of the
// process (SIGKILL, a fatal signal): a reader stops cleanly before a batch that was cut short.
// A Writer is not safe for concurrent use; the agent writes from one goroutine.
type Writer struct {
	out      *countWriter  // the file, counting what reaches it
	z        *zstd.Encoder // the compressor, writing into zbuf
	zbuf     bytes.Buffer  // compressed bytes of the batch being written
	block    []byte        // its block
	chunk    int           // batch bytes in the current zstd frame
	chunkMax int           // Options.ChunkBytes
	fresh    bool          // the next block starts a zstd frame
	seq      uint32        // the next block's number
	par      parity        // the open parity group
	cols     columns       // the current batch, one stream per column
	buf      []byte        // frame and payload of the batch being written
	n        uint32        // events in the current batch
	c        codec
	events   uint64
	err      error // sticky: after a failed write the file may end in a partial batch
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n uint64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	return n, err
}

// newEncoder is the compressor of a trace: goroutine-free, with a window large enough to see a training
// step's repeats. The blocks' and batches' own checksums cover the data, so zstd's is off.
func newEncoder(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithWindowSize(frameWindow), zstd.WithEncoderCRC(false), zstd.WithLowerEncoderMem(true))
}

// Options tune a Writer; the zero value gives the defaults.
type Options struct {
	// ChunkBytes is the batch bytes one zstd frame holds (DefaultChunkBytes when 0). A damaged block costs
	// the rest of its frame; a smaller chunk costs less and compresses worse. 1 makes every batch its own.
	ChunkBytes int
}

// NewWriter writes the header to w at once and returns a Writer for the events. The header is
// written as Version whatever h.Version says.
func NewWriter(w io.Writer, h Header) (*Writer, error) { return NewWriterOptions(w, h, Options{}) }

// NewWriterOptions is NewWriter with options.
func NewWriterOptions(w io.Writer, h Header, o Options) (*Writer, error) {
	b := make([]byte, headerSize, 256)
	b = appendHeader(b, &h, Version)
	payload := b[headerSize:]
	if len(payload) > maxHeader {
		return nil, fmt.Errorf("trace: header is %d bytes, limit %d", len(payload), maxHeader)
	}
	copy(b, fileMagic[:])
	binary.LittleEndian.PutUint32(b[8:], Version)
	binary.LittleEndian.PutUint32(b[12:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(payload, castagnoli))
	// The header's copy follows it, so damage to one of them costs nothing (NewReader).
	b = append(b, b...)
	out := &countWriter{w: w}
	if _, err := out.Write(b); err != nil {
		return nil, fmt.Errorf("trace: write header: %w", err)
	}
	tw := &Writer{out: out, buf: make([]byte, 0, flushBytes+1024), fresh: true, chunkMax: o.ChunkBytes,
		c: codec{ctxHandle: true}}
	if tw.chunkMax <= 0 {
		tw.chunkMax = DefaultChunkBytes
	}
	z, err := newEncoder(&tw.zbuf)
	if err != nil {
		return nil, fmt.Errorf("trace: compressor: %w", err)
	}
	tw.z = z
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
	w.c.appendEvent(&w.cols, ev)
	w.n++
	w.events++
	if w.n%32 == 0 && w.cols.size() >= flushBytes || len(ev.Text)+8*len(ev.Ptrs) >= flushBytes {
		// (An event that large ends its batch at once: a batch, and so a block, stays within maxBlockV4.)
		return w.Flush()
	}
	return nil
}

// Flush writes the current batch, if it holds any event, through the compressor and flushes it, so the
// file holds it whole. Once it returns nil the batch is in the file; the next batch starts a fresh delta
// state (the compressor's history goes on).
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if w.n == 0 {
		return nil
	}
	b := append(w.buf[:0], batchMagic[:]...)
	b = append(b, make([]byte, frameSize-len(batchMagic))...)
	b = w.cols.appendPayload(b)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-frameSize))
	binary.LittleEndian.PutUint32(b[8:], w.n)
	crc := crc32.Update(0, castagnoli, b[4:12])
	binary.LittleEndian.PutUint32(b[12:], crc32.Update(crc, castagnoli, b[frameSize:]))
	w.buf = b
	flags := uint32(0)
	if w.fresh {
		flags = flagNewStream
		w.fresh = false
	}
	w.chunk += len(b)
	_, err := w.z.Write(b)
	if err == nil {
		err = w.z.Flush()
	}
	if err == nil && w.chunk >= w.chunkMax {
		// End the zstd frame with this batch: damage from here on costs only the next chunk.
		err = w.z.Close()
		w.z.Reset(&w.zbuf)
		w.chunk, w.fresh = 0, true
	}
	if err == nil {
		if w.fresh {
			flags |= flagEndFrame
		}
		err = w.writeBlock(w.events-uint64(w.n), w.n, flags, w.fresh)
	}
	if err != nil {
		w.err = fmt.Errorf("trace: write batch: %w", err)
		return w.err
	}
	w.cols.reset()
	w.n = 0
	w.c = codec{ctxHandle: true}
	return nil
}

// writeBlock writes the compressed bytes waiting in zbuf (a batch of that many events, the first of them the
// segment's event number first) as one block, in one Write, followed in the same Write by its group's parity
// block, twice, when the block ends the group: when the group is full or the block ends a zstd frame
// (lastOfFrame), so no group spans two frames.
func (w *Writer) writeBlock(first uint64, events, flags uint32, lastOfFrame bool) error {
	var index [8]byte
	binary.LittleEndian.PutUint64(index[:], first)
	w.block = appendBlock(w.block[:0], index[:], w.zbuf.Bytes(), events, flags|w.seq<<seqShift)
	w.zbuf.Reset()
	w.par.add(w.seq, w.block)
	w.seq = (w.seq + 1) & seqMask
	if lastOfFrame || w.par.bytes >= parityGroup {
		at := len(w.block)
		w.block = w.par.appendBlock(w.block)
		w.block = append(w.block, w.block[at:]...)
	}
	n, err := w.out.Write(w.block)
	if err == nil && n != len(w.block) {
		err = io.ErrShortWrite
	}
	return err
}

var errClosed = errors.New("trace: writer is closed")

// Close flushes the last batch. It does not close the underlying writer; later calls to Add or
// Flush fail, and a second Close does nothing.
func (w *Writer) Close() error { return w.close(flagClosed) }

// closeGoingOn closes a segment the trace goes on from: its mark says a next segment follows, so a reader
// that finds none knows the process never closed the trace.
func (w *Writer) closeGoingOn() error { return w.close(flagClosed | flagGoesOn) }

func (w *Writer) close(flags uint32) error {
	if w.err == errClosed {
		return nil
	}
	err := w.Flush()
	if err == nil {
		// The close mark: a block of no event that ends the open zstd frame, if any, and says how many events
		// the file holds. A killed process never writes it; a reader says so.
		if !w.fresh {
			flags |= flagEndFrame
			err = w.z.Close()
		}
		if err == nil {
			err = w.writeBlock(w.events, 0, flags, true)
		}
		w.fresh = true
	}
	if w.err == nil {
		w.err = errClosed
	}
	return err
}

// Events returns the number of events added so far, written or still in the current batch.
func (w *Writer) Events() uint64 { return w.events }

// Bytes returns the number of bytes written to the underlying writer, header included.
func (w *Writer) Bytes() uint64 { return w.out.n }
