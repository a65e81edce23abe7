// stream.go owns the compressed layer of a trace (versions 2 and 3): after the header the file is a
// sequence of blocks, each the compressor's output for one batch (the writer flushes zstd at every batch),
// framed and checksummed so a reader can tell a good block from a damaged or cut one. The zstd stream
// restarts (a new zstd frame, flagged on its first block) every chunkBytes of batches, so damage never
// costs more than the rest of its chunk. Version 3 numbers the blocks and ends every group of them with a
// parity block, the XOR of the group's blocks: a reader rebuilds one damaged block of a group from the
// others, so a damaged block costs nothing, and only damage the parity cannot undo costs its chunk.
package trace

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

const (
	blockFrame = 20       // magic[4], data length u32, events u32, flags u32, CRC32C u32 of bytes 4..15 and the data
	maxBlock   = 32 << 20 // a longer block is damage (the writer's stay near one batch's size)
	// maxBlockV4 is version 4's: its writer ends a batch at 64 KiB and after any event that large (at most
	// MaxText and MaxPtrs pointers), so a block holds less, and a reader of damage holds no more.
	maxBlockV4    = 8 << 20
	flagNewStream = 1 // the block starts a zstd frame: a reader can start decoding here
	flagEndFrame  = 2 // version 4: the block ends its zstd frame
	flagClosed    = 4 // version 4: the writer's close mark, the file's last block
	flagGoesOn    = 8 // version 4, with flagClosed: the mark of a segment the trace goes on from in the next one
	indexBytes    = 8 // version 4: a data block's data starts with the index of its first event, u64
)

// DefaultChunkBytes is how much batch data one zstd frame holds before the writer starts the next: the
// most that damage to one block can cost (Options.ChunkBytes).
const DefaultChunkBytes = 1 << 20

var blockMagic = [4]byte{'S', 'W', 'Z', 'B'}

// appendBlock frames prefix and data, the compressed bytes of a batch of that many events, as one block.
func appendBlock(b, prefix, data []byte, events, flags uint32) []byte {
	start := len(b)
	b = append(b, blockMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(prefix)+len(data)))
	b = binary.LittleEndian.AppendUint32(b, events)
	b = binary.LittleEndian.AppendUint32(b, flags)
	crc := crc32.Update(0, castagnoli, b[start+4:])
	crc = crc32.Update(crc, castagnoli, prefix)
	b = binary.LittleEndian.AppendUint32(b, crc32.Update(crc, castagnoli, data))
	b = append(b, prefix...)
	return append(b, data...)
}

// blockGap is a stretch of blocks a reader skipped: a damaged block and the rest of its chunk.
type blockGap struct {
	offset int64 // file offset of the damaged block
	bytes  int64 // file bytes skipped
	events int   // events lost, by the blocks' frames; -1 when a frame was unreadable
	why    string
}

// blockStream is the decompressed content of a version-2 file. It reads blocks from the file, hands their
// data to the zstd decoder and gives the batches it decodes. Damage ends a chunk: Read reports it once as
// ErrCorrupt (the batch reader makes it a gap) and goes on from the next chunk. A file that ends inside
// a block ends the stream as ErrTruncated would (io.ErrUnexpectedEOF); one that ends after a whole block
// ends cleanly, whether or not the writer closed its last zstd frame (a killed process leaves it open).
type blockStream struct {
	raw     *bufio.Reader
	off     int64 // file offset of the next unread byte of raw
	goodEnd int64 // file offset just past the last good block
	fedAt   int64 // file offset of the block whose data the decoder read last: where data that does not decompress starts
	z       *zstd.Decoder
	data    bytes.Reader // the current block's data, fed to z
	gaps    []blockGap   // damage skipped, taken by the batch reader (takeGap)
	end     error        // the raw file's end: io.EOF at a block boundary, io.ErrUnexpectedEOF inside a block
	fed     error        // what the feeder last returned to the decoder instead of data
	// lastEvents is the event count in the frame of the block nextBlock read last, -1 when the block failed
	// its checksum (which then cannot vouch for it).
	lastEvents int
	err        error // sticky, once the stream ended
	frame      [blockFrame]byte
	block      []byte // the block nextBlock read last, reused for the next (accept copies what it keeps)

	// Version 4: what the blocks say of the events, so the batch reader counts what was lost exactly.
	indexed  bool
	idx      []blockIndex // blocks fed to the decoder whose batches the batch reader has not taken (pop)
	epoch    int          // decoder resets so far: a reset drops what the old decoder held
	seen     bool         // a data block was taken
	expect   uint64       // the index of the event after the last block taken
	inFrame  bool         // the last block taken did not end its zstd frame
	closed   bool         // the writer's close mark was read
	goesOn   bool         // that mark closed a segment the trace goes on from (flagGoesOn)
	total    uint64       // its count: the events the file holds
	refused  int          // good blocks refused: already read, or older than the last one taken
	joinedAt int64        // file offset where another trace's header follows this one's blocks (files joined), else -1

	// Version 3: what repair needs (parity.go).
	numbered bool     // the blocks are numbered and grouped under parity blocks
	nextSeq  uint32   // the number the next data block should have
	group    []byte   // the open parity group's good blocks as the file holds them
	ready    [][]byte // data of blocks a repair gave back, to feed before reading on
	repairs  []Repair // damage undone
}

