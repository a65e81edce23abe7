// Package tracetest builds synthetic traces for tests: events in the order the agent writes them (a
// function or group named by KindFunc or KindGroup before its first use, the clock advancing with every
// event), and trace files written with the real writer.
package tracetest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"swapagent/trace"
)

// Builder accumulates the events of one trace.
type Builder struct {
	Events []trace.Event
	TID    uint32 // the thread stamped on events that name none
	Tick   int64  // nanoseconds the clock advances before each event
	TS     int64  // the clock: the last event's timestamp

	fns    map[string]uint16
	groups map[string]uint32
	nextH  int64
}

// New returns an empty Builder: thread 100, one microsecond between events, handles from 1.
func New() *Builder {
	return &Builder{TID: 100, Tick: 1000, fns: map[string]uint16{}, groups: map[string]uint32{}, nextH: 1}
}

// Header is a header for a synthetic trace: pid 4242 on host "test", no rank.
func Header() trace.Header {
	return trace.Header{Version: trace.Version, PID: 4242, Host: "test", Rank: -1, StartUnix: 1_700_000_000_000_000_000,
		Argv: []string{"decoder-sim", "--steps", "1"}}
}

// Add appends ev at the next tick of the clock, on the Builder's thread unless ev names one. The
// returned event may be changed until the next Add.
func (b *Builder) Add(ev trace.Event) *trace.Event {
	b.TS += b.Tick
	ev.TS = b.TS
	if ev.TID == 0 {
		ev.TID = b.TID
	}
	b.Events = append(b.Events, ev)
	return &b.Events[len(b.Events)-1]
}

// Fn is the id of a runtime function, named by a KindFunc event on first use (ids from 1).
func (b *Builder) Fn(name string) uint16 {
	return named(b, b.fns, name, func(id uint16) trace.Event { return trace.Event{Kind: trace.KindFunc, Fn: id} })
}

// Group is the id of a group, named by a KindGroup event on first use (ids from 1).
func (b *Builder) Group(name string) uint32 {
	return named(b, b.groups, name, func(id uint32) trace.Event { return trace.Event{Kind: trace.KindGroup, Group: id} })
}

// named returns name's id in ids; on first use it takes the next id and adds naming(id) with name as Text.
func named[ID uint16 | uint32](b *Builder, ids map[string]ID, name string, naming func(ID) trace.Event) ID {
	id, ok := ids[name]
	if !ok {
		id = ID(len(ids) + 1)
		ids[name] = id
		ev := naming(id)
		ev.Text = name
		b.Add(ev)
	}
	return id
}

// Call records a runtime call of name returning ret, its arguments as docs/trace-format.md lays them out.
func (b *Builder) Call(name string, ret int64, args ...uint64) *trace.Event {
	ev := trace.Event{Kind: trace.KindCall, Fn: b.Fn(name), Ret: ret}
	copy(ev.Args[:], args)
	return b.Add(ev)
}

// Malloc records a successful aclrtMalloc of size bytes at ptr.
func (b *Builder) Malloc(ptr, size uint64) { b.Call("aclrtMalloc", 0, ptr, size, 0) }

// Free records a successful aclrtFree of ptr.
func (b *Builder) Free(ptr uint64) { b.Call("aclrtFree", 0, ptr) }

// ABI records a control-ABI event of kind for group ("" for none) with the handle, pointers and arguments.
func (b *Builder) ABI(kind trace.Kind, group string, handle int64, ptrs []uint64, args ...uint64) *trace.Event {
	ev := trace.Event{Kind: kind, Handle: handle, Ptrs: ptrs}
	if group != "" {
		ev.Group = b.Group(group)
	}
	copy(ev.Args[:], args)
	return b.Add(ev)
}

// Enter records group's region_enter with inputs, the first npos of them positional, described by
// descs (one per input, or none).
func (b *Builder) Enter(group string, npos int, inputs []uint64, descs ...trace.Tensor) *trace.Event {
	ev := b.ABI(trace.KindRegionEnter, group, 0, inputs, uint64(npos))
	ev.Text = trace.JoinTensors(descs)
	return ev
}

// Exit records group's region_exit with outputs.
func (b *Builder) Exit(group string, outputs ...uint64) *trace.Event {
	return b.ABI(trace.KindRegionExit, group, 0, outputs)
}

// Save records a successful save of nbytes at ptr by group and returns its handle (handles count from 1).
func (b *Builder) Save(group string, ptr, nbytes, flags uint64) int64 {
	h := b.nextH
	b.nextH++
	b.ABI(trace.KindSave, group, h, nil, ptr, nbytes, flags).Ret = h
	return h
}

// Describe records what a companion said of pointers of group's open region (SWAPAGENT_CALL_DESCRIBE).
func (b *Builder) Describe(group string, ptrs []uint64, descs ...trace.Tensor) *trace.Event {
	ev := b.ABI(trace.KindDescribe, group, 0, ptrs)
	ev.Text = trace.JoinTensors(descs)
	return ev
}

// Classify records the agent's classification of handle h (storage base, nbytes) with a keep reason.
func (b *Builder) Classify(group string, h int64, base, nbytes, reason uint64) *trace.Event {
	return b.ABI(trace.KindClassify, group, h, nil, base, nbytes, reason)
}

// State records handle h's storage of nbytes moving from one state to another, at base afterwards.
func (b *Builder) State(h int64, from, to, base, nbytes uint64) *trace.Event {
	return b.Add(trace.Event{Kind: trace.KindState, Handle: h, Args: [6]uint64{from, to, base, nbytes}})
}

// Text records an event of kind that carries only Text (KindFault, KindStats, KindLog, KindMeta).
func (b *Builder) Text(kind trace.Kind, text string) *trace.Event {
	return b.Add(trace.Event{Kind: kind, Text: text})
}

// Encode returns the trace file of h and events as the real writer writes it, with a batch ended after
// each event index in flushAfter (and at the end). Every batch is a compressed chunk of its own, so damage
// to one costs that batch alone, as the tests that damage files expect.
func Encode(tb testing.TB, h trace.Header, events []trace.Event, flushAfter ...int) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriterOptions(&buf, h, trace.Options{ChunkBytes: 1})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range events {
		if err := w.Add(&events[i]); err != nil {
			tb.Fatal(err)
		}
		for _, f := range flushAfter {
			if f == i {
				if err := w.Flush(); err != nil {
					tb.Fatal(err)
				}
			}
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// Write stores Encode's bytes at path, making its directory, and returns path.
func Write(tb testing.TB, path string, h trace.Header, events []trace.Event, flushAfter ...int) string {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, Encode(tb, h, events, flushAfter...), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// BeyondRepair returns data, a trace file, with the byte at off damaged and its parity group's parity block
// too, so no reader can put that block right: what a reader makes of damage it cannot undo. A parity block
// follows its group's blocks, so the first one after off is the group's.
func BeyondRepair(tb testing.TB, data []byte, off int) []byte {
	tb.Helper()
	out := bytes.Clone(data)
	out[off] ^= 0x20
	p := bytes.Index(out[off+1:], []byte("SWZP"))
	if p < 0 {
		tb.Fatalf("no parity block after offset %d", off)
	}
	out[off+1+p+5] ^= 0x20 // its length: the block fails its checksum, and its data is not where it says
	// Version 4 writes the parity twice: the copy after it too.
	if q := bytes.Index(out[off+1+p+1:], []byte("SWZP")); q >= 0 && q <= 4200 {
		out[off+1+p+1+q+5] ^= 0x20
	}
	return out
}
