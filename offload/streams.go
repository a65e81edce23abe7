// streams.go owns what the engine knows of the job's runtime streams: every stream work was enqueued on,
// and when it was last used, so that a region's streams are the ones used between its enter and exit.
package offload

import (
	"slices"
	"sync"
)

// Streams records the job's streams (aclrtStream handles; 0 is the default stream). The agent feeds it
// from the launches, asynchronous copies and event calls it drains, under the agent's lock; the engine
// reads it under its own. Its lock is a leaf: nothing is called while it is held.
type Streams struct {
	mu   sync.Mutex
	tick uint64
	last map[uint64]uint64 // stream -> tick of its latest use
}

// Use notes work enqueued on stream.
func (s *Streams) Use(stream uint64) {
	s.mu.Lock()
	if s.last == nil {
		s.last = map[uint64]uint64{}
	}
	s.tick++
	s.last[stream] = s.tick
	s.mu.Unlock()
}

// Destroyed forgets a destroyed stream (the runtime drained it first).
func (s *Streams) Destroyed(stream uint64) {
	s.mu.Lock()
	delete(s.last, stream)
	s.mu.Unlock()
}

// Mark returns a point in the sequence of uses, for Since.
func (s *Streams) Mark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tick
}

// Since returns the streams used after mark, sorted; mark 0 returns every known stream.
func (s *Streams) Since(mark uint64) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []uint64
	for st, t := range s.last {
		if t > mark {
			out = append(out, st)
		}
	}
	slices.Sort(out)
	return out
}

// All returns every known stream, sorted.
func (s *Streams) All() []uint64 { return s.Since(0) }
