package trace

import (
	"fmt"
	"strconv"
	"strings"
)

// Tensor is what a framework companion says of the tensor behind a storage pointer (SWAPAGENT_CALL_DESCRIBE,
// SWAPAGENT_CALL_REGION_ENTER): where it sits in the call's arguments, its element type and its shape.
// Its wire form, in the ABI and in a trace event's Text, is one line "PATH\tDTYPE\tSHAPE", SHAPE the
// dimensions comma-separated ("32,1,1,16"; empty for a scalar). An empty Path means a tensor that is no
// argument of the call (an activation saved for backward).
type Tensor struct {
	Path  string  // "args[0]", "rotary_cos_sin[0]", "batch['mask']"; empty when none
	DType string  // the framework's name: "float32", "bfloat16", "int64"
	Shape []int64 // nil for a scalar
}

// Limits of a tensor description: enough for any real argument path, bounded so a caller's mistake
// cannot fill the trace.
const (
	MaxTensorPath = 256
	MaxTensorDims = 16
	maxDTypeLen   = 32
)

// ParseTensor reads the wire form. An empty string is the zero Tensor (nothing known). It runs for every
// tensor a companion describes, each step: the fields are cut in place and only the shape is allocated.
func ParseTensor(s string) (Tensor, error) {
	if s == "" {
		return Tensor{}, nil
	}
	path, rest, ok1 := strings.Cut(s, "\t")
	dtype, shape, ok2 := strings.Cut(rest, "\t")
	if !ok1 || !ok2 || strings.IndexByte(shape, '\t') >= 0 {
		return Tensor{}, fmt.Errorf("tensor %q: want PATH<tab>DTYPE<tab>SHAPE", s)
	}
	t := Tensor{Path: path, DType: dtype}
	switch {
	case len(t.Path) > MaxTensorPath:
		return Tensor{}, fmt.Errorf("tensor path of %d bytes (at most %d)", len(t.Path), MaxTensorPath)
	case printable(t.Path) != nil:
		return Tensor{}, fmt.Errorf("tensor path %q: %v", t.Path, printable(t.Path))
	case len(t.DType) > maxDTypeLen || strings.ContainsAny(t.DType, " ,[]") || printable(t.DType) != nil:
		return Tensor{}, fmt.Errorf("tensor dtype %q is not a type name", t.DType)
	}
	if shape == "" {
		return t, nil
	}
	n := strings.Count(shape, ",") + 1
	if n > MaxTensorDims {
		return Tensor{}, fmt.Errorf("tensor shape of %d dimensions (at most %d)", n, MaxTensorDims)
	}
	t.Shape = make([]int64, n)
	for i, rest := 0, shape; i < n; i++ {
		var d string
		d, rest, _ = strings.Cut(rest, ",")
		v, err := strconv.ParseInt(strings.TrimSpace(d), 10, 64)
		if err != nil || v < 0 {
			return Tensor{}, fmt.Errorf("tensor shape %q: dimension %q is not a size", shape, d)
		}
		t.Shape[i] = v
	}
	return t, nil
}

func printable(s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("holds a control character")
		}
	}
	return nil
}

// Wire is the one-line form ParseTensor reads.
func (t Tensor) Wire() string {
	if !t.Known() && t.Path == "" {
		return ""
	}
	dims := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		dims[i] = strconv.FormatInt(d, 10)
	}
	return t.Path + "\t" + t.DType + "\t" + strings.Join(dims, ",")
}

// Known says whether the element type (and so the shape) was told.
func (t Tensor) Known() bool { return t.DType != "" }

// String is the type and shape as people read them: "float32 [32, 1, 1, 16]"; empty when not Known.
func (t Tensor) String() string {
	if !t.Known() {
		return ""
	}
	dims := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		dims[i] = strconv.FormatInt(d, 10)
	}
	return t.DType + " [" + strings.Join(dims, ", ") + "]"
}

// Bytes is the tensor's size from its shape and element type, 0 when the type's size is not known.
func (t Tensor) Bytes() uint64 {
	size := dtypeBytes[strings.TrimPrefix(strings.TrimPrefix(t.DType, "torch."), "mindspore.")]
	n := uint64(size)
	for _, d := range t.Shape {
		n *= uint64(d)
	}
	return n
}

// dtypeBytes: element sizes of the type names torch and MindSpore print.
var dtypeBytes = map[string]int{
	"float64": 8, "double": 8, "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
	"int64": 8, "long": 8, "int32": 4, "int": 4, "int16": 2, "short": 2, "int8": 1, "uint8": 1,
	"bool": 1, "complex64": 8, "complex128": 16, "uint16": 2, "uint32": 4, "uint64": 8,
	"float8_e4m3fn": 1, "float8_e5m2": 1,
}

// JoinTensors is the Text of an event that describes its Ptrs: one wire line per pointer.
func JoinTensors(ts []Tensor) string {
	known := false
	lines := make([]string, len(ts))
	for i, t := range ts {
		lines[i] = t.Wire()
		known = known || lines[i] != ""
	}
	if !known {
		return ""
	}
	return strings.Join(lines, "\n")
}

// SplitTensors reads JoinTensors's text back for n pointers; a damaged line reads as the zero Tensor
// (a description helps a report, it never stops one).
func SplitTensors(text string, n int) []Tensor {
	out := make([]Tensor, n)
	if text == "" {
		return out
	}
	for i, line := range strings.SplitN(text, "\n", n+1) {
		if i >= n {
			break
		}
		if t, err := ParseTensor(line); err == nil {
			out[i] = t
		}
	}
	return out
}
