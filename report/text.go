// text.go owns the human-readable summary (`report --format text` and the end of `run`).
package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"swapagent/internal/cli"
	"swapagent/trace"
	"swapagent/tracker"
)

// faultKeys are the fault record's fields shown first, in this order (architecture.md, stats JSON).
var faultKeys = []string{"kernel", "arg", "tensor", "addr", "size", "storage", "storage_tensor", "released_by", "owner"}

// WriteText writes one block per process. Everything goes through cli.Terminal: argv, names and log
// lines come from the traced process and may hold control characters.
func WriteText(w io.Writer, sums []*Summary) error { return writeText(w, sums, true) }

// WriteRunText is WriteText for run's summary at the job's end: the memory figures in their one line, without
// the detail that qualifies the saving (`report` explains it).
func WriteRunText(w io.Writer, sums []*Summary) error { return writeText(w, sums, false) }

func writeText(w io.Writer, sums []*Summary, detail bool) error {
	bw := bufio.NewWriter(w)
	tw := cli.Terminal(bw)
	for i, s := range sums {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		writeTextOne(tw, s, detail)
	}
	return bw.Flush()
}

// lostString says how many events the gaps lost: a count where every gap's is known, else how many at least.
func lostString(gaps []trace.Gap) string {
	lost, unknown := 0, 0
	for _, g := range gaps {
		if g.Events < 0 {
			unknown++
			continue
		}
		lost += g.Events
	}
	switch {
	case unknown == len(gaps):
		return "events lost: unknown"
	case unknown > 0:
		return fmt.Sprintf("at least %d events lost", lost)
	}
	return fmt.Sprintf("%d events lost", lost)
}

