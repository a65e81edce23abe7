// Package pool owns the one model of a framework's device memory pool that plan, replay and report share:
// the rules of decoder-sim's caching pool (sim/decoder/src/pool.c), which follow MindSpore's and torch's.
// Blocks are rounded up to Align bytes and taken best fit over every free block (the smallest that holds the
// request; on a tie the first in chunk order, then address order), split when Align bytes or more are left,
// and coalesced with free neighbours when returned. The pool grows only when no free block holds a request:
//   - Malloc: a new chunk of Step bytes from the runtime (a larger request gets a chunk of its own size),
//     kept until the end;
//   - VMM: one segment at the start of a reservation, grown at its end by Step-byte mappings until its free
//     tail holds the request (so a block may span several), and shrunk from its end by EmptyCache
//     (MindSpore's eager free, once a step): the mappings inside the free tail block are unmapped.
//
// Held is what the runtime sees the pool hold (aclrtMalloc'd or mapped bytes): what a trace's device
// footprint and the agent's peak count. The model knows blocks by an id the caller gives; it never sees
// addresses, so it holds the same for any run of the same requests.
package pool

import (
	"slices"
	"sort"
)

// Kind is where the pool's memory comes from.
type Kind int

const (
	Malloc Kind = iota // aclrtMalloc chunks, never freed
	VMM                // one reservation, Step-byte mappings at its end, unmapped by EmptyCache
)

func (k Kind) String() string {
	if k == VMM {
		return "vmm"
	}
	return "malloc"
}

// Config are the pool's parameters, as a trace records them (FromTrace).
type Config struct {
	Kind  Kind
	Step  uint64 // bytes of a chunk (malloc) or a mapping (VMM): the pool's step of growth
	Align uint64 // block rounding
}

// DefaultStep and DefaultAlign are decoder-sim's (and MindSpore's): 2 MiB chunks, 512-byte blocks.
const (
	DefaultStep  = 2 << 20
	DefaultAlign = 512
)

type block struct {
	addr, size uint64
	free       bool
	prev, next *block
	chunk      *chunk
}

type chunk struct {
	base, size uint64
	first      *block
}

// Model is one pool.
type Model struct {
	cfg    Config
	chunks []*chunk // in the order they were made: their addresses rise with it
	// free are the free blocks by size, then address: best fit's order (a tie goes to the first chunk made,
	// then the lowest address; chunks are placed in the order they are made), found by binary search.
	free     []*block
	live     map[int64]*block
	nextBase uint64
	mapped   uint64 // VMM: bytes mapped from the segment's start

	held, heldPeak   uint64
	inUse, inUsePeak uint64
}

// New is an empty pool.
func New(cfg Config) *Model {
	if cfg.Step == 0 {
		cfg.Step = DefaultStep
	}
	if cfg.Align == 0 {
		cfg.Align = DefaultAlign
	}
	m := &Model{cfg: cfg, live: map[int64]*block{}, nextBase: 1 << 40}
	if cfg.Kind == VMM {
		m.chunks = []*chunk{{base: m.nextBase}}
	}
	return m
}

// Config is the pool's configuration.
func (m *Model) Config() Config { return m.cfg }

// Held is the bytes the pool holds from the runtime now; HeldPeak the most it held.
func (m *Model) Held() uint64     { return m.held }
func (m *Model) HeldPeak() uint64 { return m.heldPeak }

// InUse is the bytes in blocks now (rounded sizes); InUsePeak the most.
func (m *Model) InUse() uint64     { return m.inUse }
func (m *Model) InUsePeak() uint64 { return m.inUsePeak }

// Live says whether block id is allocated.
func (m *Model) Live(id int64) bool { return m.live[id] != nil }

// Size is the rounded size of live block id (0 when none).
func (m *Model) Size(id int64) uint64 {
	if b := m.live[id]; b != nil {
		return b.size
	}
	return 0
}

// Round is n rounded up to the pool's block size.
func (m *Model) Round(n uint64) uint64 { return (n + m.cfg.Align - 1) / m.cfg.Align * m.cfg.Align }

