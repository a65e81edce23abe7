package bytesize

import "testing"

func TestParse(t *testing.T) {
	for v, want := range map[string]uint64{"0": 0, "1024": 1024, "64K": 65536, "64KiB": 65536, "64kb": 65536,
		"\t2M\n": 2 << 20, "1G": 1 << 30, "1GiB": 1 << 30, "3T": 3 << 40, "1.5G": 3 << 29, "1.5GiB": 3 << 29,
		"0.25M": 1 << 18, "2.000001K": 2048} {
		if got, ok := Parse(v); !ok || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "garbage", "-1", "+1", "1.5", "1.M", "1.+5M", "1.-5M", "1.5.5M", "1.1234567G", "64X", "K", "99999999999999999999", "16777216T"} {
		if got, ok := Parse(v); ok {
			t.Errorf("Parse(%q) = %d; want refused", v, got)
		}
	}
}