// idle keeps the zstd decoders of streams that ended, so reading many traces one after another reuses one
// decoder's buffers (its history is a window long) instead of leaving a window of garbage per file. (A
// sync.Pool would drop them at every garbage collection, which reading a trace triggers.)
var idle struct {
	sync.Mutex
	decoders []*zstd.Decoder
}

func idleDecoder() *zstd.Decoder {
	idle.Lock()
	defer idle.Unlock()
	n := len(idle.decoders)
	if n == 0 {
		return nil
	}
	z := idle.decoders[n-1]
	idle.decoders = idle.decoders[:n-1]
	return z
}

// maxIdle bounds the decoders kept: as many as traces are read at once.
const maxIdle = 4

func newBlockStream(raw *bufio.Reader, off int64, version uint32) (*blockStream, error) {
	s := &blockStream{raw: raw, off: off, goodEnd: off, numbered: version >= 3, indexed: version >= 4, joinedAt: -1}
	if z := idleDecoder(); z != nil && z.Reset(feeder{s}) == nil {
		s.z = z
		return s, nil
	}
	z, err := zstd.NewReader(feeder{s}, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstdWindow),
		zstd.WithDecoderLowmem(true))
	if err != nil {
		return nil, err
	}
	s.z = z
	return s, nil
}

// feeder is what the zstd decoder reads: the data of good blocks, one after another.
type feeder struct{ s *blockStream }

func (f feeder) Read(p []byte) (int, error) {
	s := f.s
	for s.data.Len() == 0 {
		if len(s.ready) > 0 {
			s.data.Reset(s.ready[0])
			s.ready = s.ready[1:]
			continue
		}
		if s.end != nil {
			s.fed = s.end
			return 0, s.end
		}
		at := s.goodEnd
		if bad := s.nextBlock(false, nil); bad != "" {
			if bad == frameCut {
				// A frame's start after a frame cut short: a new decoder starts on it.
				s.addGap(blockGap{offset: at, bytes: max(s.fedAt-at, 1), events: -1, why: bad}, 0)
				s.fed = errDamaged
				return 0, errDamaged
			}
			if bad != blocksMissing && s.repair() {
				continue
			}
			if s.damaged(bad, bad == cutShort) == wasCut {
				s.fed = s.end // cut short, with no good block after it: the file's end
				return 0, s.end
			}
			s.fed = errDamaged
			return 0, errDamaged
		}
	}
	return s.data.Read(p)
}

var errDamaged = errorf(ErrCorrupt, "compressed block damaged")

// cutShort is nextBlock's reason for a block the file ends inside.
const cutShort = "block runs past the end of the file"

// Version 4's reasons: a good block that does not follow the last one taken (blocksMissing), and a good block
// starting a zstd frame while the last one is not ended (frameCut: taken, for a new decoder).
const (
	blocksMissing = "blocks missing before a good block"
	frameCut      = "zstd frame cut short before the next one"
)

// blockIndex is what a version-4 block says of its batch: the index of its first event and their count.
type blockIndex struct {
	first  uint64
	events uint32
	epoch  int
}

// take does the bookkeeping of a good data block about to be fed to the decoder, in order, and returns its data
// for the decoder.
func (s *blockStream) take(block []byte) []byte {
	data := block[blockFrame:]
	if !s.indexed {
		return data
	}
	flags := binary.LittleEndian.Uint32(block[12:])
	first, events := binary.LittleEndian.Uint64(data), countOf(block)
	s.idx = append(s.idx, blockIndex{first, events, s.epoch})
	s.expect, s.seen, s.inFrame = first+uint64(events), true, flags&flagEndFrame == 0
	if flags&flagClosed != 0 {
		s.close(first, flags)
	}
	return data[indexBytes:]
}

// close notes the writer's close mark (its flags): the file holds total events, and nothing after it is read.
func (s *blockStream) close(total uint64, flags uint32) {
	s.closed, s.goesOn, s.total, s.end = true, flags&flagGoesOn != 0, total, io.EOF
}

