// salvage.go owns reading past damage: Reader.Resync skips a damaged batch and finds the next good one,
// Salvage reads a whole trace that way, saying what was lost and where, and Read and Load apply the one
// rule every command follows on a damaged trace, with the same warnings everywhere. Reader.Next and
// ReadFile still stop at the first damaged batch; only callers that ask for salvage get the events after it.
package trace

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sort"
	"strings"
)

// Damaged reports whether reading f met damage, lost (Gaps) or repaired (Repairs), a cut end, pieces refused,
// another trace joined to it, or (version 4) no close mark: whether anything may be missing, what the commands' exit code 3 says.
func (f *File) Damaged() bool {
	return len(f.Gaps) > 0 || len(f.Repairs) > 0 || f.Truncated || f.Indexed && !f.Finished() || f.Refused > 0 ||
		len(f.Joined) > 0
}

// Finished says whether the writer closed the trace (version 4): its last segment ends with the close mark,
// not with the mark of a segment the trace goes on from (a process killed as it opened the next segment).
func (f *File) Finished() bool {
	return f.Closed && !f.GoesOn
}

// damage describes the batch that made Next fail, for Resync.
type damage struct {
	start   int64  // file offset of its frame
	batch   int    // its index
	events  int    // events it held that were not delivered; -1 when its frame is unreadable
	size    uint32 // its frame's payload length (when sane)
	sane    bool   // its frame had the batch magic (so events and size are what the writer wrote, unless damaged too)
	decoded bool   // its checksum was good and a record did not decode: the stream is already past it
}

// Gap is a damaged stretch of a trace that Resync skipped.
type Gap struct {
	Batch  int   // index of the first damaged batch
	Offset int64 // file offset where the damage starts
	Bytes  int64 // bytes skipped
	// Events lost. Version 4: exactly, from the blocks' event indexes (-1 only for an unread tail, which the
	// next segment's header, if any, counts). Before: the damaged batch's own count from its frame (which the
	// failed checksum cannot vouch for), or -1 when its frame is unreadable or the skipped bytes are not
	// exactly that batch.
	Events int
	// First is the index of the first event lost (version 4: among the file's events, or the process's once
	// Scan has placed it); -1 where the file does not say.
	First  int64
	After  int   // events delivered before the gap: the index of the first event after it
	FromTS int64 // TS of the last event before the gap (0 when none)
	ToTS   int64 // TS of the first event after it, -1 when none followed (Salvage fills it)
	Err    error // why the batch was bad (matches ErrCorrupt, or ErrTruncated for a damaged length)
	// Decompressed: Offset and Bytes count the decompressed batches of a version-2 file, not the file (a
	// bad batch inside good compressed blocks). A damaged compressed block gives file offsets.
	Decompressed bool
}

// String says what was lost and where, in one line.
func (g Gap) String() string {
	lost := "an unknown number of events"
	switch {
	case g.Events > 0 && g.First >= 0:
		lost = fmt.Sprintf("%d events (#%d to #%d)", g.Events, g.First+1, g.First+int64(g.Events))
	case g.Events >= 0:
		lost = fmt.Sprintf("%d events", g.Events)
	case g.First >= 0:
		lost = fmt.Sprintf("the events after #%d", g.First)
	}
	var when string
	switch {
	case g.After == 0 && g.ToTS >= 0:
		when = fmt.Sprintf("at the start, before +%s", tsString(g.ToTS))
	case g.After == 0:
		when = "with every event of the trace"
	case g.ToTS < 0:
		when = fmt.Sprintf("at the end, after event %d (+%s)", g.After, tsString(g.FromTS))
	default:
		when = fmt.Sprintf("between +%s and +%s (after event %d)", tsString(g.FromTS), tsString(g.ToTS), g.After)
	}
	where := ""
	if g.Decompressed {
		where = " of the decompressed stream"
	}
	if g.Events < 0 && g.ToTS < 0 && !g.Decompressed {
		return fmt.Sprintf("batch %d at offset %d: the rest of the file, %d bytes, could not be read (%s lost %s); %s",
			g.Batch, g.Offset, g.Bytes, lost, when, cause(g.Err))
	}
	return fmt.Sprintf("batch %d at offset %d%s (%d bytes) skipped: %s lost %s; %s", g.Batch, g.Offset, where, g.Bytes,
		lost, when, cause(g.Err))
}

