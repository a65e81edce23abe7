// render.go owns the explanation of each fault (address, size, causes, advice) and the text output.
package doctor

import (
	"fmt"
	"io"
	"strings"

	"swapagent/acllog"
	"swapagent/internal/cli"
	"swapagent/trace"
)

// runtimeCodes names the runtime error codes the parser picks up.
var runtimeCodes = map[int]string{
	507011: "ACL_ERROR_RT_MODEL_EXECUTE (task execution failed)",
	507015: "ACL_ERROR_RT_AICORE_EXCEPTION",
	507035: "ACL_ERROR_RT_VECTOR_CORE_EXCEPTION",
	507046: "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT",
	507053: "ACL_ERROR_RT_DEVICE_MEM_ERROR",
	507899: "ACL_ERROR_RT_DRV_INTERNAL_ERROR (context poisoned by an earlier fault)",
}

const (
	adviceSafe = "run the job unchanged under `swapagent run --policy safe -- <launch command>`: its guard makes " +
		"hyper-parallel's own swap (and swapagent's companions) keep every storage owned outside the swap wrapper " +
		"on device (module inputs, positional and keyword, outputs, parameters, storages other layers saved), " +
		"and records a trace that names the storage"
	adviceFixSwap = "or fix the swap code: protect the wrapped layer's inputs, keyword inputs included, as well " +
		"as its output (no released hyper-parallel version does: hyper-parallel issue #294 is open; MindFormers " +
		"2.1.0 works around it with a MUST_SAVE swap policy for the decoder block's inputs)"
	adviceTrace = "to confirm, rerun under `swapagent run --policy off` (records, never releases) or `--policy safe` " +
		"and run `swapagent doctor` again with the traces beside the logs"
	adviceSwapLess = "until then, swap less in this job: leave out of swap the layers or modules that receive " +
		"tensors shared across layers (such as the RoPE cos/sin tables), or swap only inside them, where no " +
		"input is shared (for example operator-level swap of self_attention.core_attention)"
)

// explain fills AddrKind, SizeInfo, Causes and Advice, most likely cause first.
func explain(f *Fault) {
	switch {
	case f.Addr == nil:
		f.AddrKind = "unknown"
	case *f.Addr == 0:
		f.AddrKind = "null"
	case nearNull(*f.Addr):
		f.AddrKind = "near-null"
	default:
		f.AddrKind = "non-null"
	}
	if f.Size != nil && *f.Size > 0 {
		si := acllog.ExplainSize(*f.Size)
		f.SizeInfo = &si
	}
	ref := f.StorageRef
	rope, isRoPE := acllog.Shape{}, false
	if f.SizeInfo != nil {
		rope, isRoPE = f.SizeInfo.RoPEMatch()
	}
	named := ref != nil && ref.ReleasedBy != ""
	external := ref != nil && ref.Owner != ""
	// The trace's own account comes first whatever the address: the block's storage and owner lines say it.
	released := func(after string) {
		c := fmt.Sprintf("storage %#x (generation %d, %d bytes) was released by %s's activation swap",
			ref.Base, ref.Generation, ref.Nbytes, ref.ReleasedBy)
		if ref.KeepReason != "" {
			c += " (classified " + ref.KeepReason + ")"
		}
		if external {
			c += " while it was still owned as " + ref.Owner + "; " + after
		} else {
			c += "; the kernel read it before it was restored"
		}
		f.Causes = append(f.Causes, c)
	}

	switch f.AddrKind {
	case "null", "near-null":
		if named {
			released("the kernel then read it with no device memory behind it")
		}
		if isRoPE {
			f.Causes = append(f.Causes, fmt.Sprintf("a tensor shared by several layers, most likely a RoPE cos/sin "+
				"table (%s: seq %d, rope dim %d) computed once and passed to every decoder layer as a keyword input, "+
				"was saved inside one layer's swap wrapper and released by its offload (storage resized to zero) "+
				"while the other layers and the backward pass still used it (activation swap that protects only "+
				"module outputs, not inputs: hyper-parallel issue #294)", rope, rope.Dims[0], rope.Dims[1]))
		}
		f.Causes = append(f.Causes,
			"a storage whose device memory was released (resized to zero, as activation swap does when it "+
				"offloads a saved tensor) was read by a kernel before it was restored: a null base"+
				nearNullNote(f)+" is what a released storage's tensors point at",
			"a tensor freed or resized to zero elsewhere (framework or user code) and still referenced by a later kernel")
	case "non-null":
		if named && ref.MatchedBy != "address" {
			released("the kernel then read its old address, memory the swap had given back")
		} else if ref != nil && ref.MatchedBy == "address" {
			f.Causes = append(f.Causes, fmt.Sprintf("the address lies in storage %#x (generation %d, %d bytes), "+
				"released by %s's activation swap: a use after release, possibly of an address already reused "+
				"by a newer storage", ref.Base, ref.Generation, ref.Nbytes, orUnknown(ref.ReleasedBy)))
		}
		f.Causes = append(f.Causes,
			"a use after free: the kernel read device memory that was freed (or released by swap) and possibly "+
				"reused by a newer allocation",
			"an out-of-range access: the tensor's view (shape, strides, offset) reaches past its storage")
	default:
		if f.Record != nil && len(f.Record.Codes) == 1 && f.Record.Codes[0] == 507899 {
			f.Causes = append(f.Causes, "a later runtime call failed on a context poisoned by an earlier fault: "+
				"look for the first fault of this rank (or of another rank)")
		}
		f.Causes = append(f.Causes, "a kernel failed and the stream sync reported it, but this log has no fault "+
			"dump (kernel, address, size): look in the device logs (plog; ASCEND_SLOG_PRINT_TO_STDOUT=1 puts them in the "+
			"worker log)")
	}

	if f.AddrKind != "non-null" || named {
		f.Advice = append(f.Advice, adviceSafe, adviceFixSwap)
	}
	if ref == nil {
		f.Advice = append(f.Advice, adviceTrace)
	}
	if f.AddrKind == "null" || f.AddrKind == "near-null" {
		f.Advice = append(f.Advice, adviceSwapLess)
	}
	if f.AddrKind == "non-null" && !named {
		f.Advice = append(f.Advice, "check the kernel's input shapes and the lifetime of the tensor at that index; "+
			"run with ASCEND_LAUNCH_BLOCKING=1 to stop at the first failing kernel")
	}
}

