// Package agent is the in-process half of libswapagent.so written in Go: configuration, logging, the
// drain of the C shim's event ring into the trace, the control ABI (argument checks, error codes, trace
// records) and the hand-off of decisions to the offload engine. It never calls C itself: the cgo glue
// in shim/ provides the Native side.
//
// config.go owns the environment the agent reads once at load.
package agent

import (
	"fmt"
	"strconv"
	"strings"

	"go.uber.org/zap/zapcore"

	"swapagent/internal/bytesize"
	"swapagent/offload"
	"swapagent/trace"
)

// Environment variables (architecture.md, "Environment").
const (
	EnvPolicy   = "SWAPAGENT_POLICY"
	EnvOut      = "SWAPAGENT_OUT"
	EnvPrefetch = "SWAPAGENT_PREFETCH"
	EnvMinBytes = "SWAPAGENT_MIN_BYTES"
	EnvLog      = "SWAPAGENT_LOG"
	EnvPython   = "SWAPAGENT_PYTHON"   // auto or off: the Python bootstrap of `swapagent run`
	EnvTrace    = "SWAPAGENT_TRACE"    // all, memory or off: what the trace records (tracelevel.go)
	EnvCompiled = "SWAPAGENT_COMPILED" // auto, 0 or 1: accepted, selects nothing (the companions are Python only)
	// EnvTraceLimit is the bytes of trace a process keeps (2M, 512MiB, 1G, a plain count; 0: no limit): the
	// newest segments within it, the oldest deleted (trace/segment.go).
	EnvTraceLimit = "SWAPAGENT_TRACE_LIMIT"
)

// Defaults.
const (
	DefaultOut      = "./swapagent-out"
	DefaultPrefetch = offload.DefaultPrefetch
	DefaultMinBytes = offload.DefaultMinBytes
	DefaultPolicy   = offload.PolicySafe
	DefaultTrace    = TraceAll
)

// Policies the agent accepts, in the order error messages list them (swapagent.h's).
var Policies = trace.Policies[:]

// Config is the agent's configuration, read once at load. The zero value is not useful: use LoadConfig.
type Config struct {
	Policy   offload.Policy
	Out      string // output directory
	Prefetch int
	MinBytes uint64
	Level    zapcore.Level
	Role     string // MS_ROLE: MS_SCHED makes the agent inert
	Rank     int    // RANK_ID or RANK; -1 when unset
	RankSet  bool
	// Python is SWAPAGENT_PYTHON: "" when unset (the bootstrap was not offered), auto or off.
	Python string
	// Compiled is SWAPAGENT_COMPILED, one of CompiledModes ("" when unset): it chose the companions' compiled
	// hot path, which is gone; still checked so that a job that sets it runs as before.
	Compiled string
	// TraceLimit is SWAPAGENT_TRACE_LIMIT in bytes (trace.DefaultLimit when unset; 0: no limit).
	TraceLimit int64
	// Trace is SWAPAGENT_TRACE, one of TraceLevels: what the trace records (tracelevel.go's rule; "" is
	// TraceAll). It never changes what the agent tracks, diagnoses or counts.
	Trace string
	// InjectPanic names a control call that panics (SWAPAGENT_TEST_PANIC=region_enter): a test hook that
	// proves a panic inside the agent leaves the job running unchanged.
	InjectPanic string
	// InjectHang (SWAPAGENT_TEST_HANG=shutdown) makes Shutdown hold the agent's lock for ten minutes after
	// its first flush: the test hook that proves the exit hook's bound. Tests only.
	InjectHang string
	// TestUnordered (SWAPAGENT_TEST_UNORDERED=1) drops the event ordering of the agent's copies against
	// the job's streams: the control that proves the emulator's hazard checker sees the bug. Tests only.
	TestUnordered bool
}

// Inert reports whether the agent must stay out of this process (msrun's scheduler).
func (c Config) Inert() bool { return c.Role == "MS_SCHED" }

// Problem is one bad setting: the variable, its value, what it should be and the default used instead.
type Problem struct{ Name, Value, Want, Default string }

// String is the line a preloaded agent prints: it goes on with the default.
func (p Problem) String() string {
	return fmt.Sprintf("%s=%q is not %s; using %s", p.Name, p.Value, p.Want, p.Default)
}

// Refusal is the line of a command that refuses to start a job with the setting (swapagent run).
func (p Problem) Refusal() string {
	return fmt.Sprintf("bad %s %q in the environment (want %s)", p.Name, p.Value, p.Want)
}

// LoadConfig reads the configuration with lookup (os.LookupEnv in the library). Each bad value gives
// one problem line and its default; LoadConfig never fails.
func LoadConfig(lookup func(string) (string, bool)) (Config, []string) {
	c, ps := load(lookup)
	var lines []string
	for _, p := range ps {
		lines = append(lines, p.String())
	}
	return c, lines
}

// CheckEnv is LoadConfig's verdict alone: every setting the agent would refuse, for a command that checks
// the environment it passes on before it starts a job.
func CheckEnv(lookup func(string) (string, bool)) []Problem {
	_, ps := load(lookup)
	return ps
}