// cause is the error's text without the "trace: batch N at offset M: " prefix the gap already says.
func cause(err error) string {
	if err == nil {
		return "damaged"
	}
	s := err.Error()
	if i := bytes.LastIndex([]byte(s), []byte(": ")); i >= 0 {
		return s[i+2:]
	}
	return s
}

func tsString(ns int64) string {
	return fmt.Sprintf("%.6fs", float64(ns)/1e9)
}

// Resync skips the damaged batch that made Next fail and positions the reader at the next batch whose
// frame and checksum are good, so Next continues from there. Batches decode on their own, so nothing
// after the gap depends on what was lost, except names (KindFunc, KindGroup) written in it.
//
// It returns the gap and nil when reading can go on (with io.EOF from Next when the damage reached
// the end of the file). When the last error cannot be skipped (a clean end, a bad header, an I/O error,
// or a batch cut off by the end of the file with no good batch after it) it returns that error and the
// reader stays where it was.
func (r *Reader) Resync() (Gap, error) {
	bad := r.bad
	if r.err == nil || bad == nil || !(errors.Is(r.err, ErrCorrupt) || errors.Is(r.err, ErrTruncated)) {
		return Gap{}, r.err
	}
	g := Gap{Batch: bad.batch, Offset: bad.start, Events: -1, First: -1, After: r.delivered, FromTS: r.lastTS, ToTS: -1,
		Err: r.err}
	indexed := r.stream != nil && r.stream.indexed
	if indexed {
		// Everything the decoder gave before the damage has been read: what it was fed beyond is gone.
		r.stream.dropOld()
		g.First = int64(r.cur)
	}
	// data holds the bytes from base on that are not yet ruled out as the start of a good batch.
	var data []byte
	base, pos := r.off, 0
	if !bad.decoded {
		data = append(append(data, r.fr[:r.frN]...), r.buf...)
		base, pos = bad.start, min(1, len(data)) // not the damaged batch's own magic again
	}
	more := func(need int) (ok bool) { // read until data holds need bytes; false at the end of the input
		data, ok = fill(r.r, data, need)
		return ok
	}
	for {
		i := bytes.Index(data[pos:], batchMagic[:])
		if i < 0 {
			// Keep the last bytes: a magic may straddle the next read.
			drop := max(len(data)-len(batchMagic)+1, pos)
			data, base, pos = data[drop:], base+int64(drop), 0
			if !more(len(data) + 1) {
				break
			}
			continue
		}
		c := pos + i
		if !more(c + frameSize) {
			pos = c + 1
			continue
		}
		fr := data[c : c+frameSize]
		size, count := binary.LittleEndian.Uint32(fr[4:]), binary.LittleEndian.Uint32(fr[8:])
		if size > maxBatch || count == 0 || uint64(count)*2 > uint64(size) {
			pos = c + 1
			continue
		}
		end := c + frameSize + int(size)
		// A batch is followed by the next one's magic (or the start of it) or by the end of the file:
		// checking that first keeps random candidates inside damaged bytes from costing a checksum each.
		more(end + len(batchMagic))
		if end > len(data) || !bytes.HasPrefix(batchMagic[:], data[end:min(end+len(batchMagic), len(data))]) {
			pos = c + 1
			continue
		}
		fr = data[c : c+frameSize]
		crc := crc32.Update(0, castagnoli, fr[4:12])
		if crc32.Update(crc, castagnoli, data[c+frameSize:end]) != binary.LittleEndian.Uint32(fr[12:]) {
			pos = c + 1
			continue
		}
		// Found: skip to it and load it as the current batch.
		at := base + int64(c)
		g.Bytes = at - g.Offset
		if bad.decoded {
			g.Events = bad.events
		} else if bad.sane && at == bad.start+frameSize+int64(bad.size) {
			g.Events = bad.events
		}
		r.streamGap(&g)
		if indexed {
			g.Events = int(r.place())
		}
		r.buf = append(r.buf[:0], data[c+frameSize:end]...)
		if rest := data[end:]; len(rest) > 0 {
			r.r = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(rest)), r.r), 64<<10)
		}
		r.off = at + frameSize + int64(size)
		r.start = at
		r.batch = bad.batch + 1
		if why := r.load(count); why != "" {
			// Its checksum was good but its columns do not add up: it is as damaged as the first.
			r.err = errorf(ErrCorrupt, "batch %d at offset %d: %s", r.batch-1, at, why)
			r.bad = &damage{start: at, batch: r.batch - 1, events: int(count), decoded: true}
			return g, nil
		}
		r.err, r.bad = nil, nil
		return g, nil
	}
	// No good batch after the damage.
	if errors.Is(r.err, ErrTruncated) {
		return Gap{}, r.err // a batch cut off by the end of the file: plain truncation, nothing to skip
	}
	end := base + int64(len(data))
	g.Bytes = end - g.Offset
	if bad.decoded || (bad.sane && end == bad.start+frameSize+int64(bad.size)) {
		g.Events = bad.events
	}
	r.streamGap(&g)
	r.off = end
	r.err, r.bad = io.EOF, nil
	return g, nil
}