// renderTraces says which trace was used and why others were not, and what else the agent caught.
func (f *Fault) renderTraces(w io.Writer) {
	var t []string
	if f.Time != nil {
		t = append(t, "at "+clock(*f.Time))
	}
	if len(f.LogPIDs) > 0 {
		t = append(t, pidList(f.LogPIDs))
		if len(f.LogPIDs) == 1 {
			t[len(t)-1] = "pid " + t[len(t)-1]
		}
	}
	logged := ""
	if len(t) > 0 && f.Source == "log" {
		logged = " (logged " + strings.Join(t, ", ") + ")"
	}
	switch {
	case f.Trace != "" && f.Source == "log":
		fmt.Fprintf(w, "  trace:   %s%s\n", f.Trace, traceWho(f.TracesChecked, f.Trace))
	case len(f.TracesChecked) > 0:
		fmt.Fprintf(w, "  trace:   none used: no trace fits this log's process%s; looked at %d:\n", logged, len(f.TracesChecked))
		for _, c := range f.TracesChecked {
			fmt.Fprintf(w, "             %s%s: %s\n", c.Trace, checkWho(c), c.Why)
		}
	}
	if len(f.AgentFaults) > 0 {
		fmt.Fprintf(w, "  agent:   also caught in this process (trace only, not in the log):\n")
		for _, a := range f.AgentFaults {
			fmt.Fprintf(w, "             %s\n", agentFaultText(a))
		}
		if f.Note != "" {
			fmt.Fprintf(w, "             (%s)\n", f.Note)
		}
	}
}

// detectedWords says how the agent caught a fault (the record's "detected").
var detectedWords = map[string]string{
	"launch": "caught at launch, before the kernel ran",
	"race":   "caught at launch while the agent was still copying the storage",
	"sync":   "caught at the failed sync",
}

func traceWho(checks []TraceCheck, path string) string {
	for _, c := range checks {
		if c.Trace == path {
			return checkWho(c) + ": same pid, rank and time as the log"
		}
	}
	return ""
}

func checkWho(c TraceCheck) string {
	s := fmt.Sprintf(" (pid %d", c.PID)
	if c.Host != "" {
		s += " on " + c.Host
	}
	if c.Rank >= 0 {
		s += fmt.Sprintf(", rank %d", c.Rank)
	}
	return s + ")"
}

