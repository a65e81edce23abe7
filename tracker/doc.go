// Package tracker is swapagent's ownership model: it knows which device memory is live, which storages
// the swap groups saved, and who owns each of them. It moves no bytes (package offload does).
//
// # Storages
//
// A storage is identified by its base pointer plus a generation. Every view of one storage shares the
// base, so the base is what groups save and what region input/output sets hold (plain integers: the
// tracker never holds a tensor). Addresses are reused — by the runtime after aclrtFree, and inside a
// framework's caching pool without any runtime call — so a base alone would confuse a new tensor with a
// dead one (the dedupe bug torchtune forks hit). A save creates a new storage, with the next generation
// for that base, unless a storage of the same base and size is currently held; a storage stops being held
// when the last live group that saved it is forgotten, or when the runtime frees (Free) or re-allocates
// (Alloc) the memory under it, which also marks it freed so it is never copied from or released again.
//
// # Ownership rules
//
// Saves are classified when the region exits, when both the input and the output sets are known. For
// each save the first matching rule wins and is recorded as the reason:
//
//  1. input: its base is in the region's input set (positional or keyword);
//  2. output: its base is in the region's output set;
//  3. protected: explicitly protected for the group;
//  4. param: saved with FlagParam (a parameter or buffer of the wrapped module);
//  5. shared: another live group (between its region entry and its forget) also saved it;
//  6. small: below the size threshold;
//  7. otherwise internal: the only storages that may be swapped.
//
// A storage saved twice by one group is Duplicate the second time and shares the first save's fate, so
// it moves once. The Mask of every matching rule is returned too: the outputs-only policy of package
// offload, which reproduces hyper-parallel before its issue 294 fix, picks from it.
//
// Issue 294 is why inputs come first: RoPE cos/sin are computed once and passed to every decoder layer as
// keyword arguments; each layer saves them for backward, and a swap that releases them at layer 0 leaves
// every later user with a zero-size storage (the null-address Mul fault). The input set is cleared at
// region exit so nothing outlives the region.
//
// # Attribution
//
// For fault diagnosis the tracker remembers, per storage, which groups received it as an input and how
// (StorageInfo.Owner: "keyword input rotary_cos_sin[0] of layer.0..layer.10", the argument's path when the
// companion described it with Describe, "keyword input of ..." otherwise), the dtype and shape of what a
// group saved (StorageInfo.Tensor), and keeps a bounded history of releases
// (with the releasing group), frees and storages freed under their savers, searchable by contained
// address (FindRecent) or by size (FindSize). Lookup answers "which live allocation holds address A"
// with a binary search over a sorted slice: cheap enough to run at every kernel launch.
//
// # Pointers
//
// The agent copies a saved storage's bytes, so a pointer the framework got wrong must never reach a copy
// (a memcpy on it kills the process). With CheckPointers, a save and a restored base are accepted only
// when the whole range lies in one live device allocation (or adjacent VMM mappings of one reservation),
// or else in host memory the process has mapped readable (HostMaps: /proc/self/maps, read again on a
// miss); Place answers the same question for the mover right before each copy. VMM address space with
// nothing mapped is device address space, never host memory.
//
// A Tracker is safe for concurrent use; lookups take a read lock.
package tracker