// afterClose is the file offset where the trace ends once its close mark was read: past the parity blocks
// that follow the mark (its group's, written with it); reading stops at the first byte that is none. Without
// drain (a pipe) only the bytes already buffered are looked at.
func (s *blockStream) afterClose(drain bool) int64 {
	for {
		if !drain && s.raw.Buffered() < blockFrame {
			return s.off // a pipe: what its writer has not sent is not waited for
		}
		frame, err := s.raw.Peek(blockFrame)
		if err != nil || [4]byte(frame[:4]) != parityMagic {
			return s.off
		}
		size := int(binary.LittleEndian.Uint32(frame[4:]))
		if size > maxBlock {
			return s.off
		}
		if !drain && s.raw.Buffered() < blockFrame+size {
			return s.off
		}
		block := make([]byte, blockFrame+size) // read, not peeked: a block may outgrow the reader's buffer
		n, err := io.ReadFull(s.raw, block)
		s.off += int64(n)
		if err != nil || !blockSound(block) {
			s.unread(block[:n]) // whatever it is, what follows is read from its start
			return s.off
		}
	}
}

// pop returns the index of the next batch the decoder gives: the first event of the oldest block fed that holds
// events. dropOld first forgets the blocks fed to decoders before the last reset (the batch reader calls it
// once it has read everything the old decoder gave).
func (s *blockStream) pop() (uint64, bool) {
	for len(s.idx) > 0 {
		b := s.idx[0]
		s.idx = s.idx[1:]
		if b.events > 0 {
			return b.first, true
		}
	}
	return 0, false
}

func (s *blockStream) dropOld() {
	i := 0
	for i < len(s.idx) && s.idx[i].epoch < s.epoch {
		i++
	}
	s.idx = s.idx[i:]
}

// nextBlock reads the next data block into s.data, passing over good parity blocks. At the end of the file
// it sets s.end; a block that fails its checks gives the reason, and its bytes after the magic are put back
// for the search. With start set it accepts only a block that starts a zstd frame, and a good block that
// does not is skipped, its events added to *skipped.
func (s *blockStream) nextBlock(start bool, skipped *int) string {
	for {
		n, err := io.ReadFull(s.raw, s.frame[:])
		s.off += int64(n)
		s.lastEvents = -1
		magic := [4]byte(s.frame[:4])
		switch {
		case err == io.EOF:
			s.end = io.EOF
			return ""
		case err != nil:
			s.unread(s.frame[1:n])
			return cutShort
		case [8]byte(s.frame[:8]) == fileMagic:
			// Another trace's header where a block should be (files joined, the first one unclosed): this
			// trace ends here; the other is not read (Joined says so).
			s.unread(s.frame[:])
			s.joinedAt, s.end = s.off, io.EOF
			return ""
		case magic != blockMagic && !(s.numbered && magic == parityMagic):
			s.unread(s.frame[1:])
			return "bad block magic"
		}
		size := binary.LittleEndian.Uint32(s.frame[4:])
		events := binary.LittleEndian.Uint32(s.frame[8:])
		flags := binary.LittleEndian.Uint32(s.frame[12:])
		if size > maxBlock || s.indexed && size > maxBlockV4 {
			s.unread(s.frame[1:])
			return "block length beyond the limit"
		}
		if cap(s.block) < blockFrame+int(size) {
			s.block = make([]byte, blockFrame+int(size))
		}
		block := s.block[:blockFrame+int(size)]
		copy(block, s.frame[:])
		m, err := io.ReadFull(s.raw, block[blockFrame:])
		s.off += int64(m)
		if err != nil {
			// The file's end, or a damaged length reaching past it.
			s.unread(block[1 : blockFrame+m])
			return cutShort
		}
		if !blockSound(block) {
			// A damaged length reads into the blocks after it: they are searched again.
			s.unread(block[1:])
			return "block checksum mismatch"
		}
		s.lastEvents = int(events) // vouched for by the checksum
		if magic == parityMagic {
			s.closeGroup() // its group is whole: nothing to repair with it
			continue
		}
		if s.indexed {
			if size < indexBytes {
				s.unread(block[1:])
				return "block too short"
			}
			first := binary.LittleEndian.Uint64(block[blockFrame:])
			d := (seqOf(block) - s.nextSeq) & seqMask
			if s.seen && (d >= 1<<(31-seqShift) || first < s.expect) {
				s.refused++ // a copy of a block already read, or one out of order: never read twice
				continue
			}
			ahead := s.seen && (d != 0 || first != s.expect)
			if flags&flagClosed != 0 && (start || ahead) {
				s.accept(block)
				s.close(first, flags) // the count stands; the data cannot be decoded after what was lost
				s.data.Reset(nil)
				return ""
			}
			if ahead && !start && flags&flagNewStream == 0 {
				return blocksMissing
			}
			if !start && flags&flagNewStream != 0 && s.inFrame {
				s.accept(block)
				s.epoch++ // the blocks the old decoder was fed and did not give are gone
				s.data.Reset(s.take(block))
				return frameCut
			}
		}
		if start && flags&flagNewStream == 0 {
			*skipped += int(events) // a good block, but its chunk cannot be decoded without the damaged one
			return "not the start of a chunk"
		}
		s.accept(block)
		s.data.Reset(s.take(block))
		return ""
	}
}