// fill reads from r onto data until it holds need bytes, 64 KiB at least at a time, and reports whether it
// does (false at the end of the input, with what was there).
func fill(r io.Reader, data []byte, need int) ([]byte, bool) {
	for len(data) < need {
		old := len(data)
		data = append(data, make([]byte, max(need-old, 64<<10))...)
		n, err := io.ReadFull(r, data[old:])
		data = data[:old+n]
		if err != nil {
			return data, len(data) >= need
		}
	}
	return data, true
}

// streamGap restates g for a version-2 file: where its compressed layer skipped damaged blocks, the gap is
// those blocks in the file, with an unknown number of events; else it counts the decompressed stream.
func (r *Reader) streamGap(g *Gap) {
	if r.stream == nil {
		return
	}
	sg, ok := r.stream.takeGap()
	if !ok {
		g.Decompressed = true
		return
	}
	for more, ok := r.stream.takeGap(); ok; more, ok = r.stream.takeGap() {
		sg.bytes = more.offset + more.bytes - sg.offset
		if sg.events >= 0 {
			sg.events = max(more.events+sg.events, -1)
		}
		if more.events < 0 {
			sg.events = -1
		}
	}
	g.Offset, g.Bytes, g.Events = sg.offset, max(sg.bytes, 1), sg.events
	g.Err = errorf(ErrCorrupt, "%s", sg.why)
}

// cutAt is the file offset of the incomplete batch (or, in version 2, block) that ends a truncated file.
func (r *Reader) cutAt() int64 {
	if r.stream != nil {
		return r.stream.goodEnd
	}
	if r.bad != nil {
		return r.bad.start
	}
	return -1
}

// Salvage reads a whole trace from rd, skipping damaged batches (Resync). It returns every event it
// could decode, the gaps it skipped (in file order, each with the TS of the first event after it), and
// the error that ended reading: nil at the end of the input, one matching ErrTruncated when the input
// ends inside its last batch (a killed process), ErrFormat for a bad header, or a read error.
func Salvage(rd io.Reader) (Header, []Event, []Gap, error) {
	var events []Event
	s := salvage(rd, true, func(ev *Event, _ uint64) { events = append(events, *ev) })
	return s.h, events, s.gaps, s.err
}

// salvaged is what salvage read.
type salvaged struct {
	h       Header
	events  int   // events given to emit
	lastTS  int64 // the last one's TS
	gaps    []Gap
	repairs []Repair
	cutAt   int64 // file offset of the batch the end of the input cut (ErrTruncated), else -1
	err     error
	// Version 4: the file says what it holds.
	indexed bool
	closed  bool   // its close mark was read
	goesOn  bool   // the mark closed a segment the trace goes on from
	end     uint64 // the index after the last event read or counted lost (the close mark's count when closed)
	refused int    // good blocks refused (read already, or out of order)
	// Version 2 on: another trace after this one's end (files joined) starts at joinedAt (-1: none seen);
	// drained says the input was read to its end, so its bytes are known.
	joinedAt int64
	drained  bool
}

