// parity.go owns version 3's repair of damaged blocks. The writer numbers its data blocks and, after every
// parityGroup bytes of them and at the end of every zstd frame, writes a parity block: the group's bytes, as
// the file holds them, folded into rows of parityRow bytes and XORed together. A reader that meets a damaged
// block reads on to the group's parity block; XORing the group's bytes with it leaves the damage itself,
// column by column, and trying it at each row until every block of the group passes its checksum undoes any
// one burst of damage shorter than a row. Damage that held no data block (a parity block's, stray
// bytes) costs nothing either, and is found by the block numbers.
package trace

import (
	"bytes"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"sort"
)

var parityMagic = [4]byte{'S', 'W', 'Z', 'P'}

const (
	seqShift  = 8                    // a data block's flags hold its number from this bit on
	seqMask   = 1<<(32-seqShift) - 1 // numbers count modulo 2^24
	parityRow = 4 << 10              // version 3's parity width: the bursts of damage it undoes are shorter
	// parityRowV4 is version 4's: wider than a page by a margin, so a whole 4 KiB page of damage leaves clean
	// columns that say where it starts, and a parity block is longer than a page, so one page cannot reach both
	// a group's blocks and the second copy of its parity.
	parityRowV4 = 4<<10 + 64
	maxRow      = 64 << 10  // a wider parity block is damage
	parityGroup = 256 << 10 // bytes of blocks a parity block covers, at least (but at a frame's end)
	parityHead  = 8         // version 4: a parity block's data starts with the group's length and the row's, u32 each
	// repairBlock bounds how far past a group's bytes a repair reads ahead for the good block after the damage
	// and for the group's parity, and the longest block it takes there: the writer's blocks stay far below
	// it (a batch of 64 KiB, compressed), and it bounds what damage (garbage after a header) makes a reader
	// hold. A group with a longer block is not repaired: its loss is counted.
	repairBlock = 1 << 20
	// maxStarts bounds the places mend tries for the start of a burst: damage that leaves some bytes as they
	// were (a sector of zeros over data with zeros in it) shows clean columns inside the burst too.
	maxStarts = 32
	// parityWhite is XORed into a parity block's data, so the parity of a lone block is no copy of it that
	// a reader searching for blocks would take for a second one.
	parityWhite = 0xA5
)

// parity is the writer's open parity group: the blocks written since the last parity block.
type parity struct {
	v3    bool   // version 3's layout: rows of parityRow, no lengths (what a reader of version 3 rebuilds)
	first uint32 // number of its first block
	n     uint32 // blocks in it
	bytes int    // their bytes
	x     [parityRowV4]byte
}

func (p *parity) row() int {
	if p.v3 {
		return parityRow
	}
	return parityRowV4
}

func (p *parity) add(seq uint32, block []byte) {
	if p.n == 0 {
		p.first = seq
	}
	p.n++
	row := p.row()
	for len(block) > 0 {
		col := p.bytes % row
		k := min(row-col, len(block))
		subtle.XORBytes(p.x[col:col+k], p.x[col:col+k], block[:k])
		block, p.bytes = block[k:], p.bytes+k
	}
}

// appendBlock appends the group's parity block to b and starts a new group. Its frame is a block's, with
// the parity magic, the number of blocks covered where a block has its events, and the first one's number
// in the flags; its data is the XOR of the rows, whitened, cut to the group's length when that is shorter
// (the rest of a row is zeros).
// Version 4 writes the group's length and the row's first, and always a whole row.
func (p *parity) appendBlock(b []byte) []byte {
	w, head := min(p.bytes, parityRow), 0
	if !p.v3 {
		w, head = parityRowV4, parityHead
	}
	start := len(b)
	b = append(b, parityMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(head+w))
	b = binary.LittleEndian.AppendUint32(b, p.n)
	b = binary.LittleEndian.AppendUint32(b, p.first<<seqShift)
	b = append(b, 0, 0, 0, 0)
	if !p.v3 {
		b = binary.LittleEndian.AppendUint32(b, uint32(p.bytes))
		b = binary.LittleEndian.AppendUint32(b, uint32(w))
	}
	for _, c := range p.x[:w] {
		b = append(b, c^parityWhite)
	}
	crc := crc32.Update(0, castagnoli, b[start+4:start+16])
	binary.LittleEndian.PutUint32(b[start+16:], crc32.Update(crc, castagnoli, b[start+blockFrame:]))
	*p = parity{v3: p.v3}
	return b
}

