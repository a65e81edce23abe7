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
	blockFrame    = 20       // magic[4], data length u32, events u32, flags u32, CRC32C u32 of bytes 4..15 and the data
	maxBlock      = 32 << 20 // a longer block is damage (the writer's stay near one batch's size)
	flagNewStream = 1        // the block starts a zstd frame: a reader can start decoding here
)

// DefaultChunkBytes is how much batch data one zstd frame holds before the writer starts the next: the
// most that damage to one block can cost (Options.ChunkBytes).
const DefaultChunkBytes = 1 << 20

var blockMagic = [4]byte{'S', 'W', 'Z', 'B'}

// appendBlock frames data, the compressed bytes of a batch of that many events, as one block.
func appendBlock(b, data []byte, events, flags uint32) []byte {
	start := len(b)
	b = append(b, blockMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	b = binary.LittleEndian.AppendUint32(b, events)
	b = binary.LittleEndian.AppendUint32(b, flags)
	crc := crc32.Update(0, castagnoli, b[start+4:])
	b = binary.LittleEndian.AppendUint32(b, crc32.Update(crc, castagnoli, data))
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
	s := &blockStream{raw: raw, off: off, goodEnd: off, numbered: version >= 3}
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
		if bad := s.nextBlock(false, nil); bad != "" {
			if s.repair() {
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
		case magic != blockMagic && !(s.numbered && magic == parityMagic):
			s.unread(s.frame[1:])
			return "bad block magic"
		}
		size := binary.LittleEndian.Uint32(s.frame[4:])
		events := binary.LittleEndian.Uint32(s.frame[8:])
		flags := binary.LittleEndian.Uint32(s.frame[12:])
		if size > maxBlock {
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
		if start && flags&flagNewStream == 0 {
			*skipped += int(events) // a good block, but its chunk cannot be decoded without the damaged one
			return "not the start of a chunk"
		}
		s.accept(block)
		s.data.Reset(block[blockFrame:])
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
	skipped := 0
	for {
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
	if cut && skipped == 0 {
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