// agentFaultText is one of the agent's fault records in a line: where it was caught and what it found.
func agentFaultText(a trace.Fault) string {
	var s string
	switch {
	case isRegion(a) && a.Arg != "":
		s = a.Kernel + ": the region input " + a.Arg
		if a.Tensor != "" {
			s += " (" + a.Tensor + ")"
		}
	case isRegion(a):
		s = a.Kernel + ": a region input"
	case detectedWords[a.Detected] != "":
		s = fmt.Sprintf("%s (%s)", orUnknown(a.Kernel), detectedWords[a.Detected])
	case a.Detected != "":
		s = fmt.Sprintf("%s (caught at %s)", orUnknown(a.Kernel), a.Detected)
	default:
		s = orUnknown(a.Kernel)
	}
	if a.TensorIndex >= 0 {
		s += fmt.Sprintf(", tensor %d", a.TensorIndex)
	}
	s += fmt.Sprintf(" at %#x", uint64(a.Addr))
	if a.Size > 0 {
		s += fmt.Sprintf(", %d bytes", uint64(a.Size))
	}
	if b := a.Storage.Addr(); b != 0 {
		s += fmt.Sprintf(", storage %#x", b)
	}
	if a.ReleasedBy != "" {
		s += ", released by " + a.ReleasedBy
	}
	if a.Repeats > 0 {
		s += fmt.Sprintf(" (and %d more times)", a.Repeats)
	}
	return s
}

func nearNullNote(f *Fault) string {
	if f.AddrKind == "near-null" {
		return fmt.Sprintf(" (plus a view offset of %d bytes)", *f.Addr)
	}
	return ""
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown group"
	}
	return s
}

// Render prints the diagnosis as text. Everything goes through cli.Terminal: log lines and trace
// contents may hold control characters. It returns the first write that failed.
func (r *Result) Render(out io.Writer) error {
	w := cli.Terminal(out)
	if !r.Diagnosed() {
		switch {
		case len(r.Logs) > 0:
			fmt.Fprintf(w, "no null-address or aicore faults found in %d logs\n", len(r.Logs))
		case len(r.Traces) == r.tracesFound:
			fmt.Fprintf(w, "no null-address or aicore faults found in %s (no job logs)\n", plural(len(r.Traces), "trace"))
		default: // what was lost is in the notes
			fmt.Fprintf(w, "no null-address or aicore faults found in %d of %s (no job logs; %d could not be read)\n",
				len(r.Traces), plural(r.tracesFound, "trace"), r.tracesFound-len(r.Traces))
		}
		r.renderNotes(w)
		return cli.WriteErr(w)
	}
	n := 0
	for _, f := range r.Faults {
		n += max(f.Count, 1)
	}
	fmt.Fprintf(w, "swapagent doctor: %s under %s", plural(n, "fault"), r.Dir)
	switch {
	case len(r.Logs) == 0:
		fmt.Fprintf(w, ", from %s alone (no job logs)", plural(len(r.Traces), "trace"))
	case len(r.Traces) > 0:
		fmt.Fprintf(w, ", in %s and %s", plural(len(r.Logs), "log"), plural(len(r.Traces), "trace"))
	default:
		fmt.Fprintf(w, ", in %s", plural(len(r.Logs), "log"))
	}
	if len(r.Faults) != n {
		fmt.Fprintf(w, "; %s of one cause each", plural(len(r.Faults), "block"))
	}
	fmt.Fprintln(w)
	sizes := map[uint64]bool{} // sizes whose table a block above printed
	for i := range r.Faults {
		fmt.Fprintln(w)
		r.Faults[i].render(w, sizes)
	}
	r.renderNotes(w)
	return cli.WriteErr(w)
}