// unread puts b back in front of the unread input, so the search for the next good block sees it again.
func (s *blockStream) unread(b []byte) {
	s.raw = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(b)), s.raw), 64<<10)
	s.off -= int64(len(b))
}

// What damaged found after the damage.
const (
	resumed   = iota // a good chunk start: decoding goes on there
	damageEnd        // no good block: the damage reaches the end of the file
	wasCut           // no good block after a block cut short: the file's own end (a killed process)
)

// damaged is called with the first bad block just read (why, and its frame's event count in lastEvents). It
// moves to the next block that starts a chunk, searching byte by byte after the damage, and records the gap
// with the events it lost: the bad block's own count (which its failed checksum cannot vouch for) and those
// of the good blocks of its chunk after it. When no good block follows, the damage reaches the end of the
// file and is a gap too, unless cut says it may be the file's own end (a block cut short by a killed
// process), which ends the stream as truncated.
func (s *blockStream) damaged(why string, cut bool) int {
	g := blockGap{offset: s.goodEnd, events: s.lastEvents, why: why}
	s.data.Reset(nil)
	s.ready = nil // blocks of the chunk the damage ends
	s.epoch++     // the decoder starts afresh on the next chunk
	skipped := 0
	for !s.closed {
		if b, _ := s.raw.Peek(len(fileMagic)); len(b) == len(fileMagic) && [8]byte(b) == fileMagic {
			s.joinedAt = s.off // another trace's header: the damage ends this trace (files joined)
			break
		}
		b, err := s.raw.Peek(len(blockMagic))
		if err != nil {
			n, _ := s.raw.Discard(len(b))
			s.off += int64(n)
			break
		}
		if [4]byte(b) != blockMagic {
			_, _ = s.raw.Discard(1)
			s.off++
			continue
		}
		at := s.off
		if bad := s.nextBlock(true, &skipped); bad == "" && s.end == nil {
			g.bytes = at - g.offset
			s.addGap(g, skipped)
			return resumed
		}
	}
	if cut && skipped == 0 && !s.closed {
		s.end = io.ErrUnexpectedEOF
		return wasCut
	}
	s.end = io.EOF
	g.bytes = s.off - g.offset
	s.addGap(g, skipped)
	return damageEnd
}

func (s *blockStream) addGap(g blockGap, skipped int) {
	if g.events >= 0 {
		g.events += skipped
	}
	s.gaps = append(s.gaps, g)
}

// Read gives decompressed batch bytes (the batch reader's input).
func (s *blockStream) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	s.fed = nil
	n, err := s.z.Read(p)
	if n > 0 || err == nil {
		return n, nil
	}
	switch {
	case s.fed == io.ErrUnexpectedEOF:
		return 0, s.finish(io.ErrUnexpectedEOF)
	case err == io.EOF, s.fed == io.EOF:
		// The file ends after a whole block: a closed trace, or a killed process's open last frame.
		return 0, s.finish(io.EOF)
	case s.fed != errDamaged:
		// Good blocks whose data does not decompress: as damaged as a bad checksum, from the last one fed on.
		s.lastEvents = -1
		s.goodEnd = min(s.goodEnd, s.fedAt)
		s.damaged("does not decompress: "+err.Error(), false)
	}
	if s.end != nil && s.data.Len() == 0 && len(s.ready) == 0 {
		// Nothing good after the damage: said once (its gap is recorded), then the stream ends.
		_ = s.finish(io.EOF)
		return 0, errDamaged
	}
	if err := s.z.Reset(feeder{s}); err != nil {
		return 0, s.finish(errDamaged)
	}
	return 0, errDamaged
}

// finish ends the stream with err (returned by every later Read) and gives the decoder back for the next.
func (s *blockStream) finish(err error) error {
	s.err = err
	if s.z.Reset(nil) == nil {
		idle.Lock()
		if len(idle.decoders) < maxIdle {
			idle.decoders = append(idle.decoders, s.z)
		}
		idle.Unlock()
	}
	s.z = nil
	return err
}

// takeGap returns the oldest gap not yet taken.
func (s *blockStream) takeGap() (blockGap, bool) {
	if len(s.gaps) == 0 {
		return blockGap{}, false
	}
	g := s.gaps[0]
	s.gaps = s.gaps[1:]
	return g, true
}