// Repair is damage to a version-3 trace that cost no event: blocks put right from their group's parity, or
// damaged bytes that held no data block (a parity block, stray bytes).
type Repair struct {
	Offset int64 // file offset where the damage starts
	Bytes  int64 // bytes from there to the end of the last block put right; with none, to the next good block
	Blocks int   // data blocks put right; 0 when the damage held none
	Events int   // the events they hold
}

// String says what was damaged and that nothing was lost, in one line.
func (r Repair) String() string {
	if r.Blocks == 0 {
		return fmt.Sprintf("damaged bytes at offset %d (%d bytes) held no event (a parity block or padding): nothing lost",
			r.Offset, r.Bytes)
	}
	if r.Blocks == 1 {
		return fmt.Sprintf("damaged block at offset %d (%d bytes) repaired from its group's parity: its %d events "+
			"read, nothing lost", r.Offset, r.Bytes, r.Events)
	}
	return fmt.Sprintf("%d damaged blocks at offset %d (%d bytes) repaired from their group's parity: their %d "+
		"events read, nothing lost", r.Blocks, r.Offset, r.Bytes, r.Events)
}

// accept notes a good data block just read.
func (s *blockStream) accept(block []byte) {
	s.fedAt, s.goodEnd = s.off-int64(len(block)), s.off
	if !s.numbered {
		return
	}
	if binary.LittleEndian.Uint32(block[12:])&flagNewStream != 0 {
		s.group = s.group[:0]
	}
	s.group = append(s.group, block...)
	s.nextSeq = (seqOf(block) + 1) & seqMask
}

// closeGroup notes a good parity block just read: the next block starts a group.
func (s *blockStream) closeGroup() {
	s.goodEnd = s.off
	s.group = s.group[:0]
}

// groupFrom returns where, in s.group, the block numbered first starts: len(s.group) when it is the next
// block, -1 when s.group does not hold it.
func (s *blockStream) groupFrom(first uint32) int {
	for off := 0; off+blockFrame <= len(s.group); off += blockFrame + int(binary.LittleEndian.Uint32(s.group[off+4:])) {
		if seqOf(s.group[off:]) == first {
			return off
		}
	}
	if first == s.nextSeq {
		return len(s.group)
	}
	return -1
}

// repair is called, in version 3, with the first bad block just read (its bytes after the magic put back).
// It reads ahead to the next good block, and on to the group's parity block when the damage held data. When
// it can undo the damage, it queues the data of the blocks put right and of those after them, keeps the
// damage as a Repair, and returns true. Otherwise it puts back what it read and returns false: damaged then
// treats the damage as version 2 does.
func (s *blockStream) repair() bool {
	if !s.numbered {
		return false
	}
	at, winOff := s.goodEnd, s.off
	var win []byte // the bytes read ahead: the damaged block's from its second byte on, and what follows
	more := func(need int) (ok bool) {
		old := len(win)
		win, ok = fill(s.raw, win, need)
		s.off += int64(len(win) - old)
		return ok
	}
	keep := func(resume int, r Repair) bool {
		s.unread(win[resume:])
		s.goodEnd = winOff + int64(resume)
		s.fedAt = at // the blocks queued: a failure to decompress them is blamed on the whole stretch
		r.Offset = at
		if r.Blocks == 0 { // no block put right: the damaged bytes are all those before the good block
			r.Bytes = winOff + int64(resume) - at
		}
		s.repairs = append(s.repairs, r)
		return true
	}
	// The next good block, from pos on: the damage spans the bytes before it.
	pos := 0
	next := func(limit int) []byte {
		for ; pos < limit && more(pos+blockFrame); pos++ {
			magic := [4]byte(win[pos : pos+4])
			if magic != blockMagic && magic != parityMagic {
				continue
			}
			end := pos + blockFrame + int(binary.LittleEndian.Uint32(win[pos+4:]))
			if end-pos > blockFrame+repairBlock || !more(end) || !blockSound(win[pos:end]) {
				continue
			}
			b := win[pos:end]
			pos = end
			return b
		}
		return nil
	}
	first := next(parityGroup + repairBlock)
	if first == nil {
		// Nothing good after the damage: it may be the last parity block's own.
		if s.lastParity(win) {
			return keep(len(win), Repair{})
		}
		s.unread(win)
		return false
	}
	found := pos - len(first)
	if [4]byte(first) == blockMagic && seqOf(first) == s.nextSeq ||
		[4]byte(first) == parityMagic && (seqOf(first)+countOf(first))&seqMask == s.nextSeq {
		return keep(found, Repair{}) // no data block was lost: a damaged parity block, or stray bytes
	}
	// Read on to the parity block of the damaged block's group: the first that covers its number.
	par := first
	for par != nil && !([4]byte(par) == parityMagic && (s.nextSeq-seqOf(par))&seqMask < countOf(par)) {
		par = next(found + parityGroup + repairBlock + 2*(blockFrame+parityHead+maxRow))
	}
	if par != nil {
		if r, ok := s.mend(win[:pos-len(par)], par); ok {
			return keep(pos, r)
		}
	}
	s.unread(win)
	return false
}

