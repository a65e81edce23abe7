// reader.go owns reading traces: the one Reader every command uses, ReadFile for a whole file,
// and FindTraces to list the trace files of a directory.
package trace

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Reader decodes a trace batch by batch. It never panics on bad input, and it never allocates
// more than the limits allow (a batch payload of 16 MiB, MaxPtrs, MaxText) whatever the file claims.
type Reader struct {
	r      *bufio.Reader
	h      Header
	off    int64 // file offset of the next unread byte
	batch  int   // index of the next batch to read
	start  int64 // file offset of the current batch
	buf    []byte
	cols   [numCols]decoder // the current batch's payload: its columns (version 2) or the one row stream
	src    source           // where decodeEvent reads each field: into cols
	left   uint32           // events not yet decoded in the current batch
	c      codec
	err    error        // sticky
	stream *blockStream // version 2: the decompressed layer under r (nil for version 1)

	// What Resync needs to skip a damaged batch (salvage.go).
	fr        [frameSize]byte // the last frame read
	frN       int             // its bytes actually read
	bad       *damage         // the batch that failed, nil while reading is fine
	delivered int             // events returned by Next
	lastTS    int64           // TS of the last event returned

	// Version 4: cur is the index of the event Next returns next (the blocks say each batch's first); a batch
	// that starts past it leaves a gap of exactly the events between, kept in jumps until salvage takes them.
	cur   uint64
	jumps []Gap
}

// place takes the index of the batch just read from its block (version 4) and returns the events between the
// last one read and it: lost.
func (r *Reader) place() uint64 {
	if r.stream == nil || !r.stream.indexed {
		return 0
	}
	first, ok := r.stream.pop()
	if !ok || first <= r.cur {
		return 0
	}
	lost := first - r.cur
	r.cur = first
	return lost
}

// NewReader reads and checks the header. A file that is not a trace, a bad header or a version
// other than Version gives an error that matches ErrFormat. From version 4 on a copy of the header follows
// it: when the first is damaged the copy is read instead, and when it is whole the copy is skipped unread.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 16<<10)
	var seen []byte // the bytes read, for the search for the copy
	h, n, err := readHeader(br, &seen)
	if err != nil && len(seen) > 0 {
		var hc fileHeader
		var at int
		var ok bool
		if hc, at, seen, ok = findCopy(br, seen); ok {
			h, err = hc, nil
			// The stream starts after the copy: put back what was read beyond it.
			end := at + headerSize + hc.size
			if end < len(seen) {
				br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(seen[end:])), br), 16<<10)
			}
			n = int64(end)
		}
	}
	if err != nil {
		return nil, err
	}
	if h.Version >= 4 && n == headerSize+int64(h.size) {
		// The whole first header: skip its copy, whatever it holds.
		m, err := br.Discard(headerSize + h.size)
		n += int64(m)
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("trace: read header: %w", err)
		}
	}
	if h.Version == 1 {
		return &Reader{r: br, h: h.Header, off: n}, nil
	}
	// Versions 2 and up: offsets from here on count the decompressed stream of batches.
	bs, err := newBlockStream(br, n, h.Version)
	if err != nil {
		return nil, fmt.Errorf("trace: decompressor: %w", err)
	}
	return &Reader{r: bufio.NewReaderSize(bs, 4<<10), h: h.Header, stream: bs}, nil
}

// fileHeader is a header read and the length of its payload.
type fileHeader struct {
	Header
	size int
}

// readHeader reads and checks one header from br, keeping the bytes it read in *seen; n is the bytes read.
func readHeader(br *bufio.Reader, seen *[]byte) (fileHeader, int64, error) {
	var fixed [headerSize]byte
	n, err := io.ReadFull(br, fixed[:])
	*seen = append(*seen, fixed[:n]...)
	switch {
	case n == 0 && err == io.EOF:
		return fileHeader{}, 0, errorf(ErrFormat, "empty file")
	case err == io.ErrUnexpectedEOF && string(fixed[:n]) != string(fileMagic[:min(n, 8)]):
		return fileHeader{}, 0, errorf(ErrFormat, "not a swapagent trace (bad magic)")
	case err == io.ErrUnexpectedEOF:
		return fileHeader{}, 0, errorf(ErrFormat, "file ends inside the header (%d of %d bytes)", n, headerSize)
	case err != nil:
		return fileHeader{}, 0, fmt.Errorf("trace: read header: %w", err)
	}
	h, bad := parseHeader(fixed[:], func(size int) ([]byte, error) {
		payload := make([]byte, size)
		m, err := io.ReadFull(br, payload)
		*seen = append(*seen, payload[:m]...)
		return payload, err
	})
	if bad != nil {
		return fileHeader{}, 0, bad
	}
	return h, int64(headerSize + h.size), nil
}

