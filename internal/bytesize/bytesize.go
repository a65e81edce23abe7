// Package bytesize reads the byte counts users write, the same way everywhere (SWAPAGENT_MIN_BYTES,
// SWAPAGENT_TRACE_LIMIT, replay --min-bytes): digits, then optionally K, M, G or T with an optional "iB"
// or "B", powers of 1024 either way (64K, 64KiB and 64KB are 65536; 2M is 2 MiB). A bare number is bytes.
// With a unit, the digits may have a decimal fraction of up to 6 digits (1.5G is 1610612736), rounded
// down to a whole byte; a bare number may not (bytes are whole).
package bytesize

import (
	"errors"
	"strconv"
	"strings"
)

// Parse reads a byte count; false for anything else (a sign, a fraction without a unit or of more than 6
// digits, an unknown unit, an overflow).
func Parse(v string) (uint64, bool) {
	s := strings.ToUpper(strings.TrimSpace(v))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "B"), "I")
	shift := 0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift > 0 {
			s = s[:n-1]
		}
	}
	s, frac, dot := strings.Cut(s, ".")
	if s == "" || s[0] < '0' || s[0] > '9' { // ParseUint would take "+1"
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > (1<<62)>>shift {
		return 0, false
	}
	n <<= shift
	if dot {
		if shift == 0 || frac == "" || len(frac) > 6 || frac[0] < '0' || frac[0] > '9' {
			return 0, false
		}
		f, err := strconv.ParseUint(frac, 10, 64)
		if err != nil {
			return 0, false
		}
		scale := uint64(1)
		for range frac {
			scale *= 10
		}
		n += f << shift / scale // f < 10^6, shift <= 40: no overflow
	}
	return n, true
}

// Flag is a pflag.Value holding a byte count read by Parse.
type Flag struct{ N uint64 }

// String is the count in bytes.
func (f *Flag) String() string { return strconv.FormatUint(f.N, 10) }

// Set reads v with Parse.
func (f *Flag) Set(v string) error {
	n, ok := Parse(v)
	if !ok {
		return errSyntax
	}
	f.N = n
	return nil
}

// Type is the placeholder help shows.
func (f *Flag) Type() string { return "BYTES" }

var errSyntax = errors.New("not a byte count (64K, 64KiB, 2M, 1.5G, or a number of bytes)")
