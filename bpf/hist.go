// hist.go owns reading a log2 latency histogram: mean, quantiles and the text rendering
// `swapagent probe` prints.
package bpf

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Mean is the average latency of one call, 0 without calls.
func (s Stats) Mean() time.Duration {
	if s.Calls == 0 {
		return 0
	}
	return s.Total / time.Duration(s.Calls)
}

// Quantile returns an upper bound of the q-quantile (0 < q <= 1): the top of the log2 bucket it falls
// in, so it is at most twice the true value. 0 without calls.
func (s Stats) Quantile(q float64) time.Duration {
	var n uint64
	for _, c := range s.Buckets {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.5)
	rank = max(rank, 1)
	var seen uint64
	for i, c := range s.Buckets {
		seen += c
		if seen >= rank {
			return bucketTop(i)
		}
	}
	return bucketTop(NBuckets - 1)
}

func bucketTop(i int) time.Duration { return time.Duration(uint64(2) << i) }

// Write renders each function's figures and, for functions that were called, its histogram.
func Write(w io.Writer, stats []Stats) {
	for _, s := range stats {
		if s.Calls == 0 {
			fmt.Fprintf(w, "%s: calls 0\n", s.Func.Demangled)
			continue
		}
		fmt.Fprintf(w, "%s: calls %d, total %v, mean %v, p50 <= %v, p99 <= %v\n",
			s.Func.Demangled, s.Calls, s.Total, s.Mean(), s.Quantile(0.50), s.Quantile(0.99))
		lo, hi := -1, -1
		var most uint64
		for i, c := range s.Buckets {
			if c > 0 {
				if lo < 0 {
					lo = i
				}
				hi = i
				most = max(most, c)
			}
		}
		for i := lo; lo >= 0 && i <= hi; i++ {
			c := s.Buckets[i]
			bar := int((c*40 + most - 1) / most)
			fmt.Fprintf(w, "  %10v .. %-10v %8d |%-40s|\n", bucketTop(i)/2, bucketTop(i), c, strings.Repeat("*", bar))
		}
	}
}
