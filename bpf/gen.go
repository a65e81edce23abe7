// Package bpf owns `swapagent probe`'s eBPF side: the BPF C program (c/probe.bpf.c), its bpf2go
// bindings (probe_bpfel.go and probe_bpfel.o, generated and committed so building needs no clang),
// the loader that attaches it to a library's functions, and the ELF symbol lookup with C++ demangling
// that turns --func patterns into file offsets.
package bpf

// Regenerate after editing c/probe.bpf.c (needs clang): go generate ./bpf
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -type hist probe c/probe.bpf.c -- -O2 -g -Wall -Werror