// parseHeader checks the fixed part of a header and its payload, which payload reads.
func parseHeader(fixed []byte, payload func(int) ([]byte, error)) (fileHeader, error) {
	if [8]byte(fixed[:8]) != fileMagic {
		return fileHeader{}, errorf(ErrFormat, "not a swapagent trace (bad magic)")
	}
	version := binary.LittleEndian.Uint32(fixed[8:])
	if version < MinVersion || version > Version {
		return fileHeader{}, errorf(ErrFormat, "unsupported trace version %d (this build reads versions %d to %d)",
			version, MinVersion, Version)
	}
	size := binary.LittleEndian.Uint32(fixed[12:])
	if size > maxHeader {
		return fileHeader{}, errorf(ErrFormat, "header length %d exceeds the %d-byte limit", size, maxHeader)
	}
	p, err := payload(int(size))
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return fileHeader{}, errorf(ErrFormat, "file ends inside the header")
		}
		return fileHeader{}, fmt.Errorf("trace: read header: %w", err)
	}
	if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(fixed[16:]) {
		return fileHeader{}, errorf(ErrFormat, "header checksum mismatch")
	}
	h, bad := decodeHeader(p, version)
	if bad != "" {
		return fileHeader{}, errorf(ErrFormat, "bad header: %s", bad)
	}
	return fileHeader{h, int(size)}, nil
}

// findCopy searches the bytes after a damaged first header for its copy (version 4 on): a whole header that
// passes its checks, within the longest two headers. It reads on from br into seen as it needs; at is the
// copy's offset in seen.
func findCopy(br *bufio.Reader, seen []byte) (fileHeader, int, []byte, bool) {
	limit := 2 * (headerSize + maxHeader)
	for at := 1; at+headerSize <= limit; at++ {
		if at+headerSize > len(seen) {
			var ok bool
			if seen, ok = fill(br, seen, at+headerSize); !ok {
				return fileHeader{}, 0, seen, false
			}
		}
		if [8]byte(seen[at:at+8]) != fileMagic || binary.LittleEndian.Uint32(seen[at+8:]) < 4 {
			continue
		}
		h, err := parseHeader(seen[at:at+headerSize], func(size int) ([]byte, error) {
			var ok bool
			if seen, ok = fill(br, seen, at+headerSize+size); !ok {
				return nil, io.ErrUnexpectedEOF
			}
			return seen[at+headerSize : at+headerSize+size], nil
		})
		if err == nil {
			return h, at, seen, true
		}
	}
	return fileHeader{}, 0, seen, false
}

// Header returns the file's header.
func (r *Reader) Header() Header { return r.h }

// Next decodes the next event into ev, overwriting all of it; Ptrs and Text are freshly allocated,
// so ev may be kept. It returns io.EOF at a clean end of file, an error matching ErrTruncated when
// the file ends inside a batch, and one matching ErrCorrupt when a batch is damaged. Every event
// before the bad batch has been delivered; after an error Next keeps returning it.
func (r *Reader) Next(ev *Event) error {
	if r.err != nil {
		return r.err
	}
	for r.left == 0 {
		if err := r.readBatch(); err != nil {
			r.err = err
			return err
		}
	}
	if bad := r.c.decodeEvent(&r.src, ev); bad != "" {
		r.err = r.corrupt(bad)
		r.bad = &damage{start: r.start, batch: r.batch - 1, events: int(r.left), decoded: true}
		return r.err
	}
	r.left--
	if n := r.src.leftover(); r.left == 0 && n != 0 {
		r.err = r.corrupt(fmt.Sprintf("%d bytes after the last event", n))
		r.bad = &damage{start: r.start, batch: r.batch - 1, events: 1, decoded: true}
		return r.err
	}
	r.delivered++
	r.cur++
	r.lastTS = ev.TS
	return nil
}

func (r *Reader) corrupt(why string) error {
	return errorf(ErrCorrupt, "batch %d at offset %d: %s", r.batch-1, r.start, why)
}

// readBatch reads and verifies the next frame and its payload, and resets the delta state.
func (r *Reader) readBatch() error {
	at := r.cur
	err := r.readFrame()
	if err == nil {
		if lost := r.place(); lost > 0 {
			g := Gap{Batch: r.batch - 1, Offset: r.stream.goodEnd, Events: int(lost), First: int64(at), After: r.delivered,
				FromTS: r.lastTS, ToTS: -1, Err: errorf(ErrCorrupt, "%s", blocksMissing)}
			if sg, ok := r.stream.takeGap(); ok {
				g.Offset, g.Bytes, g.Err = sg.offset, max(sg.bytes, 1), errorf(ErrCorrupt, "%s", sg.why)
			}
			r.jumps = append(r.jumps, g)
		}
	}
	if err != nil && err != io.EOF {
		r.bad = &damage{start: r.off - int64(r.frN) - int64(len(r.buf)), batch: r.batch, events: -1}
		if r.frN == frameSize && [4]byte(r.fr[:4]) == batchMagic {
			r.bad.events = int(binary.LittleEndian.Uint32(r.fr[8:]))
			r.bad.size = binary.LittleEndian.Uint32(r.fr[4:])
			r.bad.sane = true
		}
	}
	return err
}