func writeTextOne(w io.Writer, s *Summary, detail bool) {
	h := s.Header
	who := fmt.Sprintf("process %d", h.PID)
	if h.Rank >= 0 {
		who += fmt.Sprintf(" rank %d", h.Rank)
	}
	if h.Host != "" {
		who += " on " + h.Host
	}
	fmt.Fprintf(w, "%s: %s\n", who, argvString(h.Argv))
	note := ""
	if s.Truncated {
		note = ", ends mid-batch"
	}
	if len(s.Gaps) > 0 {
		note += fmt.Sprintf(", %d damaged batches skipped (%s)", len(s.Gaps), lostString(s.Gaps))
	}
	if len(s.Repairs) > 0 {
		n := 0
		for _, r := range s.Repairs {
			n += max(r.Blocks, 1) // damage that held no data block: one stretch
		}
		note += fmt.Sprintf(", %d damaged blocks repaired (nothing lost)", n)
	}
	if len(s.Joined) > 0 {
		note += ", another trace joined after it, not read (with all that follows it)"
	}
	if s.TraceBytes > 0 {
		note += "; " + Bytes(s.TraceBytes)
		if perEvent, perSecond := s.TraceCost(); perEvent > 0 {
			note += fmt.Sprintf(", %.1f B/event, %s/s", perEvent, Bytes(uint64(perSecond)))
		}
	}
	if s.Segments > 1 {
		note += fmt.Sprintf("; %d segments", s.Segments)
	}
	if s.FirstSegment > 0 {
		note += fmt.Sprintf("; covers +%s to +%s, the oldest %d segment(s) dropped", durString(s.FromNS),
			durString(s.EndNS), s.FirstSegment)
	}
	if l := s.Meta[trace.MetaTraceLevel]; l != "" && l != "all" {
		note += "; level " + cli.Escape(l)
	}
	fmt.Fprintf(w, "  trace: %s (%d events over %s%s)\n", cli.Escape(displayPath(s.Path)), s.NumEvents, durString(s.EndNS), note)
	if p := s.Meta[trace.MetaPolicy]; p != "" {
		fmt.Fprintf(w, "  policy: %s\n", cli.Escape(p))
	}

	fmt.Fprintf(w, "  device memory: %s\n", s.Mem.Text())
	if d := s.Mem.Detail(); detail && d != "" {
		fmt.Fprintf(w, "    saving: %s\n", d)
	}
	d := s.Device
	fmt.Fprintf(w, "  %s: %s allocated in %d calls, peak %s", s.Mem.Source, Bytes(d.AllocatedBytes), d.Allocs,
		Bytes(d.PeakBytes))
	if d.PeakBytes > 0 {
		fmt.Fprintf(w, " at +%s", durString(d.PeakAtNS))
	}
	fmt.Fprintf(w, ", %s live at end\n", Bytes(d.LiveBytes))
	if s.Reserved.Allocs > 0 {
		fmt.Fprintf(w, "  reserved address space (VMM): peak %s in %d reservations (address space, not memory)\n",
			Bytes(s.Reserved.PeakBytes), s.Reserved.Allocs)
	}
	if hp := s.HostPinned; hp.Allocs > 0 {
		fmt.Fprintf(w, "  host pinned: %s allocated in %d calls, peak %s\n", Bytes(hp.AllocatedBytes), hp.Allocs,
			Bytes(hp.PeakBytes))
	}

	st := s.Stats
	src := "from the agent's stats"
	if !s.HasStats {
		src = "derived from events"
	}
	fmt.Fprintf(w, "  swap (%s): %d storages offloaded (%s), %s restored, at most %s swapped out at once, released external %d\n",
		src, st.OffloadedStorages, Bytes(st.OffloadedBytes), Bytes(st.RestoredBytes), Bytes(s.Mem.SwappedOutPeak),
		st.ReleasedExternal)
	fmt.Fprintf(w, "  kept: %s\n", countList(st.Kept, KeepReasons[1:]))
	if g := s.Guard; g != nil {
		fmt.Fprintf(w, "  guard: %d groups moved by the job's own swap (%s); it asked %d releases: %d allowed (%s), "+
			"%d refused (%s); %d given memory back\n", len(g.Groups), cli.Escape(tracker.GroupList(g.Groups)),
			g.ReleasesAllowed+g.ReleasesKept, g.ReleasesAllowed, Bytes(g.AllowedBytes), g.ReleasesKept,
			Bytes(g.KeptBytes), g.Restores)
		holderRows(w, g.Kept, g.Released)
	}
	if h := s.Holders; h != nil {
		fmt.Fprintf(w, "  holders: the companion counted who else holds the layers' inputs\n")
		holderRows(w, h.Kept, h.Released)
	}
	if v, ok := s.Meta[trace.MetaPythonGuard]; ok {
		fmt.Fprintf(w, "  python guard: %s\n", cli.Escape(v))
	}
	if v, ok := s.Meta[trace.MetaPythonUnguarded]; ok {
		fmt.Fprintf(w, "  not guarded: %s; its releases go unasked\n", cli.Escape(v))
	}
	if v, ok := s.Meta[trace.MetaCompanionPath]; ok {
		fmt.Fprintf(w, "  companion hot path: %s\n", cli.Escape(v))
	}
	if v, ok := s.Meta[trace.MetaControlCalls]; ok {
		fmt.Fprintf(w, "  companion control calls: %s\n", cli.Escape(v))
	}
	if a := s.ABI; a.RegionEnters+a.Saves+a.Unpacks > 0 || len(a.Groups) > 0 {
		fmt.Fprintf(w, "  abi: %d groups, %d regions, %d saves, %d unpacks, %d backward; classified %s\n",
			len(a.Groups), a.RegionEnters, a.Saves, a.Unpacks, a.BackwardEnters,
			countList(a.KeepReasons, KeepReasons[:]))
	}

	all := uint64(0)
	for _, raw := range st.Faults {
		var f trace.Fault
		_ = json.Unmarshal(raw, &f) // unreadable: counted once
		all += 1 + f.Repeats
	}
	if all == uint64(len(st.Faults)) {
		fmt.Fprintf(w, "  faults: %d\n", len(st.Faults))
	} else { // the agent's ERROR SUMMARY counts the repeats too
		fmt.Fprintf(w, "  faults: %d distinct, %d with their repeats (the ERROR SUMMARY's count)\n", len(st.Faults), all)
	}
	for _, f := range faultLines(s) {
		fmt.Fprintf(w, "    %s\n", f)
	}
	if s.Lost > 0 {
		fmt.Fprintf(w, "  lost: %d runtime events dropped by the shim\n", s.Lost)
	}
	for _, l := range s.Logs {
		fmt.Fprintf(w, "  log: %s\n", cli.Escape(strings.TrimSpace(l)))
	}

	if len(s.Calls) > 0 {
		fmt.Fprintf(w, "  calls:\n")
		names := make([]string, 0, len(s.Calls))
		width := 0
		for n := range s.Calls {
			names = append(names, n)
			width = max(width, len(n))
		}
		sort.Slice(names, func(i, j int) bool {
			if s.Calls[names[i]] != s.Calls[names[j]] {
				return s.Calls[names[i]] > s.Calls[names[j]]
			}
			return names[i] < names[j]
		})
		for _, n := range names {
			fmt.Fprintf(w, "    %-*s %d\n", width, cli.Escape(n), s.Calls[n])
		}
	}
}

