package shimtest

import (
	"debug/elf"
	"sort"
	"strings"
	"testing"

	"swapagent/internal/testenv"
)

// The library's swapagent_* entry points: the ABI v1 functions (architecture.md, tests outside the project
// call them) and the few the companions' internal interface adds (swapagent.h), at most 20 in all: one
// record (swapagent_call) carries every other control call.
func TestExportsAreTheABIAndFewMore(t *testing.T) {
	f, err := elf.Open(testenv.Path(t, testenv.AgentLib))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "swapagent_") && elf.ST_TYPE(s.Info) == elf.STT_FUNC &&
			elf.ST_BIND(s.Info) == elf.STB_GLOBAL && s.Section != elf.SHN_UNDEF {
			exported[s.Name] = true
		}
	}
	for _, fn := range []string{"swapagent_abi_version", "swapagent_set_storage_ops", "swapagent_region_enter",
		"swapagent_save", "swapagent_region_exit", "swapagent_protect", "swapagent_backward_enter",
		"swapagent_unpack", "swapagent_backward_exit", "swapagent_state", "swapagent_keep_reason",
		"swapagent_stats_json"} {
		if !exported[fn] {
			t.Errorf("ABI v1 function %s is not exported", fn)
		}
	}
	if len(exported) > 20 {
		names := make([]string, 0, len(exported))
		for n := range exported {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Errorf("%d swapagent_* functions exported, at most 20 wanted: %v", len(exported), names)
	}
	t.Logf("%d swapagent_* functions exported", len(exported))
}
