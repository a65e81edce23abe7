// config_test.go checks the environment parsing and the error-code mapping.
package agent

import (
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"

	"swapagent/offload"
	"swapagent/trace"
)

func TestLoadConfig(t *testing.T) {
	cases := []struct {
		env      map[string]string
		check    func(Config) bool
		problems int
		want     string
	}{
		{map[string]string{}, func(c Config) bool {
			return c.Policy == offload.PolicySafe && c.Out == DefaultOut && c.Prefetch == 1 && c.MinBytes == 65536 &&
				c.Level == zapcore.WarnLevel && c.Rank == -1 && !c.RankSet
		}, 0, ""},
		{map[string]string{EnvPolicy: "outputs-only", EnvPrefetch: "2", EnvMinBytes: "0", EnvLog: "debug",
			"RANK_ID": "3", EnvOut: "/x"}, func(c Config) bool {
			return c.Policy == offload.PolicyOutputsOnly && c.Prefetch == 2 && c.MinBytes == 0 && c.Level == zapcore.DebugLevel &&
				c.Rank == 3 && c.RankSet && c.Out == "/x"
		}, 0, ""},
		{map[string]string{EnvPolicy: "bogus"}, func(c Config) bool { return c.Policy == offload.PolicySafe }, 1,
			`SWAPAGENT_POLICY="bogus" is not one of safe, outputs-only, off; using safe`},
		{map[string]string{EnvMinBytes: "64K"}, func(c Config) bool { return c.MinBytes == 65536 }, 0, ""},
		{map[string]string{EnvPrefetch: "-1", EnvMinBytes: "lots", EnvLog: "loud"}, func(c Config) bool {
			return c.Prefetch == 1 && c.MinBytes == 65536 && c.Level == zapcore.WarnLevel
		}, 3, ""},
		{map[string]string{"RANK": "7", "MS_ROLE": "MS_SCHED"}, func(c Config) bool {
			return c.Rank == 7 && c.Inert()
		}, 0, ""},
	}
	for i, c := range cases {
		cfg, problems := LoadConfig(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		if !c.check(cfg) || len(problems) != c.problems {
			t.Errorf("case %d: %+v, problems %q", i, cfg, problems)
		}
		if c.want != "" && (len(problems) == 0 || problems[0] != c.want) {
			t.Errorf("case %d: problem %q, want %q", i, problems, c.want)
		}
	}
}

func TestCode(t *testing.T) {
	for i, err := range []error{offload.ErrInvalid, offload.ErrGroup, offload.ErrHandle, offload.ErrOrder,
		offload.ErrState, offload.ErrNoOps, offload.ErrRuntime, offload.ErrDisabled} {
		if got := Code(fmt.Errorf("wrapped: %w", err)); got != -1-i {
			t.Errorf("%v: code %d, want %d", err, got, -1-i)
		}
	}
	if Code(nil) != trace.CodeOK || Code(fmt.Errorf("other")) != trace.CodeERUNTIME {
		t.Error("nil or foreign error mapped wrongly")
	}
}

func TestBaseName(t *testing.T) {
	if got := BaseName("h", 12, 3, true); got != "h.rank3.12" {
		t.Error(got)
	}
	if got := BaseName("h", 12, -1, false); !strings.HasPrefix(got, "h.12") {
		t.Error(got)
	}
}

func TestTraceLimit(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int64
		bad  bool
	}{
		{"", trace.DefaultLimit, false},
		{"2M", 2 << 20, false},
		{"2MiB", 2 << 20, false},
		{"512k", 512 << 10, false},
		{"1G", 1 << 30, false},
		{"1gb", 1 << 30, false},
		{"16384", 16384, false},
		{"4096", trace.DefaultLimit, true}, // below one smallest segment: nothing whole could be kept
		{"1", trace.DefaultLimit, true},
		{"0", 0, false},
		{"-1", trace.DefaultLimit, true},
		{"2X", trace.DefaultLimit, true},
		{"M", trace.DefaultLimit, true},
		{"99999999999T", trace.DefaultLimit, true},
	} {
		c, problems := LoadConfig(func(k string) (string, bool) {
			if k == EnvTraceLimit && tc.v != "" {
				return tc.v, true
			}
			return "", false
		})
		if c.TraceLimit != tc.want || (len(problems) == 1) != tc.bad {
			t.Errorf("%s=%q: limit %d, problems %q; want %d, bad %v", EnvTraceLimit, tc.v, c.TraceLimit, problems, tc.want, tc.bad)
		}
		if tc.bad && !strings.Contains(problems[0], EnvTraceLimit) {
			t.Errorf("problem %q does not name the variable", problems[0])
		}
	}
}

// TestEverySettingOneRule: each setting the agent and its companions read is in Settings and checked by
// it: a bad value is one problem naming the variable, the value and what it wants, and the default stays;
// SWAPAGENT_COMPILED included. Policy names are exact (offload.ParsePolicy), as run and replay take them.
func TestEverySettingOneRule(t *testing.T) {
	bad := map[string]string{EnvPolicy: "SAFE", EnvPrefetch: "x", EnvMinBytes: "lots", EnvTrace: "calls",
		EnvTraceLimit: "1", EnvLog: "loud", EnvPython: "maybe", EnvCompiled: "2"}
	names := map[string]bool{}
	for _, s := range Settings {
		names[s.Name] = true
	}
	for name := range bad {
		if !names[name] {
			t.Errorf("%s is not in Settings", name)
		}
	}
	def, _ := LoadConfig(func(string) (string, bool) { return "", false })
	for name, v := range bad {
		c, problems := LoadConfig(func(k string) (string, bool) {
			if k == name {
				return v, true
			}
			return "", false
		})
		want := fmt.Sprintf("%s=%q is not ", name, v)
		if len(problems) != 1 || !strings.HasPrefix(problems[0], want) || strings.Contains(problems[0], "\n") {
			t.Errorf("%s=%q: problems %q, want one starting %q", name, v, problems, want)
		}
		if name != EnvPython && fmt.Sprint(c) != fmt.Sprint(def) {
			t.Errorf("%s=%q: config %+v, want the defaults %+v", name, v, c, def)
		}
	}
	// All at once: one problem each, in Settings' order.
	c, problems := LoadConfig(func(k string) (string, bool) { v, ok := bad[k]; return v, ok })
	if len(problems) != len(bad) || c.Policy != DefaultPolicy || c.Compiled != "" {
		t.Errorf("all bad: %d problems %q, policy %q compiled %q", len(problems), problems, c.Policy, c.Compiled)
	}
	for _, good := range []struct{ name, v string }{{EnvCompiled, "auto"}, {EnvCompiled, " 1 "}, {EnvCompiled, "0"},
		{EnvPolicy, "outputs-only"}, {EnvPython, "OFF"}} {
		if _, problems := LoadConfig(func(k string) (string, bool) { return good.v, k == good.name }); len(problems) != 0 {
			t.Errorf("%s=%q: problems %q", good.name, good.v, problems)
		}
	}
	if m, ok := PythonMode(" Off "); !ok || m != "off" {
		t.Errorf("PythonMode: %q %v", m, ok)
	}
}