// salvage reads a whole trace from rd as Salvage does, giving each event to emit as it is decoded. emit may
// keep the event's Ptrs and Text (each event's are its own), not the event itself.
func salvage(rd io.Reader, drain bool, emit func(*Event, uint64)) (s salvaged) {
	s.cutAt, s.joinedAt = -1, -1
	r, err := NewReader(rd)
	if err != nil {
		s.err = err
		return s
	}
	s.h = r.h
	defer func() {
		if r.stream != nil {
			s.repairs = r.stream.repairs
		}
		if r.stream != nil && r.stream.indexed {
			s.count(r)
		}
		if r.stream != nil {
			s.joined(r.stream, drain)
		}
	}()
	var ev Event
	for {
		err := r.Next(&ev)
		if err == nil {
			for _, g := range r.jumps {
				g.ToTS = ev.TS
				s.gaps = append(s.gaps, g)
			}
			r.jumps = r.jumps[:0]
			if n := len(s.gaps); n > 0 && s.gaps[n-1].ToTS < 0 && s.gaps[n-1].After == s.events {
				s.gaps[n-1].ToTS = ev.TS
			}
			emit(&ev, r.cur-1)
			s.events++
			s.lastTS = ev.TS
			continue
		}
		if err == io.EOF {
			return s
		}
		g, rerr := r.Resync()
		if rerr != nil {
			if errors.Is(rerr, ErrTruncated) {
				s.cutAt = r.cutAt()
			}
			s.err = rerr
			return s
		}
		s.gaps = append(s.gaps, g)
	}
}

// joined looks for another trace after this one's end: where the blocks met another trace's header, or after
// the close mark and its parity. With drain the rest of the input is read to its end, so the bytes of what
// follows are known; without (a pipe, which its writer may hold open), only the bytes already buffered are
// looked at after a close mark.
func (s *salvaged) joined(st *blockStream, drain bool) {
	at := st.joinedAt
	if st.closed {
		end := st.afterClose(drain)
		rest := io.Reader(st.raw)
		if !drain {
			rest = io.LimitReader(st.raw, int64(st.raw.Buffered()))
		}
		if i := findTrace(rest); i >= 0 {
			at = end + i
		}
	}
	if at < 0 {
		return
	}
	s.joinedAt = at
	if drain {
		_, err := io.Copy(io.Discard, st.raw)
		s.drained = err == nil
	}
}

// count settles what a version-4 file lost once reading ended: with its close mark, the events after the last
// one read are a gap of exactly their number; without it, the events after it were never written (or are in
// a tail that cannot be read), which Warnings says. A gap of no event held none: it is a repair.
func (s *salvaged) count(r *Reader) {
	st := r.stream
	s.indexed, s.closed, s.goesOn, s.end, s.refused = true, st.closed, st.goesOn, r.cur, st.refused
	n := len(s.gaps)
	atEnd := n > 0 && s.gaps[n-1].ToTS < 0 && s.gaps[n-1].After == s.events
	switch {
	case st.closed && st.total > r.cur && atEnd:
		s.gaps[n-1].Events, s.gaps[n-1].First = int(st.total-r.cur), int64(r.cur)
	case st.closed && st.total > r.cur:
		s.gaps = append(s.gaps, Gap{Batch: r.batch, Offset: st.goodEnd, Bytes: 1, Events: int(st.total - r.cur),
			First: int64(r.cur), After: s.events, FromTS: s.lastTS, ToTS: -1,
			Err: errorf(ErrCorrupt, "blocks missing before the close mark")})
	case atEnd && !st.closed:
		s.gaps[n-1].Events, s.gaps[n-1].First = -1, int64(r.cur) // the unread tail: counted from the next segment, if any
	case atEnd:
		s.gaps[n-1].Events, s.gaps[n-1].First = 0, int64(r.cur)
	}
	if st.closed {
		s.end = max(st.total, r.cur)
	}
	kept := s.gaps[:0]
	for _, g := range s.gaps {
		if g.Events == 0 {
			s.repairs = append(s.repairs, Repair{Offset: g.Offset, Bytes: g.Bytes})
			continue
		}
		kept = append(kept, g)
	}
	s.gaps = kept
}

