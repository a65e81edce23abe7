// symbols.go owns symbol lookup: it reads a library's function symbols from .dynsym and .symtab,
// demangles C++ names, turns addresses into the file offsets uprobes attach at, and matches --func
// patterns against mangled and demangled names.
package bpf

import (
	"debug/elf"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// Symbol is one function defined by an ELF file.
type Symbol struct {
	Name      string // as in the symbol table (mangled for C++)
	Demangled string // full demangled name with parameters; equal to Name for C symbols
	Base      string // demangled name without parameters or return type ("ns::Class::method")
	Offset    uint64 // file offset of the first instruction: what a uprobe attaches at
}

// Symbols returns the functions path defines, from .dynsym and .symtab (a stripped library still has
// .dynsym), one per address, sorted by demangled name.
func Symbols(path string) ([]Symbol, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read symbols of %s: %w", path, err)
	}
	defer f.Close()

	var all []elf.Symbol
	for _, read := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		syms, err := read()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("read symbols of %s: %w", path, err)
		}
		all = append(all, syms...)
	}

	seen := map[uint64]bool{} // aliases share an address: probing it twice would count each call twice
	var out []Symbol
	for _, s := range all {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 {
			continue
		}
		off, ok := fileOffset(f, s.Value)
		if !ok || seen[off] {
			continue
		}
		seen[off] = true
		name := s.Name
		if i := strings.IndexByte(name, '@'); i > 0 { // versioned dynsym name "f@@VER"
			name = name[:i]
		}
		out = append(out, Symbol{Name: name, Demangled: demangleName(name, false), Base: demangleName(name, true), Offset: off})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Demangled != out[j].Demangled {
			return out[i].Demangled < out[j].Demangled
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

func demangleName(name string, noParams bool) string {
	var opts []demangle.Option
	if noParams {
		opts = append(opts, demangle.NoParams)
	}
	if d, err := demangle.ToString(name, opts...); err == nil {
		return d
	}
	return name
}

// fileOffset maps a virtual address to its offset in the file through the executable PT_LOAD
// segment that holds it.
func fileOffset(f *elf.File, addr uint64) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return addr - p.Vaddr + p.Off, true
		}
	}
	return 0, false
}

// Match returns the symbols a --func pattern names:
//   - an exact name, mangled ("_ZN2ns3fooEv"), demangled ("ns::foo()") or without parameters ("ns::foo"),
//     selects those symbols only (so "aclnnMul" does not also pick aclnnMulGetWorkspaceSize);
//   - otherwise a pattern with * or ? is a glob over the whole mangled or demangled name
//     ("mindspore::device::ascend::AscendMemoryPool::*");
//   - otherwise it is a substring of the demangled name.
func Match(syms []Symbol, pattern string) []Symbol {
	var out []Symbol
	for _, s := range syms {
		if s.Name == pattern || s.Demangled == pattern || s.Base == pattern {
			out = append(out, s)
		}
	}
	if len(out) > 0 || pattern == "" {
		return out
	}
	match := func(s string) bool { return strings.Contains(s, pattern) }
	if strings.ContainsAny(pattern, "*?") {
		re := globRegexp(pattern)
		match = re.MatchString
	}
	for _, s := range syms {
		if match(s.Name) || match(s.Demangled) || match(s.Base) {
			out = append(out, s)
		}
	}
	return out
}

// globRegexp compiles a glob where * matches any run of characters (also "::") and ? one character.
func globRegexp(glob string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range glob {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// RuntimeFuncs are the AscendCL calls probed by default, where the library defines them.
var RuntimeFuncs = []string{
	"aclrtMalloc", "aclrtFree", "aclrtMemcpy", "aclrtMemcpyAsync", "aclrtSynchronizeStream",
	"aclrtSynchronizeStreamWithTimeout", "aclnnMul", "aclnnAdd", "aclnnMatmul",
}

// Resolve returns the functions of path to probe: each name in optional that path defines, then every
// function each pattern matches (see Match), without duplicates. A pattern that matches nothing, or an
// empty result, is an error.
func Resolve(path string, optional, patterns []string) ([]Symbol, error) {
	syms, err := Symbols(path)
	if err != nil {
		return nil, err
	}
	var out []Symbol
	seen := map[uint64]bool{}
	add := func(ss []Symbol) {
		for _, s := range ss {
			if !seen[s.Offset] {
				seen[s.Offset] = true
				out = append(out, s)
			}
		}
	}
	for _, name := range optional {
		for _, s := range syms {
			if s.Name == name {
				add([]Symbol{s})
			}
		}
	}
	for _, p := range patterns {
		m := Match(syms, p)
		if len(m) == 0 {
			return nil, fmt.Errorf("pattern %q matches no function of %s", p, path)
		}
		add(m)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no function to probe in %s", path)
	}
	return out, nil
}
