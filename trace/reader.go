// reader.go owns reading traces: the one Reader every command uses, ReadFile for a whole file,
// and FindTraces to list the trace files of a directory.
package trace

import (
	"bufio"
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
}

// NewReader reads and checks the header. A file that is not a trace, a bad header or a version
// other than Version gives an error that matches ErrFormat.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 16<<10)
	var fixed [headerSize]byte
	n, err := io.ReadFull(br, fixed[:])
	switch {
	case n == 0 && err == io.EOF:
		return nil, errorf(ErrFormat, "empty file")
	case err == io.ErrUnexpectedEOF && string(fixed[:n]) != string(fileMagic[:min(n, 8)]):
		return nil, errorf(ErrFormat, "not a swapagent trace (bad magic)")
	case err == io.ErrUnexpectedEOF:
		return nil, errorf(ErrFormat, "file ends inside the header (%d of %d bytes)", n, headerSize)
	case err != nil:
		return nil, fmt.Errorf("trace: read header: %w", err)
	case [8]byte(fixed[:8]) != fileMagic:
		return nil, errorf(ErrFormat, "not a swapagent trace (bad magic)")
	}
	version := binary.LittleEndian.Uint32(fixed[8:])
	if version < MinVersion || version > Version {
		return nil, errorf(ErrFormat, "unsupported trace version %d (this build reads versions %d to %d)",
			version, MinVersion, Version)
	}
	size := binary.LittleEndian.Uint32(fixed[12:])
	if size > maxHeader {
		return nil, errorf(ErrFormat, "header length %d exceeds the %d-byte limit", size, maxHeader)
	}
	payload := make([]byte, size)
	if _, err := io.ReadFull(br, payload); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, errorf(ErrFormat, "file ends inside the header")
		}
		return nil, fmt.Errorf("trace: read header: %w", err)
	}
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(fixed[16:]) {
		return nil, errorf(ErrFormat, "header checksum mismatch")
	}
	h, bad := decodeHeader(payload, version)
	if bad != "" {
		return nil, errorf(ErrFormat, "bad header: %s", bad)
	}
	if version == 1 {
		return &Reader{r: br, h: h, off: headerSize + int64(size)}, nil
	}
	// Versions 2 and 3: offsets from here on count the decompressed stream of batches.
	bs, err := newBlockStream(br, headerSize+int64(size), version)
	if err != nil {
		return nil, fmt.Errorf("trace: decompressor: %w", err)
	}
	return &Reader{r: bufio.NewReaderSize(bs, 4<<10), h: h, stream: bs}, nil
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
	r.lastTS = ev.TS
	return nil
}

func (r *Reader) corrupt(why string) error {
	return errorf(ErrCorrupt, "batch %d at offset %d: %s", r.batch-1, r.start, why)
}

// readBatch reads and verifies the next frame and its payload, and resets the delta state.
func (r *Reader) readBatch() error {
	err := r.readFrame()
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
