package trace

import (
	"reflect"
	"testing"
)

func TestTensorWireRoundTrip(t *testing.T) {
	cases := []struct {
		wire  string
		want  Tensor
		human string
		bytes uint64
	}{
		{"rotary_cos_sin[0]\tfloat32\t32,1,1,16", Tensor{"rotary_cos_sin[0]", "float32", []int64{32, 1, 1, 16}},
			"float32 [32, 1, 1, 16]", 2048},
		{"\ttorch.bfloat16\t2,64", Tensor{"", "torch.bfloat16", []int64{2, 64}}, "torch.bfloat16 [2, 64]", 256},
		{"args[0]\tint64\t", Tensor{"args[0]", "int64", nil}, "int64 []", 8},
		{"batch['mask']\tmystery\t4", Tensor{"batch['mask']", "mystery", []int64{4}}, "mystery [4]", 0},
	}
	for _, c := range cases {
		got, err := ParseTensor(c.wire)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseTensor(%q) = %+v, %v; want %+v", c.wire, got, err, c.want)
			continue
		}
		if got.Wire() != c.wire || got.String() != c.human || got.Bytes() != c.bytes {
			t.Errorf("%q: wire %q, string %q, bytes %d; want %q, %q, %d", c.wire, got.Wire(), got.String(),
				got.Bytes(), c.wire, c.human, c.bytes)
		}
	}
}

func TestTensorRefusesBadDescriptions(t *testing.T) {
	long := make([]byte, MaxTensorPath+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, bad := range []string{
		"no tabs", "a\tb", "a\tb\tc\td", "x\tfloat32\t3,-1", "x\tfloat32\t3,x", "x\tfloat 32\t1",
		"x\x01y\tfloat32\t1", string(long) + "\tfloat32\t1", "x\tfloat32\t1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1",
	} {
		if _, err := ParseTensor(bad); err == nil {
			t.Errorf("ParseTensor(%q) accepted", bad)
		}
	}
}

func TestJoinSplitTensors(t *testing.T) {
	ts := []Tensor{{}, {"position_embeddings[0]", "float32", []int64{1, 1, 32, 16}}, {}}
	text := JoinTensors(ts)
	if got := SplitTensors(text, 3); !reflect.DeepEqual(got, ts) {
		t.Errorf("SplitTensors(JoinTensors) = %+v, want %+v", got, ts)
	}
	if JoinTensors([]Tensor{{}, {}}) != "" {
		t.Error("nothing known must write no text")
	}
	// A damaged line reads as nothing known, the others still read.
	got := SplitTensors("bad\nx\tfloat32\t2", 3)
	if got[0].Known() || got[1].DType != "float32" || got[2].Known() {
		t.Errorf("damaged text read as %+v", got)
	}
}

// BenchmarkParseTensor: a description as the companions send one per saved storage, each step.
func BenchmarkParseTensor(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := ParseTensor("rotary_cos_sin[0]\tfloat32\t32,1,1,16"); err != nil {
			b.Fatal(err)
		}
	}
}