// faultLines renders the merged fault list, one line per fault.
func faultLines(s *Summary) []string {
	out := make([]string, 0, len(s.Stats.Faults))
	for _, raw := range s.Stats.Faults {
		out = append(out, faultText(raw))
	}
	return out
}

// faultText renders one fault record as key=value pairs: the known fields first, then the rest sorted.
// It is one line: control characters in the record are escaped.
func faultText(raw []byte) string {
	var fields map[string]any
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber() // addresses do not fit a float64
	if err := d.Decode(&fields); err != nil || fields == nil {
		return cli.Escape(string(raw))
	}
	var parts []string
	for _, k := range faultKeys {
		if v, ok := fields[k]; ok {
			parts = append(parts, k+"="+scalar(k, v))
			delete(fields, k)
		}
	}
	rest := make([]string, 0, len(fields))
	for k := range fields {
		rest = append(rest, k)
	}
	sort.Strings(rest)
	for _, k := range rest {
		parts = append(parts, cli.Escape(k)+"="+scalar(k, fields[k]))
	}
	return strings.Join(parts, " ")
}

// addrKeys are the fault record's fields that hold device addresses: shown in hex, as everywhere.
var addrKeys = map[string]bool{"addr": true, "storage": true, "base": true, "ptr": true}

func scalar(key string, v any) string {
	switch x := v.(type) {
	case string:
		if strings.ContainsAny(x, " \t\n") || x == "" {
			return strconv.Quote(x)
		}
		return cli.Escape(x)
	case json.Number:
		if n, err := strconv.ParseUint(x.String(), 10, 64); err == nil && addrKeys[key] {
			return fmt.Sprintf("%#x", n)
		}
		return x.String()
	default:
		b, _ := json.Marshal(x)
		return cli.Escape(string(b))
	}
}

func countList(m map[string]uint64, order []string) string {
	parts := make([]string, 0, len(m))
	seen := make(map[string]bool)
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		seen[k] = true
	}
	var extra []string
	for k := range m {
		if !seen[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// argvString shows argv as a shell would take it back: words with spaces, quotes or control characters
// are quoted with Go's escapes, the others are shown as they are.
func argvString(argv []string) string {
	if len(argv) == 0 {
		return "(argv unknown)"
	}
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " '\"\\$") || cli.Escape(a) != a {
			parts[i] = strconv.Quote(a)
		} else {
			parts[i] = a
		}
	}
	return strings.Join(parts, " ")
}

// durString shows a duration to about four significant digits.
func durString(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(time.Microsecond).String()
	}
	return d.String()
}

// Bytes formats a byte count with a binary unit (exact below 1 KiB).
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}

// holderRows prints the kept rows (with their holders' count where one was given) and the rows released
// because nothing but their group's saved tensors held them.
func holderRows(w io.Writer, kept, released []GuardKept) {
	for _, k := range kept {
		held := ""
		if k.Held > 0 {
			held = fmt.Sprintf("; held by %d reference(s) outside its saved tensors", k.Held)
		}
		fmt.Fprintf(w, "    kept %s%s\n", guardRow(k), held)
	}
	for _, k := range released {
		own := ""
		if len(k.Own) > 0 {
			own = " but the layer's own (" + strings.Join(k.Own, ", ") + ")"
		}
		fmt.Fprintf(w, "    released %s; no other holder%s\n", guardRow(k), own)
	}
}

// guardRow is a guard row's argument, reason, groups, saves and bytes ("args[0] (input) in swap_group_0..
// swap_group_4: 10 saves, 40.0 KiB").
func guardRow(k GuardKept) string {
	arg := k.Arg
	if arg == "" {
		arg = "(no argument)"
	}
	return fmt.Sprintf("%s (%s) in %s: %d saves, %s", cli.Escape(arg), k.Reason, cli.Escape(k.Groups), k.Saves,
		Bytes(k.Bytes))
}