// readFrame reads one frame and its payload into r.fr and r.buf and checks it.
func (r *Reader) readFrame() error {
	start := r.off
	fr := &r.fr
	r.buf = r.buf[:0]
	n, err := io.ReadFull(r.r, fr[:])
	r.frN = n
	r.off += int64(n)
	switch {
	case err == io.EOF:
		return io.EOF
	case err == io.ErrUnexpectedEOF:
		return errorf(ErrTruncated, "batch %d at offset %d: file ends inside the batch frame (%d of %d bytes)",
			r.batch, start, n, frameSize)
	case err != nil:
		return fmt.Errorf("trace: batch %d at offset %d: %w", r.batch, start, err)
	case [4]byte(fr[:4]) != batchMagic:
		return errorf(ErrCorrupt, "batch %d at offset %d: bad batch magic %q", r.batch, start, fr[:4])
	}
	size := binary.LittleEndian.Uint32(fr[4:])
	count := binary.LittleEndian.Uint32(fr[8:])
	if size > maxBatch {
		return errorf(ErrCorrupt, "batch %d at offset %d: length %d exceeds the %d-byte limit", r.batch, start, size, maxBatch)
	}
	// The smallest event is two bytes (kind and presence bitmap).
	if count == 0 || uint64(count)*2 > uint64(size) {
		return errorf(ErrCorrupt, "batch %d at offset %d: %d events cannot fill %d bytes", r.batch, start, count, size)
	}
	// Grow the buffer as bytes arrive, so a damaged length at the end of a short file costs little.
	for len(r.buf) < int(size) {
		chunk := min(int(size)-len(r.buf), 1<<20)
		if cap(r.buf)-len(r.buf) < chunk {
			r.buf = append(r.buf[:cap(r.buf)], make([]byte, chunk)...)[:len(r.buf)]
		}
		m, err := io.ReadFull(r.r, r.buf[len(r.buf):len(r.buf)+chunk])
		r.buf = r.buf[:len(r.buf)+m]
		r.off += int64(m)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return errorf(ErrTruncated, "batch %d at offset %d: file ends inside the batch (%d of %d bytes)",
				r.batch, start, len(r.buf), size)
		}
		if err != nil {
			return fmt.Errorf("trace: batch %d at offset %d: %w", r.batch, start, err)
		}
	}
	crc := crc32.Update(0, castagnoli, fr[4:12])
	if crc32.Update(crc, castagnoli, r.buf) != binary.LittleEndian.Uint32(fr[12:]) {
		return errorf(ErrCorrupt, "batch %d at offset %d: checksum mismatch", r.batch, start)
	}
	r.batch++
	r.start = start
	if bad := r.load(count); bad != "" {
		return errorf(ErrCorrupt, "batch %d at offset %d: %s", r.batch-1, start, bad)
	}
	return nil
}

// load makes r.buf, a verified payload of count events, the current batch and resets the delta state.
func (r *Reader) load(count uint32) string {
	r.left = count
	r.c = codec{ctxHandle: r.h.Version >= 2}
	if r.h.Version == 1 {
		r.cols[0] = decoder{b: r.buf}
		for i := range r.src {
			r.src[i] = &r.cols[0]
		}
		return ""
	}
	return splitColumns(r.buf, &r.cols, &r.src)
}

// ReadFile reads a whole trace file. It returns every event up to the last good batch and the
// error that stopped it: nil at a clean end, or one matching ErrTruncated or ErrCorrupt (a
// process killed while writing leaves ErrTruncated at worst). A bad header gives ErrFormat.
func ReadFile(path string) (Header, []Event, error) {
	f, err := Open(path)
	if err != nil {
		return Header{}, nil, err
	}
	defer f.Close()
	r, err := NewReader(f)
	if err != nil {
		return Header{}, nil, fmt.Errorf("%s: %w", path, err)
	}
	var events []Event
	for {
		var ev Event
		err := r.Next(&ev)
		if err == io.EOF {
			return r.h, events, nil
		}
		if err != nil {
			return r.h, events, fmt.Errorf("%s: %w", path, err)
		}
		events = append(events, ev)
	}
}

// FindTraces lists trace files. A path naming a file gives that file whatever its name; a directory
// gives its *.swtrace files (not recursing), sorted, possibly none, with one name for each segmented
// trace: its oldest segment still there (Load reads the rest beside it).
func FindTraces(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	oldest := map[string]int{} // first segment's path -> lowest index present
	name := map[string]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), FileSuffix) {
			continue
		}
		p := filepath.Join(path, e.Name())
		first, k := splitSegment(p)
		if have, ok := oldest[first]; !ok || k < have {
			oldest[first], name[first] = k, p
		}
	}
	files := []string{}
	for _, p := range name {
		files = append(files, p)
	}
	sort.Strings(files)
	return files, nil
}