// File is a whole trace as the read rule leaves it (Read, Load, Scan).
type File struct {
	Name   string // what errors and warnings call it: the path, or "standard input"
	Header Header
	Events []Event // every event read (Read, Load; Scan gives them to its caller instead)
	Count  int     // how many were read
	Gaps   []Gap   // damaged stretches skipped, in file order
	// Repairs are damaged stretches that cost nothing (version 3: a block rebuilt from its parity).
	Repairs   []Repair
	Truncated bool  // the input ends inside a batch (a killed process); every event before it was read
	Cut       int64 // bytes of that last, incomplete batch: dropped
	// Segments are the segment files read, in order (segment.go); one for a trace that was never split.
	Segments []string
	// Bytes is the size of the files read.
	Bytes int64
	// From is the TS of the first event after the snapshot when the oldest segments were dropped
	// (Header.Segment > 0): what the trace covers starts there. 0 when nothing was dropped.
	From int64
	// Version 4: the trace says what it holds. Indexed is set for such a trace; Closed when its last segment's
	// close mark was read, GoesOn when that mark says the trace goes on in a next segment (Finished); End is the index, among every event the process wrote, of
	// the first event not read and not counted in a gap: where the written events end when Closed, else where
	// what could be read ends (a killed process: the events after it were never written). Refused counts
	// the pieces (blocks, segments) refused because they repeat what was read or come out of order.
	Indexed bool
	Closed  bool
	GoesOn  bool
	End     uint64
	Refused int
	// Joined are other traces found after a file's own (files joined with cat): not read, said by Warnings,
	// and Damaged (an input left out).
	Joined []Joined
	notes  []string // what reading the segments found (a missing or foreign one), for Warnings
	lastTS int64    // TS of the last event read
}

// Joined is another trace after a file's own trace: at file offset At, Bytes long to the file's end (-1 when
// the input, a pipe, was not read to its end).
type Joined struct {
	Name      string // the file it is in (Warnings)
	At, Bytes int64
}

// Lost is the events counted in gaps (exact in version 4; a gap of unknown size counts nothing).
func (f *File) Lost() int {
	n := 0
	for _, g := range f.Gaps {
		n += max(g.Events, 0)
	}
	return n
}

// Read reads a whole trace by the one rule every command that reads traces follows (report, run's summary,
// replay, doctor; docs/trace-format.md, "Damaged traces"): every batch that passes its checksum is read, a
// damaged one is skipped and kept as a Gap, and an input that ends inside a batch, as a killed process
// leaves it, keeps every event before that batch (Truncated). It fails with one line naming the input on
// an empty input, a bad header, a read error, or when no event could be read at all (the error matches
// ErrFormat, ErrCorrupt or ErrTruncated where it is one of those). Warnings says what was lost.
func Read(name string, rd io.Reader) (*File, error) {
	var events []Event
	f, err := read(name, rd, func(ev *Event, _ uint64) { events = append(events, *ev) })
	if f != nil {
		f.Events = events
	}
	return f, err
}

// read is Read giving each event, and its index among the file's events, to emit instead of keeping it.
func read(name string, rd io.Reader, emit func(*Event, uint64)) (f *File, err error) {
	// The reader is fuzzed and should never panic; if it does, a command still owes one line.
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("%s: trace reader failed: %v", name, p)
		}
	}()
	// A pipe is not read past what the trace needs: its writer may hold it open after the trace.
	drain := true
	if fd, ok := rd.(*os.File); ok {
		fi, err := fd.Stat()
		drain = err == nil && fi.Mode().IsRegular()
	}
	cr := &countReader{r: rd}
	sv := salvage(cr, drain, emit)
	why := ""
	if sv.err != nil {
		why = strings.TrimPrefix(sv.err.Error(), "trace: ")
	}
	switch err := sv.err; {
	case errors.Is(err, ErrFormat) && cr.n == 0:
		return nil, &traceError{kind: ErrFormat, msg: name + ": empty, not a trace"}
	case errors.Is(err, ErrFormat):
		return nil, &traceError{kind: ErrFormat, msg: fmt.Sprintf("%s: not a readable trace (%s)", name, why)}
	case err != nil && !errors.Is(err, ErrTruncated):
		return nil, fmt.Errorf("%s: %s", name, why)
	case sv.events == 0 && len(sv.gaps) > 0:
		return nil, &traceError{kind: ErrCorrupt, msg: fmt.Sprintf("%s: corrupt trace, no event could be read (%s)",
			name, sv.gaps[0])}
	case err != nil && sv.events == 0:
		return nil, &traceError{kind: ErrTruncated,
			msg: fmt.Sprintf("%s: trace ends inside its first batch, no events to report (%s)", name, why)}
	}
	f = &File{Name: name, Header: sv.h, Count: sv.events, Gaps: sv.gaps, Repairs: sv.repairs, Truncated: sv.err != nil,
		lastTS: sv.lastTS, Indexed: sv.indexed, Closed: sv.closed, GoesOn: sv.goesOn, End: sv.end, Refused: sv.refused}
	if f.Truncated && sv.cutAt >= 0 {
		f.Cut = cr.n - sv.cutAt
	}
	if sv.joinedAt >= 0 {
		j := Joined{Name: name, At: sv.joinedAt, Bytes: -1}
		if sv.drained {
			j.Bytes = cr.n - sv.joinedAt
		}
		f.Joined = append(f.Joined, j)
	}
	return f, nil
}

