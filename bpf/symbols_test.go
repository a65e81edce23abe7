// symbols_test.go proves symbol lookup and --func matching on a C++ library g++ builds here, with and
// without its .symtab.
package bpf

import (
	"context"
	"debug/elf"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// buildPool compiles testdata/pool.cc into a shared library (stripped: only .dynsym is left) and
// testdata/pooluser.cc into a program linked with it; it returns the library and the program.
func buildPool(t *testing.T, strip bool) (lib, user string) {
	t.Helper()
	dir := t.TempDir()
	lib, user = filepath.Join(dir, "libpool.so"), filepath.Join(dir, "pooluser")
	args := []string{"-shared", "-fPIC", "-O1", "-o", lib, "testdata/pool.cc"}
	if strip {
		args = append(args, "-s")
	}
	gxx(t, args...)
	gxx(t, "-O1", "-o", user, "testdata/pooluser.cc", "-L"+dir, "-lpool", "-Wl,-rpath,"+dir)
	return lib, user
}

func gxx(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "g++", args...).CombinedOutput(); err != nil {
		t.Fatalf("g++ %v: %v\n%s", args, err, out)
	}
}

func TestMatch(t *testing.T) {
	const (
		alloc = "mindspore::device::ascend::AscendMemoryPool::AllocTensorMem(unsigned long, bool)"
		free  = "mindspore::device::ascend::AscendMemoryPool::FreeTensorMem(void*)"
	)
	cases := []struct {
		pattern        string
		full, stripped []string // demangled names matched, with and without .symtab
	}{
		{"mindspore::device::ascend::AscendMemoryPool::*", []string{alloc, free}, []string{alloc, free}},
		{"mindspore::device::ascend::AscendMemoryPool::AllocTensorMem", []string{alloc}, []string{alloc}},
		{alloc, []string{alloc}, []string{alloc}},
		{"_ZN9mindspore6device6ascend16AscendMemoryPool13FreeTensorMemEPv", []string{free}, []string{free}},
		{"FreeTensor", []string{free}, []string{free}},
		{"*Pool::*Mem(void\\*)", nil, nil}, // globs have no escapes: \ is a literal character
		{"*Pool::*Mem(void*)", []string{free}, []string{free}},
		{"scale", []string{"scale(double)", "scale(int)"}, []string{"scale(double)", "scale(int)"}},
		{"scale(int)", []string{"scale(int)"}, []string{"scale(int)"}},
		{"plain_c", []string{"plain_c"}, []string{"plain_c"}},
		{"hidden_helper", []string{"hidden_helper(int)"}, nil}, // not exported: .symtab only
		{"no_such_function", nil, nil},
	}
	for _, strip := range []bool{false, true} {
		lib, _ := buildPool(t, strip)
		syms, err := Symbols(lib)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			want := c.full
			if strip {
				want = c.stripped
			}
			var got []string
			for _, s := range Match(syms, c.pattern) {
				got = append(got, s.Demangled)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("strip=%v Match(%q) = %q, want %q", strip, c.pattern, got, want)
			}
		}
	}
}

// TestSymbolOffsets checks each offset against the bytes of the function's section: the file holds,
// at the offset, the instructions the symbol's address names.
func TestSymbolOffsets(t *testing.T) {
	lib, _ := buildPool(t, false)
	syms, err := Symbols(lib)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	text := f.Section(".text")
	all, _ := f.Symbols()
	checked := 0
	for _, s := range syms {
		for _, es := range all {
			if es.Name != s.Name || es.Section >= elf.SectionIndex(len(f.Sections)) || f.Sections[es.Section] != text {
				continue
			}
			if want := es.Value - text.Addr + text.Offset; s.Offset != want {
				t.Errorf("%s: offset %#x, want %#x", s.Name, s.Offset, want)
			}
			checked++
		}
	}
	if checked < 6 {
		t.Errorf("checked %d offsets, want every function of pool.cc", checked)
	}
}

func TestResolve(t *testing.T) {
	lib, _ := buildPool(t, true)
	got, err := Resolve(lib, []string{"plain_c", "aclrtMalloc"}, []string{"*AscendMemoryPool::*", "plain_c"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.Base)
	}
	want := []string{"plain_c", "mindspore::device::ascend::AscendMemoryPool::AllocTensorMem", "mindspore::device::ascend::AscendMemoryPool::FreeTensorMem"}
	if !slices.Equal(names, want) {
		t.Errorf("Resolve = %q, want %q (defined defaults first, no duplicates)", names, want)
	}
	for _, bad := range [][]string{{"nothing_like_this"}, {}} {
		if _, err := Resolve(lib, []string{"aclrtMalloc"}, bad); err == nil {
			t.Errorf("Resolve(patterns %q) succeeded, want an error", bad)
		}
	}
	if _, err := Resolve(filepath.Join(t.TempDir(), "missing.so"), nil, []string{"x"}); err == nil {
		t.Error("Resolve on a missing file succeeded")
	}
}