// lastParity reports whether rest, the file's bytes from the damaged block's second one to its end, is the
// open group's parity block, damaged in a few bytes at most: then nothing was lost.
func (s *blockStream) lastParity(rest []byte) bool {
	if s.indexed {
		return false // version 4 ends with its close mark: the parity after it is never read
	}
	p := parity{v3: true}
	for off := 0; off+blockFrame <= len(s.group); {
		n := blockFrame + int(binary.LittleEndian.Uint32(s.group[off+4:]))
		p.add(seqOf(s.group[off:]), s.group[off:min(off+n, len(s.group))])
		off += n
	}
	if p.n == 0 {
		return false
	}
	want := p.appendBlock(nil)
	if len(want) != len(rest)+1 || differ(want[1:], rest) > 8 {
		return false
	}
	s.group = s.group[:0]
	return true
}

// mend puts right the open group's blocks from the damaged one on, given as rest (the file's bytes after the
// damaged block's first one, up to the group's parity block par), queues their data and returns what it
// mended; false when the damage is beyond the parity.
func (s *blockStream) mend(rest, par []byte) (Repair, bool) {
	xor, width, glen := par[blockFrame:], parityRow, -1
	if s.indexed {
		if len(xor) < parityHead {
			return Repair{}, false
		}
		glen, width = int(binary.LittleEndian.Uint32(xor)), int(binary.LittleEndian.Uint32(xor[4:]))
		xor = xor[parityHead:]
		if width == 0 || width > maxRow || len(xor) != width {
			return Repair{}, false
		}
	}
	if len(xor) > width {
		return Repair{}, false // no parity block this package writes
	}
	from := s.groupFrom(seqOf(par))
	if from < 0 {
		return Repair{}, false
	}
	// The group's blocks from the first par covers; the damaged block's first byte is taken for granted: its
	// magic's.
	all := append(append(append([]byte(nil), s.group[from:]...), blockMagic[0]), rest...)
	fed := len(s.group) - from // the group's bytes already fed: the damaged block starts there
	if glen < 0 {
		return s.mendRegion(all, fed, xor, width, par)
	}
	// Version 4 says the group's length: the group ends where its parity starts, or a parity's length before
	// when the parity found is the second copy (the first damaged), and starts glen bytes earlier; what lies
	// before it (a damaged parity of the group before) is no part of it.
	for _, end := range []int{len(all), len(all) - len(par)} {
		start := end - glen
		if start < 0 || fed > 0 && start != 0 {
			continue
		}
		if r, ok := s.mendRegion(all[start:end], max(fed-start, 0), xor, width, par); ok {
			return r, true
		}
	}
	return Repair{}, false
}

// mendRegion puts right region, the group's bytes with the damage in them (damagedAt: where the blocks not yet
// fed start), from its parity xor of the given width.
func (s *blockStream) mendRegion(region []byte, damagedAt int, xor []byte, width int, par []byte) (Repair, bool) {
	syndrome := make([]byte, width)
	for i, c := range xor {
		syndrome[i] = c ^ parityWhite
	}
	for off := 0; off < len(region); off += width {
		row := region[off:min(off+width, len(region))]
		subtle.XORBytes(syndrome[:len(row)], syndrome[:len(row)], row)
	}
	starts := burstStarts(syndrome)
	if len(starts) == 0 {
		return s.groupSound(region, region, damagedAt, par) // only the magic was damaged
	}
	fixed := bytes.Clone(region)
	for _, start := range starts {
		for row := 0; row*width < len(region); row++ {
			if placeBurst(fixed, syndrome, row, start) {
				if r, ok := s.groupSound(fixed, region, damagedAt, par); ok {
					return r, true
				}
			}
			copy(fixed, region)
		}
	}
	return Repair{}, false
}