// findTrace reads r until a trace's file magic and returns its offset in what r gave, -1 when r ends without
// one.
func findTrace(r io.Reader) int64 {
	buf := make([]byte, 64<<10)
	var base int64 // offset in r of buf[0]
	kept := 0
	for {
		n, err := r.Read(buf[kept:])
		if i := bytes.Index(buf[:kept+n], fileMagic[:]); i >= 0 {
			return base + int64(i)
		}
		keep := min(kept+n, len(fileMagic)-1) // a magic across two reads
		base += int64(kept + n - keep)
		kept = copy(buf, buf[kept+n-keep:kept+n])
		if err != nil {
			return -1
		}
	}
}

// ScanReader is Read giving each event to emit as it is read, as Scan does.
func ScanReader(name string, rd io.Reader, emit func(*Event)) (*File, error) {
	return read(name, rd, func(ev *Event, _ uint64) { emit(ev) })
}

// Load is Read on the file at path (a regular file or a pipe); a directory or an empty file is an error.
// When path is one segment of a segmented trace (segment.go), Load reads every segment beside it, in
// order, as one trace: the first segment's snapshot stands for what the dropped ones held, the snapshots
// of the others are skipped.
func Load(path string) (*File, error) {
	var events []Event
	f, err := Scan(path, func(ev *Event) { events = append(events, *ev) })
	if f != nil {
		f.Events = events
	}
	return f, err
}