// Setting is one SWAPAGENT_* variable the agent reads, with its rule: what it wants, the default a bad
// value falls back to, and parse, which takes a good value into the configuration (false for a bad one).
// Settings is the one list: the agent reads it at load (a bad value: one line, the default), and
// `swapagent run` checks it before it starts a job (a bad value: one line each, nothing run).
type Setting struct {
	Name, Want, Default string
	parse               func(v string, c *Config) bool
}

// Settings are every setting the agent and its companions read from the environment, in the order
// their problems are reported. SWAPAGENT_COMPILED selects nothing any more (the companions have one path,
// Python); it keeps its values so that a job that sets it runs as it did.
var Settings = []Setting{
	{EnvPolicy, "one of " + strings.Join(Policies, ", "), DefaultPolicy.String(), func(v string, c *Config) bool {
		// offload.ParsePolicy: the exact, lower-case names, as run --policy and replay --policy take them.
		p, err := offload.ParsePolicy(v)
		c.Policy = p
		return err == nil
	}},
	{EnvOut, "a directory", DefaultOut, func(v string, c *Config) bool { c.Out = v; return true }},
	{EnvPrefetch, "an integer from 0 to " + strconv.Itoa(offload.MaxPrefetch), strconv.Itoa(DefaultPrefetch), func(v string, c *Config) bool {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		c.Prefetch = n
		return err == nil && n >= 0 && n <= offload.MaxPrefetch
	}},
	{EnvMinBytes, "a byte count (64K, 64KiB, 1M, or a number of bytes)", "64K", func(v string, c *Config) bool {
		n, ok := bytesize.Parse(v)
		c.MinBytes = n
		return ok
	}},
	{EnvTrace, "one of " + strings.Join(TraceLevels, ", "), DefaultTrace, func(v string, c *Config) bool {
		c.Trace = word(v)
		return contains(TraceLevels, c.Trace)
	}},
	// Below one smallest segment the limit could keep nothing whole.
	{EnvTraceLimit, "a byte count of at least 16K (2M, 512MiB, 1G), or 0 for no limit", "1G", func(v string, c *Config) bool {
		n, ok := bytesize.Parse(v)
		c.TraceLimit = int64(n)
		return ok && (n == 0 || n >= trace.MinLimit)
	}},
	{EnvLog, "one of debug, info, warn, error", "warn", func(v string, c *Config) bool {
		l, ok := logLevels[word(v)]
		c.Level = l
		return ok
	}},
	{EnvPython, "auto or off", "auto", func(v string, c *Config) bool {
		c.Python = word(v)
		return c.Python == "auto" || c.Python == "off"
	}},
	{EnvCompiled, "one of " + strings.Join(CompiledModes, ", "), "auto", func(v string, c *Config) bool {
		c.Compiled = word(v)
		return contains(CompiledModes, c.Compiled)
	}},
}

// CompiledModes are the values SWAPAGENT_COMPILED takes. They once chose the companions' compiled hot path
// (auto, 0 never, 1 insisted); the companions are Python only now and every value runs that one path.
var CompiledModes = []string{"auto", "0", "1"}

var logLevels = map[string]zapcore.Level{"debug": zapcore.DebugLevel, "info": zapcore.InfoLevel,
	"warn": zapcore.WarnLevel, "warning": zapcore.WarnLevel, "error": zapcore.ErrorLevel}

// word is a value of a setting that names one of a few words: blanks around it and case do not matter.
func word(v string) string { return strings.ToLower(strings.TrimSpace(v)) }

// PythonMode is SWAPAGENT_PYTHON's rule for `swapagent run --python`: the mode, and whether v is one.
func PythonMode(v string) (string, bool) {
	var c Config
	ok := settingNamed(EnvPython).parse(v, &c)
	return c.Python, ok
}

func settingNamed(name string) Setting {
	for _, s := range Settings {
		if s.Name == name {
			return s
		}
	}
	panic("agent: no setting " + name)
}

func load(lookup func(string) (string, bool)) (Config, []Problem) {
	def := Config{Policy: DefaultPolicy, Out: DefaultOut, Prefetch: DefaultPrefetch, MinBytes: DefaultMinBytes,
		Trace: DefaultTrace, TraceLimit: trace.DefaultLimit, Level: zapcore.WarnLevel, Rank: -1}
	c := def
	c.InjectPanic, _ = lookup("SWAPAGENT_TEST_PANIC")
	c.InjectHang, _ = lookup("SWAPAGENT_TEST_HANG")
	if v, _ := lookup("SWAPAGENT_TEST_UNORDERED"); v == "1" {
		c.TestUnordered = true
	}
	var problems []Problem
	for _, s := range Settings {
		v, ok := lookup(s.Name)
		if !ok || v == "" {
			continue
		}
		try := c
		if s.parse(v, &try) {
			c = try
			continue
		}
		problems = append(problems, Problem{s.Name, v, s.Want, s.Default})
		if s.Name == EnvPython {
			c.Python = "auto" // the bootstrap was offered: a bad mode is taken as auto
		}
	}
	c.Role, _ = lookup("MS_ROLE")
	for _, name := range []string{"RANK_ID", "RANK"} {
		if v, ok := lookup(name); ok && v != "" {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
				c.Rank, c.RankSet = n, true
				break
			}
		}
	}
	return c, problems
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
