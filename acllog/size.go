// size.go owns the size explanation: it factorises a faulting tensor's byte size into plausible
// transformer tensor shapes per dtype, most likely first, and says when one is a RoPE cos/sin table.
package acllog

import (
	"fmt"
	"math/bits"
	"sort"
	"strings"
)

// Shape is one plausible shape for a byte size.
type Shape struct {
	DType string   `json:"dtype"`
	Dims  []uint64 `json:"dims"`
	Note  string   `json:"note,omitempty"` // what a tensor of this shape usually is
	RoPE  bool     `json:"rope,omitempty"`
	score int
}

// String renders "4096 x 64 float32".
func (s Shape) String() string {
	d := make([]string, len(s.Dims))
	for i, v := range s.Dims {
		d[i] = fmt.Sprint(v)
	}
	return strings.Join(d, " x ") + " " + s.DType
}

// SizeInfo explains a byte size.
type SizeInfo struct {
	Bytes    uint64            `json:"bytes"`
	Elements map[string]uint64 `json:"elements,omitempty"` // dtype -> element count, for dtypes that divide
	Shapes   []Shape           `json:"shapes,omitempty"`   // most likely first
}

type dtype struct {
	name  string
	size  uint64
	bonus int // how often a tensor of this kind is seen in this dtype (RoPE tables: float32)
}

var dtypes = []dtype{{"float32", 4, 3}, {"bf16/fp16", 2, 0}}

// Common training sequence lengths, with how likely each is.
var seqLens = []struct {
	n     uint64
	score int
}{{4096, 10}, {8192, 8}, {2048, 7}, {16384, 6}, {32768, 5}, {1024, 4}, {65536, 3}, {131072, 2}}

// RoPE rotary dims and attention head dims (DeepSeek-V3: rope 64, qk head 192, v head 128).
var ropeDims = map[uint64]int{64: 10, 128: 9, 32: 4}
var headDims = map[uint64]int{64: 8, 128: 8, 192: 6, 96: 4, 256: 5}

// Hidden sizes of common decoder configurations.
var hiddenDims = map[uint64]int{1024: 5, 2048: 6, 2560: 4, 3072: 5, 4096: 7, 5120: 6, 6144: 5, 7168: 6, 8192: 6}

const maxShapes = 6

// ExplainSize factorises n bytes into candidate shapes: [seq, dim] splits over common sequence lengths,
// labelled as RoPE tables, per-head tensors or activations, and a power-of-two split when nothing fits.
func ExplainSize(n uint64) SizeInfo {
	info := SizeInfo{Bytes: n}
	if n == 0 {
		return info
	}
	var shapes []Shape
	for _, dt := range dtypes {
		if n%dt.size != 0 {
			continue
		}
		elems := n / dt.size
		if info.Elements == nil {
			info.Elements = map[string]uint64{}
		}
		info.Elements[dt.name] = elems
		for _, sl := range seqLens {
			if elems%sl.n != 0 {
				continue
			}
			d := elems / sl.n
			sh := Shape{DType: dt.name, Dims: []uint64{sl.n, d}, score: sl.score}
			switch {
			case ropeDims[d] > 0:
				sh.RoPE = true
				sh.score += ropeDims[d] + dt.bonus + 5
				sh.Note = fmt.Sprintf("the size of one RoPE cos/sin table at seq %d, rope dim %d", sl.n, d)
			case headDims[d] > 0:
				sh.score += headDims[d]
				sh.Note = fmt.Sprintf("one attention head's [seq, head_dim] at seq %d, head dim %d", sl.n, d)
			case hiddenDims[d] > 0:
				sh.score += hiddenDims[d] - dt.bonus // activations are mostly bf16/fp16
				sh.Note = fmt.Sprintf("one sequence's hidden states at seq %d, hidden %d", sl.n, d)
			case d&(d-1) == 0:
				sh.score -= 5
			default:
				continue
			}
			shapes = append(shapes, sh)
		}
		if len(shapes) == 0 || !anyDType(shapes, dt.name) {
			if sh, ok := pow2Split(elems, dt.name); ok {
				shapes = append(shapes, sh)
			}
		}
	}
	sort.SliceStable(shapes, func(i, j int) bool { return shapes[i].score > shapes[j].score })
	if len(shapes) > maxShapes {
		shapes = shapes[:maxShapes]
	}
	info.Shapes = shapes
	return info
}

func anyDType(shapes []Shape, name string) bool {
	for _, s := range shapes {
		if s.DType == name {
			return true
		}
	}
	return false
}

// pow2Split writes elems as (odd part) x 2^a x 2^b with a and b as equal as possible.
func pow2Split(elems uint64, dt string) (Shape, bool) {
	k := uint64(bits.TrailingZeros64(elems))
	odd := elems >> k
	if k < 2 {
		return Shape{}, false
	}
	a := k / 2
	dims := []uint64{1 << (k - a), 1 << a}
	if odd > 1 {
		dims = append([]uint64{odd}, dims...)
	}
	return Shape{DType: dt, Dims: dims, score: -10}, true
}

// RoPEMatch returns the most likely RoPE shape for a size, if any.
func (s SizeInfo) RoPEMatch() (Shape, bool) {
	for _, sh := range s.Shapes {
		if sh.RoPE {
			return sh, true
		}
	}
	return Shape{}, false
}