// Scan is Load giving each event to emit as it is read, in order, instead of keeping them: a reader that
// folds the events needs memory for what it folds, not for the trace. emit may keep the event's Ptrs and
// Text, not the event itself. On an error emit may have been given some events already.
func Scan(path string, emit func(*Event)) (*File, error) {
	segs := []string{path}
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		segs = segmentsOf(path)
	}
	var notes []string
	copies := 0
	if len(segs) > 1 {
		segs, notes, copies = orderSegments(segs)
	}
	// The first segment: when the oldest were dropped, what the trace covers starts after its snapshot.
	n, after := 0, -1 // events read; the index of the first event after the snapshot
	var fromTS int64
	f, err := scanOne(segs[0], func(ev *Event, _ uint64) {
		switch n {
		case 0:
			fromTS = ev.TS
			if ev.Kind == KindSegment {
				after = 1 + int(ev.Args[1])
			}
		case after:
			fromTS = ev.TS
		}
		n++
		emit(ev)
	})
	if err != nil {
		return nil, err
	}
	f.notes = append(f.notes, notes...)
	f.Refused += copies
	f.Segments = segs[:1]
	if f.Header.Segment > 0 {
		f.From = fromTS
	}
	// next is the process's index of the event after the last one read or counted (version 4).
	next := func(g *File) uint64 {
		return g.Header.First + max(g.End, uint64(g.Header.Lead)) - uint64(g.Header.Lead)
	}
	if f.Indexed {
		f.End = next(f)
	}
	for _, p := range segs[1:] {
		h, err := headerOf(p)
		if err == nil && (h.PID != f.Header.PID || h.Host != f.Header.Host || h.StartUnix != f.Header.StartUnix) {
			f.notes = append(f.notes, fmt.Sprintf("%s: segment of another process (pid %d), skipped", p, h.PID))
			continue
		}
		if err == nil && f.Indexed && h.Version >= 4 && h.First < f.End {
			f.notes = append(f.notes, fmt.Sprintf("%s: segment %d repeats events already read (from #%d), skipped", p,
				h.Segment, h.First))
			f.Refused++
			continue
		}
		// The segment's own snapshot repeats what the ones before it said: skipped (version 4: its first Lead
		// events, whatever of them could be read; before, the KindSegment record and the count it gives).
		i, skip, skipped := 0, 0, 0
		if err == nil && h.Version >= 4 {
			skip = h.Lead
		}
		g, err := scanOne(p, func(ev *Event, idx uint64) {
			if h.Version >= 4 {
				if idx >= uint64(skip) {
					emit(ev)
				} else {
					skipped++
				}
				return
			}
			if i == 0 && ev.Kind == KindSegment {
				skip = 1 + int(ev.Args[1])
			}
			if i >= skip {
				emit(ev)
			} else {
				skipped++
			}
			i++
		})
		if err != nil {
			f.notes = append(f.notes, fmt.Sprintf("%s: segment skipped: %v", p, err))
			f.Refused++ // an unreadable segment: what it held is counted from the next one's header
			continue
		}
		if f.Indexed && g.Indexed {
			if g.Header.First > f.End {
				f.segmentGap(g, p)
			}
		} else if want := f.Header.Segment + len(f.Segments); g.Header.Segment != want {
			f.notes = append(f.notes, fmt.Sprintf("%s: segment %d follows segment %d: the segments between "+
				"are missing", p, g.Header.Segment, want-1))
		}
		for _, gap := range g.Gaps {
			if g.Indexed && gap.First >= 0 && gap.Events >= 0 {
				// Only the segment's own events count: its snapshot's are read in the segments before.
				lo, hi := max(uint64(gap.First), uint64(skip)), max(uint64(gap.First)+uint64(gap.Events), uint64(skip))
				if hi == lo {
					continue
				}
				gap.Events, gap.First = int(hi-lo), int64(g.Header.First+lo-uint64(skip))
			}
			gap.After = max(gap.After-skipped, 0) + f.Count
			f.Gaps = append(f.Gaps, gap)
		}
		f.Repairs = append(f.Repairs, g.Repairs...)
		f.Joined, f.notes = append(f.Joined, g.Joined...), append(f.notes, g.notes...)
		if g.Count > skipped {
			f.lastTS = g.lastTS
		}
		f.Count += g.Count - skipped
		f.Truncated, f.Cut, f.Bytes = g.Truncated, g.Cut, f.Bytes+g.Bytes
		f.Closed, f.GoesOn, f.Refused = g.Closed, g.GoesOn, f.Refused+g.Refused
		if f.Indexed && g.Indexed {
			f.End = next(g)
		}
		f.Segments = append(f.Segments, p)
	}
	return f, nil
}

// segmentGap counts the events between what f read and segment g (at path p), which starts past them: the tail of
// the segment before, cut or damaged, or segments missing. An open gap at f's end (of no known size) takes the
// count; else a gap is added.
func (f *File) segmentGap(g *File, p string) {
	lost := g.Header.First - f.End
	if n := len(f.Gaps); n > 0 && f.Gaps[n-1].Events < 0 && f.Gaps[n-1].After == f.Count {
		f.Gaps[n-1].Events, f.Gaps[n-1].First = int(lost), int64(f.End)
	} else {
		why := fmt.Sprintf("segment %d starts at event #%d: the segments before it end at #%d", g.Header.Segment,
			g.Header.First, f.End)
		if !f.Closed {
			why = fmt.Sprintf("the segment before %s ends without its close mark", p)
		}
		f.Gaps = append(f.Gaps, Gap{Batch: -1, Offset: 0, Bytes: 0, Events: int(lost), First: int64(f.End),
			After: f.Count, FromTS: f.lastTS, ToTS: -1, Err: errorf(ErrCorrupt, "%s", why)})
	}
	f.Truncated = false // that segment's cut end is counted
}