// burstStarts returns the columns where the damage the syndrome shows may start, most likely first: after
// the longest runs of clean columns, counted around the row (a burst shorter than a row leaves one; bytes
// the damage left as they were make others). At most maxStarts; none when every column is clean.
func burstStarts(syndrome []byte) []int {
	width := len(syndrome)
	first := slices.IndexFunc(syndrome, func(b byte) bool { return b != 0 })
	if first < 0 {
		return nil
	}
	type run struct{ len, next int }
	var runs []run
	n := 0
	for i := 1; i <= width; i++ { // one lap from the first damaged column back to it
		c := (first + i) % width
		if syndrome[c] == 0 {
			n++
			continue
		}
		if n > 0 {
			runs = append(runs, run{n, c})
		}
		n = 0
	}
	if len(runs) == 0 {
		return []int{first} // every column damaged: the start cannot be told
	}
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].len > runs[j].len })
	out := make([]int, 0, maxStarts)
	for _, r := range runs[:min(len(runs), maxStarts)] {
		out = append(out, r.next)
	}
	return out
}

// placeBurst applies the damage the syndrome shows to fixed as a burst starting at column start of the given row
// (wrapping into the next row), which undoes it when that is where the damage is. False when it would reach
// past the end.
func placeBurst(fixed, syndrome []byte, row, start int) bool {
	width := len(syndrome)
	for c, d := range syndrome {
		if d == 0 {
			continue
		}
		at := row*width + c
		if c < start {
			at += width
		}
		if at >= len(fixed) {
			return false
		}
		fixed[at] ^= d
	}
	return true
}

// groupSound reports whether fixed is the whole group par covers: its blocks, numbered in order, each
// passing its checksum. Then it queues the data of those at offset from and after, takes their number, and returns
// the blocks that differ from was (the group as read) as the Repair.
func (s *blockStream) groupSound(fixed, was []byte, from int, par []byte) (Repair, bool) {
	var r Repair
	var data [][]byte
	first, seq := seqOf(par), seqOf(par)
	for off := 0; off < len(fixed); seq = (seq + 1) & seqMask {
		if len(fixed)-off < blockFrame || [4]byte(fixed[off:]) != blockMagic || seqOf(fixed[off:]) != seq {
			return Repair{}, false
		}
		end := off + blockFrame + int(binary.LittleEndian.Uint32(fixed[off+4:]))
		if end > len(fixed) || !blockSound(fixed[off:end]) {
			return Repair{}, false
		}
		if off >= from {
			data = append(data, fixed[off:end])
		}
		if !bytes.Equal(fixed[off:end], was[off:end]) || off == from {
			r.Blocks++
			r.Events += int(countOf(fixed[off:]))
			r.Bytes = int64(end - from) // the damage: from the first block put right to the end of the last
		}
		off = end
	}
	if (seq-first)&seqMask != countOf(par) || len(data) == 0 {
		return Repair{}, false
	}
	for _, b := range data {
		s.ready = append(s.ready, s.take(b))
	}
	s.group, s.nextSeq = s.group[:0], seq
	return r, true
}

// differ counts the bytes where a and b differ.
func differ(a, b []byte) int {
	n := 0
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n + max(len(a), len(b)) - min(len(a), len(b))
}

// blockSound reports whether block, a whole block (frame and data), passes its checksum.
func blockSound(block []byte) bool {
	crc := crc32.Update(0, castagnoli, block[4:16])
	return crc32.Update(crc, castagnoli, block[blockFrame:]) == binary.LittleEndian.Uint32(block[16:])
}

// seqOf is a block's number (a parity block's: its first block's); countOf a block's events (a parity
// block's: the blocks it covers).
func seqOf(block []byte) uint32   { return binary.LittleEndian.Uint32(block[12:]) >> seqShift }
func countOf(block []byte) uint32 { return binary.LittleEndian.Uint32(block[8:]) }