// Alloc gives block id n bytes (a live id is freed first).
func (m *Model) Alloc(id int64, n uint64) {
	if m.live[id] != nil {
		m.Free(id)
	}
	n = m.Round(max(n, 1))
	var best *block
	if i := sort.Search(len(m.free), func(i int) bool { return m.free[i].size >= n }); i < len(m.free) {
		best = m.free[i]
	} else if m.cfg.Kind == VMM {
		best = m.growVMM(n)
	} else {
		best = m.growMalloc(n)
	}
	m.unfree(best)
	if best.size-n >= m.cfg.Align {
		rest := &block{addr: best.addr + n, size: best.size - n, free: true, prev: best, next: best.next, chunk: best.chunk}
		if best.next != nil {
			best.next.prev = rest
		}
		best.next, best.size = rest, n
		m.setFree(rest)
	}
	m.live[id] = best
	m.inUse += best.size
	m.inUsePeak = max(m.inUsePeak, m.inUse)
}

// Free returns block id to the pool (an unknown id is ignored) and coalesces it with free neighbours.
func (m *Model) Free(id int64) {
	b := m.live[id]
	if b == nil {
		return
	}
	delete(m.live, id)
	m.inUse -= b.size
	if n := b.next; n != nil && n.free {
		m.unfree(n)
		absorbNext(b)
	}
	if p := b.prev; p != nil && p.free {
		m.unfree(p)
		absorbNext(p)
		b = p
	}
	m.setFree(b)
}

// absorbNext merges the block after b into b.
func absorbNext(b *block) {
	n := b.next
	b.size += n.size
	b.next = n.next
	if n.next != nil {
		n.next.prev = b
	}
}

// setFree marks b free and indexes it; unfree takes it out (before its size changes) and marks it used.
func (m *Model) setFree(b *block) {
	b.free = true
	m.free = slices.Insert(m.free, m.freeAt(b), b)
}

func (m *Model) unfree(b *block) {
	i := m.freeAt(b)
	m.free = slices.Delete(m.free, i, i+1)
	b.free = false
}

// freeAt is where b is, or goes, in free.
func (m *Model) freeAt(b *block) int {
	return sort.Search(len(m.free), func(i int) bool {
		f := m.free[i]
		return f.size > b.size || f.size == b.size && f.addr >= b.addr
	})
}

func (m *Model) grew(n uint64) {
	m.held += n
	m.heldPeak = max(m.heldPeak, m.held)
}

func (m *Model) growMalloc(n uint64) *block {
	size := max(n, m.cfg.Step)
	c := &chunk{base: m.nextBase, size: size}
	m.nextBase += (size + m.cfg.Step) / m.cfg.Step * m.cfg.Step
	c.first = &block{addr: c.base, size: size, chunk: c}
	m.setFree(c.first)
	m.chunks = append(m.chunks, c)
	m.grew(size)
	return c.first
}

func last(c *chunk) *block {
	b := c.first
	for b != nil && b.next != nil {
		b = b.next
	}
	return b
}

func (m *Model) growVMM(n uint64) *block {
	seg := m.chunks[0]
	tail := last(seg)
	have := uint64(0)
	if tail != nil && tail.free {
		have = tail.size
	}
	added := (n - have + m.cfg.Step - 1) / m.cfg.Step * m.cfg.Step
	m.mapped += added
	if tail != nil && tail.free {
		m.unfree(tail)
		tail.size += added
	} else {
		b := &block{addr: seg.base + seg.size, size: added, prev: tail, chunk: seg}
		if tail != nil {
			tail.next = b
		} else {
			seg.first = b
		}
		tail = b
	}
	m.setFree(tail)
	seg.size += added
	m.grew(added)
	return tail
}

// EmptyCache is MindSpore's eager free: with VMM, the mappings inside the free block at the segment's end
// are unmapped (the one that block starts in stays when a used block shares it). No-op with Malloc.
func (m *Model) EmptyCache() {
	if m.cfg.Kind != VMM {
		return
	}
	seg := m.chunks[0]
	tail := last(seg)
	if tail == nil || !tail.free {
		return
	}
	keep := (tail.addr - seg.base + m.cfg.Step - 1) / m.cfg.Step * m.cfg.Step
	if keep >= m.mapped {
		return
	}
	m.held -= m.mapped - keep
	m.mapped, seg.size = keep, keep
	m.unfree(tail)
	if seg.base+keep > tail.addr {
		tail.size = seg.base + keep - tail.addr
		m.setFree(tail)
		return
	}
	if tail.prev != nil {
		tail.prev.next = nil
	} else {
		seg.first = nil
	}
}