// orderSegments puts a trace's segment files in the order their headers give (a file renamed in place of
// another is read where it belongs) and leaves out a second file holding the same segment: the notes say what
// was done, copies counts the files left out.
func orderSegments(paths []string) (ordered, notes []string, copies int) {
	type seg struct {
		path string
		key  int
		h    Header
		ok   bool
	}
	segs := make([]seg, len(paths))
	for i, p := range paths {
		_, k := splitSegment(p)
		h, err := headerOf(p)
		segs[i] = seg{p, k, h, err == nil && h.Version >= 2}
		if segs[i].ok {
			segs[i].key = h.Segment
		}
	}
	sort.SliceStable(segs, func(i, j int) bool { return segs[i].key < segs[j].key })
	for i, s := range segs {
		if i > 0 && s.ok && segs[i-1].ok && s.key == segs[i-1].key && s.h.PID == segs[i-1].h.PID &&
			s.h.StartUnix == segs[i-1].h.StartUnix {
			notes = append(notes, fmt.Sprintf("%s: a second copy of segment %d (%s), skipped", s.path, s.key,
				segs[i-1].path))
			copies++
			continue
		}
		if _, k := splitSegment(s.path); s.ok && k != s.key {
			notes = append(notes, fmt.Sprintf("%s: holds segment %d, read in its place", s.path, s.key))
		}
		ordered = append(ordered, s.path)
	}
	return ordered, notes, copies
}

// headerOf reads the header of the trace at path.
func headerOf(path string) (Header, error) {
	in, err := Open(path)
	if err != nil {
		return Header{}, err
	}
	defer in.Close()
	r, err := NewReader(in)
	if err != nil {
		return Header{}, err
	}
	return r.Header(), nil
}

// scanOne is read on one file.
func scanOne(path string, emit func(*Event, uint64)) (*File, error) {
	in, err := Open(path) // a regular file or an anonymous pipe
	if err != nil {
		return nil, err
	}
	defer in.Close()
	fi, err := in.Stat()
	switch {
	case err != nil:
		return nil, PathError(path, err)
	case fi.Mode().IsRegular() && fi.Size() == 0: // a pipe has no size: read it
		return nil, &traceError{kind: ErrFormat, msg: path + ": empty, not a trace"}
	}
	f, err := read(path, in, emit)
	if err == nil {
		f.Bytes = fi.Size()
		for _, j := range f.Joined {
			f.Bytes -= max(j.Bytes, 0) // another trace's bytes are not this one's
		}
	}
	return f, err
}

// Warnings are the lines a command prints (on stderr, or as notes) about what reading lost: the cut end,
// then each gap, then the damage repaired. Every command words them the same.
func (f *File) Warnings() []string {
	var out []string
	if f.Header.Segment > 0 {
		out = append(out, fmt.Sprintf("%s: the oldest %d segment(s) were dropped (SWAPAGENT_TRACE_LIMIT): the trace "+
			"covers +%s to +%s of the run, what came before is known only from the snapshot it starts with",
			f.Name, f.Header.Segment, tsString(f.From), tsString(f.lastTS)))
	}
	out = append(out, f.notes...)
	if f.Indexed && !f.Finished() {
		w := fmt.Sprintf("%s: trace not closed (process killed?): events after #%d (+%s) were never written", f.Name,
			f.End, tsString(f.lastTS))
		if f.Truncated {
			w += fmt.Sprintf("; the last %d bytes, a block cut short, dropped", f.Cut)
		}
		out = append(out, w)
	} else if f.Truncated {
		out = append(out, fmt.Sprintf("%s: trace ends mid-batch (process killed?): %d events read, the last %d bytes dropped",
			f.Name, f.Count, f.Cut))
	}
	for _, g := range f.Gaps {
		out = append(out, f.GapWarning(g))
	}
	if f.Refused > 0 {
		out = append(out, fmt.Sprintf("%s: %d blocks or segments skipped that repeat what was read or come out of "+
			"order: nothing read twice", f.Name, f.Refused))
	}
	for _, r := range f.Repairs {
		out = append(out, f.Name+": "+r.String())
	}
	for _, j := range f.Joined {
		unread := "not read"
		if j.Bytes >= 0 {
			unread = fmt.Sprintf("its %d bytes not read", j.Bytes)
		}
		out = append(out, fmt.Sprintf("%s: another trace follows this one at byte %d (files joined?): %s; read each "+
			"file on its own", j.Name, j.At, unread))
	}
	return out
}

// GapWarning is the warning line for gap g of f.
func (f *File) GapWarning(g Gap) string {
	return f.Name + ": corrupt " + g.String()
}

// PathError is err about the file at path, naming path once (an *os.PathError already says it): the
// one-line form of every command's file errors.
func PathError(path string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s: %w", path, err)
}

// countReader counts the bytes read through it, so Read knows how much a cut end dropped.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