// plural is "1 fault", "3 faults".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func (r *Result) renderNotes(w io.Writer) {
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func (f *Fault) render(w io.Writer, sizes map[uint64]bool) {
	who := "unknown rank"
	if f.Rank >= 0 {
		who = fmt.Sprintf("rank %d", f.Rank)
	}
	where := f.Log
	if f.Line > 0 {
		where = fmt.Sprintf("%s:%d", f.Log, f.Line)
	}
	what := "fault"
	if rec := f.Record; rec != nil && rec.AICore {
		what = "aicore exception"
	} else if rec != nil && rec.VectorCore {
		what = "vector core exception"
	} else if f.Source == "trace" {
		what = "fault caught by the agent"
	}
	fmt.Fprintf(w, "%s (%s): %s", who, where, what)
	switch {
	case f.Kernel == "":
	case isRegion(trace.Fault{Kernel: f.Kernel, Detected: f.Detected}):
		fmt.Fprintf(w, " at %s (a swap region's entry, before any kernel)", f.Kernel)
	default:
		fmt.Fprintf(w, " in kernel %s", f.Kernel)
	}
	if f.Op != "" {
		fmt.Fprintf(w, " (op %s)", f.Op)
	}
	if f.Count > 1 {
		fmt.Fprintf(w, ", and %d more of this cause", f.Count-1)
	}
	fmt.Fprintln(w)
	if f.Note != "" && f.Source == "trace" {
		fmt.Fprintf(w, "  note:    %s\n", f.Note)
	}

	if rec := f.Record; rec != nil {
		var parts []string
		if rec.ErrorCode != "" {
			parts = append(parts, "error code "+rec.ErrorCode)
		}
		if rec.ErrorStr != "" {
			parts = append(parts, rec.ErrorStr)
		}
		if rec.SubErrType != "" {
			parts = append(parts, "subErrType "+rec.SubErrType)
		}
		if rec.RetCode != "" {
			parts = append(parts, "retCode "+rec.RetCode)
		}
		for _, c := range rec.Codes {
			if n, ok := runtimeCodes[c]; ok {
				parts = append(parts, fmt.Sprintf("%d %s", c, n))
			} else {
				parts = append(parts, fmt.Sprint(c))
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "  error:   %s\n", strings.Join(parts, "; "))
		}
		if rec.PythonError != "" {
			fmt.Fprintf(w, "  python:  %s\n", rec.PythonError)
		}
	}
	var t []string
	if f.TensorIndex != nil {
		t = append(t, fmt.Sprintf("index %d", *f.TensorIndex))
	}
	if f.Addr != nil {
		t = append(t, fmt.Sprintf("addr %#x (%s)", *f.Addr, f.AddrKind))
	}
	if f.Size != nil {
		t = append(t, fmt.Sprintf("size %d bytes", *f.Size))
	}
	if len(t) > 0 {
		fmt.Fprintf(w, "  tensor:  %s\n", strings.Join(t, ", "))
	}
	ref := f.StorageRef
	switch si := f.SizeInfo; {
	case si != nil && ref != nil && ref.Tensor != "" && ref.Nbytes == si.Bytes:
		// The companion described the storage: no guess from its size.
		fmt.Fprintf(w, "  size:    %d bytes = %s (as the framework described the storage)\n", si.Bytes, ref.Tensor)
	case si != nil && len(si.Shapes) == 1:
		top := si.Shapes[0]
		line := fmt.Sprintf("%d bytes", si.Bytes)
		if n, ok := si.Elements[top.DType]; ok {
			line += fmt.Sprintf(" = %d %s elements", n, top.DType)
		}
		line += " = " + top.String()
		if top.Note != "" {
			line += ": " + top.Note
		}
		fmt.Fprintf(w, "  size:    %s (guessed from the size)\n", line)
	case si != nil && len(si.Shapes) > 1 && sizes[si.Bytes]:
		fmt.Fprintf(w, "  size:    %d bytes (the shapes it may be: above)\n", si.Bytes)
	case si != nil && len(si.Shapes) > 1:
		sizes[si.Bytes] = true
		// Several shapes fit: say so, rather than present the first as the answer.
		var elems []string
		for _, dt := range []string{"float32", "bf16/fp16"} {
			if n, ok := si.Elements[dt]; ok {
				elems = append(elems, fmt.Sprintf("%d %s", n, dt))
			}
		}
		line := fmt.Sprintf("%d bytes", si.Bytes)
		if len(elems) > 0 {
			line += " (" + strings.Join(elems, " or ") + " elements)"
		}
		fmt.Fprintf(w, "  size:    %s, guessed from the size as one of (most likely first):\n", line)
		for _, sh := range si.Shapes {
			l := sh.String()
			if sh.Note != "" {
				l += ": " + sh.Note
			}
			fmt.Fprintf(w, "             %s\n", l)
		}
	}
	if ref != nil {
		s := fmt.Sprintf("%#x generation %d, %d bytes", ref.Base, ref.Generation, ref.Nbytes)
		if ref.Tensor != "" {
			s += " (" + ref.Tensor + ")"
		}
		if ref.Handle != 0 { // 0: the agent's record did not say
			s += fmt.Sprintf(", handle %d", ref.Handle)
		}
		if ref.ReleasedBy != "" {
			s += ", released by " + ref.ReleasedBy
		}
		if ref.KeepReason != "" {
			s += " (classified " + ref.KeepReason + ")"
		}
		fmt.Fprintf(w, "  storage: %s\n", s)
		if ref.Owner != "" {
			fmt.Fprintf(w, "  owner:   %s\n", ref.Owner)
		}
		src := "matched by " + ref.MatchedBy
		if ref.Others > 0 {
			src += fmt.Sprintf("; %d other released storages have the same size", ref.Others)
		}
		fmt.Fprintf(w, "           (%s in %s)\n", src, ref.Trace)
	}
	for _, a := range f.Also {
		fmt.Fprintf(w, "  also:    %s\n", a)
	}
	f.renderTraces(w)
	if len(f.Causes) > 0 {
		fmt.Fprintln(w, "  cause (most likely first):")
		for i, c := range f.Causes {
			fmt.Fprintf(w, "    %d. %s\n", i+1, c)
		}
	}
	if len(f.Advice) > 0 {
		fmt.Fprintln(w, "  what to do:")
		for _, a := range f.Advice {
			fmt.Fprintf(w, "    - %s\n", a)
		}
	}
}
