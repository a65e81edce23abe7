// pool.go owns the host buffer pool: pinned buffers are expensive to allocate, and a training step saves
// the same sizes every step, so buffers are kept per size class and reused.
package offload

import "math/bits"

type pool struct {
	free   map[uint64][]HostBuf
	allocs uint64 // buffers obtained from the mover
	reuses uint64 // requests served from the free lists
	bytes  uint64 // bytes held (free and in use)
	inUse  uint64
}

// sizeClass rounds n up to one of 8 classes per power of two (at most 12.5% waste), minimum 4 KiB.
func sizeClass(n uint64) uint64 {
	if n <= 4096 {
		return 4096
	}
	step := uint64(1) << (bits.Len64(n-1) - 4) // n in (2^k, 2^(k+1)]: step 2^(k-3)
	return (n + step - 1) / step * step
}

func (p *pool) get(m Mover, n uint64) (HostBuf, error) {
	c := sizeClass(n)
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[c] = l[:len(l)-1]
		p.reuses++
		p.inUse++
		return b, nil
	}
	b, err := m.AllocHost(c)
	if err != nil {
		return HostBuf{}, err
	}
	b.Size = c
	p.allocs++
	p.bytes += c
	p.inUse++
	return b, nil
}

func (p *pool) put(b HostBuf) {
	if b.Addr == 0 {
		return
	}
	if p.free == nil {
		p.free = map[uint64][]HostBuf{}
	}
	p.free[b.Size] = append(p.free[b.Size], b)
	p.inUse--
}

// drain frees every idle buffer through the mover.
func (p *pool) drain(m Mover) error {
	var first error
	for c, l := range p.free {
		for _, b := range l {
			if err := m.FreeHost(b); err != nil && first == nil {
				first = err
			}
			p.bytes -= b.Size
		}
		delete(p.free, c)
	}
	return first
}
