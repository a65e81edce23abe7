// logmeta.go owns what a log says about the process that wrote it: its pid (the runtime's
// `RUNTIME(<pid>,...)` prefix, else MindSpore's `ME(<pid>:...)`) and when each fault was logged (the
// `2026-01-01-10:01:15.456.535` stamp both put on every line, in the node's local time). doctor uses
// them to tell which trace belongs to which log (match.go).
package doctor

import (
	"bufio"
	"io"
	"regexp"
	"sort"
	"strconv"
	"time"

	"swapagent/acllog"
	"swapagent/trace"
)

var (
	reRuntimePID = regexp.MustCompile(`RUNTIME\((\d{1,10}),`)
	reMEPID      = regexp.MustCompile(`\bME\((\d{1,10}):`)
	reLogTime    = regexp.MustCompile(`\b(\d{4})-(\d{2})-(\d{2})-(\d{2}):(\d{2}):(\d{2})\.(\d{3})\.(\d{3})`)
)

// maxPIDs bounds the pids kept per log (a log that interleaves many processes names none reliably).
const maxPIDs = 8

// logMeta is what one log says about its process.
type logMeta struct {
	pids        []int     // from RUNTIME lines, else from ME lines; sorted
	first, last time.Time // first and last time stamp; zero when the log has none
	recTimes    map[int]time.Time
}

// scanLogMeta reads the log at path once more for pids and times; recTimes maps each record's first
// line to the first time stamped inside it (else the last one before it).
func scanLogMeta(path string, recs []acllog.Record) (*logMeta, error) {
	f, err := trace.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := &logMeta{recTimes: map[int]time.Time{}}
	runtime, me := map[int]bool{}, map[int]bool{}
	sorted := append([]acllog.Record(nil), recs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Line < sorted[j].Line })
	ri := 0
	var lastBefore time.Time
	br := bufio.NewReaderSize(f, 64<<10)
	for n := 1; ; n++ {
		line, err := readLine(br)
		if len(line) > 0 {
			addPID(runtime, reRuntimePID, line)
			addPID(me, reMEPID, line)
			if t, ok := lineTime(line); ok {
				if m.first.IsZero() {
					m.first = t
				}
				m.last = t
				for ri < len(sorted) && max(sorted[ri].LastLine, sorted[ri].Line) < n {
					if _, ok := m.recTimes[sorted[ri].Line]; !ok && !lastBefore.IsZero() {
						m.recTimes[sorted[ri].Line] = lastBefore
					}
					ri++
				}
				if ri < len(sorted) && sorted[ri].Line <= n {
					if _, ok := m.recTimes[sorted[ri].Line]; !ok {
						m.recTimes[sorted[ri].Line] = t
					}
				} else {
					lastBefore = t
				}
			}
		}
		if err != nil {
			break
		}
	}
	for ; ri < len(sorted); ri++ {
		if _, ok := m.recTimes[sorted[ri].Line]; !ok && !lastBefore.IsZero() {
			m.recTimes[sorted[ri].Line] = lastBefore
		}
	}
	pids := runtime
	if len(pids) == 0 {
		pids = me
	}
	for p := range pids {
		m.pids = append(m.pids, p)
	}
	sort.Ints(m.pids)
	return m, nil
}

// readLine returns the next line without its newline, cut to acllog.MaxLineBytes; an error (io.EOF)
// after the last one.
func readLine(br *bufio.Reader) (string, error) {
	var out []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if len(out) < acllog.MaxLineBytes {
			out = append(out, chunk[:min(len(chunk), acllog.MaxLineBytes-len(out))]...)
		}
		if err != nil {
			if err == io.EOF && len(out) > 0 {
				return string(out), nil
			}
			return string(out), err
		}
		if !isPrefix {
			return string(out), nil
		}
	}
}

func addPID(set map[int]bool, re *regexp.Regexp, line string) {
	if len(set) >= maxPIDs {
		return
	}
	if m := re.FindStringSubmatch(line); m != nil {
		if v, err := strconv.Atoi(m[1]); err == nil && v > 0 {
			set[v] = true
		}
	}
}

// lineTime parses the runtime's and MindSpore's time stamp, in the local time zone (the node's: doctor
// is expected to run where the job ran, or with TZ set to the job's zone).
func lineTime(line string) (time.Time, bool) {
	m := reLogTime.FindStringSubmatch(line)
	if m == nil {
		return time.Time{}, false
	}
	v := make([]int, 8)
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	if v[1] < 1 || v[1] > 12 || v[2] < 1 || v[2] > 31 || v[3] > 23 || v[4] > 59 || v[5] > 60 {
		return time.Time{}, false
	}
	return time.Date(v[0], time.Month(v[1]), v[2], v[3], v[4], v[5], v[6]*1e6+v[7]*1e3, time.Local), true
}
