"""hp_job.py: an unmodified training job that swaps with hyper-parallel (the stand-in under standin/), the
way the issue-294 report's job does: 6 decoder layers, RoPE cos/sin computed once per step and passed to
every layer as the keyword tuple rotary_cos_sin=(cos, sin), layers 0-4 wrapped by swap_wrapper and wired
with SwapManager().set_forward_prefetch_layer(layer i, layer i+1) (prefetch 1); --mode ownswap (torch)
swaps the same layers with a hand-written swap instead (OwnSwap). It knows nothing of swapagent: the
tests run it as it is, with and without `swapagent run`.

    python hp_job.py --framework torch|mindspore --mode noswap|swap|ownswap|acswap
                     [--layout checkpoint|memory] [--layers N] [--keep-inputs] [--embed] [--nested] [--steps N]
                     [--swap-yaml FILE] --out DIR

--swap-yaml FILE (torch, --mode swap) wires the swap from a MindFormers YAML's `swap:` section (enable,
default_prefetch, layer_swap) the way MindFormers' apply_swap does: swap_wrapper on each listed layer i,
then set_forward_prefetch_layer(layer i, layer i + default_prefetch).

--nested (torch, --mode swap) is hyper-parallel's own test_act_swap layout: swap_wrapper on each layer's
attention (layer.attn) and the layers chained with set_forward_prefetch_layer, so hyper-parallel's groups
are the layers and the wrapped modules sit inside them.

--mode acswap (torch) is hyper-parallel's recompute + swap (its test_ac's swap mode): every layer wrapped
with checkpoint_wrapper(layer, policy_fn=MUST_SWAP for matmuls else MUST_RECOMPUTE, swap_inputs=True) and
chained with set_forward_prefetch_layer(layer i, layer i+1), so the hidden state entering each layer is
what the swap offloads. --keep-inputs keeps every layer's input in a list, as output_hidden_states=True
does, and reads them after the last layer (a small term of the loss). result.json's "held" is, per step,
the bytes of the stand-in's saved storages still on device at the end of the forward (a census of its
SwapTensors); its "left" is, per step, how many of the stand-in's SwapTensors something still holds once the
step is over, and their device bytes (hyper-parallel drops each at its unpack).

Under msrun each worker writes into DIR/rank<R>. It appends to DIR/probe.txt, at every layer's entry, "step layer cos_bytes" (flushed: a crash keeps it),
and writes DIR/result.json at the end: the losses, every gradient's bytes (hex) and the stand-in's count
of released storages and bytes. Its "saved" is, per step, the bytes of every storage saved for backward
(parameters left out, each storage once) still on device at the end of the forward: the stand-in's
SwapTensors and, through an outer saved-tensor hook that keeps only weak references, the saves of the
layers it does not wrap (with --swap-yaml only; else it is "held")."""

import argparse
import contextlib
import json
import os
import sys
import weakref

import numpy as np

LAYERS, SWAP = 6, list(range(5))
BATCH, SEQ, DIM = 2, 16, 32


def weights():
    rng = np.random.default_rng(0)
    ws = [{n: (rng.standard_normal((DIM, DIM)) * 0.1).astype(np.float32) for n in ("wq", "wo", "wu")}
          for _ in range(LAYERS)]
    emb = (rng.standard_normal((BATCH, SEQ, DIM)) * 0.5).astype(np.float32)
    target = (rng.standard_normal((BATCH, SEQ, DIM)) * 0.5).astype(np.float32)
    return ws, emb, target


def rope():
    inv = 1.0 / (10000 ** (np.arange(0, DIM, 2, dtype=np.float64) / DIM))
    ang = np.outer(np.arange(SEQ, dtype=np.float64), inv)
    ang = np.concatenate([ang, ang], axis=-1)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


class Probe:
    """The cos storage's size at each layer's entry, on disk as it happens."""

    def __init__(self, out):
        self.f = open(os.path.join(out, "probe.txt"), "a")
        self.step = 0

    def __call__(self, layer, nbytes):
        self.f.write("%d %d %d\n" % (self.step, layer, nbytes))
        self.f.flush()


class OwnSwap:
    """A layer swap written by hand, as some jobs have one (torch): each of layers 0-4 saves its tensors for
    backward through saved_tensors_hooks; after the next layer's forward they are copied to host and
    released with resize_(0); an unpack brings a released one back. Like hyper-parallel's, it protects
    nothing: the RoPE keyword input is released too. SWAPAGENT_GUARD_LAYERS names its layers to the guard."""

    def __init__(self, torch, layers):
        self.torch, self.saved, self.ctx = torch, {}, {}
        for i in SWAP:
            layers[i].register_forward_pre_hook(self.pre(i))
            layers[i].register_forward_hook(self.post(i))
        layers[SWAP[-1] + 1].register_forward_hook(self.post(SWAP[-1] + 1))

    def pre(self, i):
        def hook(_m, _args):
            self.saved[i] = []
            self.ctx[i] = self.torch.autograd.graph.saved_tensors_hooks(self.pack(i), self.unpack)
            self.ctx[i].__enter__()
        return hook

    def post(self, i):
        def hook(_m, _args, _out):
            if i in self.ctx:
                self.ctx.pop(i).__exit__(None, None, None)
            if i - 1 in self.saved:
                self.release(i - 1)
        return hook

    def pack(self, i):
        def pack(t):
            if isinstance(t, self.torch.nn.Parameter):
                return t
            e = [t, None]
            self.saved[i].append(e)
            return e
        return pack

    def release(self, i):
        hosts = {}  # storage -> its host copy: a storage saved twice is copied and released once
        for e in self.saved.pop(i):
            s = e[0].untyped_storage()
            key = s._cdata  # pylint: disable=protected-access
            if key not in hosts and s.nbytes():
                hosts[key] = self.torch.empty(s.nbytes(), dtype=self.torch.uint8)
                hosts[key].untyped_storage().copy_(s)
                s.resize_(0)
            e[1] = hosts.get(key)

    def unpack(self, e):
        if not isinstance(e, list):  # a parameter, saved as it is
            return e
        t, host = e
        s = t.untyped_storage()
        if host is not None and s.nbytes() == 0:
            s.resize_(host.numel())
            s.copy_(host.untyped_storage())
        return t


def mindformers_swap(path, layers, manager, swap_wrapper):
    """MindFormers' apply_swap from the YAML at path: each layer of layer_swap (indices, or "a-b" ranges)
    wrapped, then chained with the layer default_prefetch after it (an index past the last layer fails, as
    it does in MindFormers)."""
    import yaml
    with open(path) as f:
        sc = yaml.safe_load(f)["swap"]
    if not sc.get("enable"):
        return
    ids = set()
    for entry in (sc.get("layer_swap") or [{}])[0].get("layers", []):
        lo, _, hi = str(entry).partition("-")
        ids.update(range(int(lo), int(hi or lo) + 1))
    prefetch = int(sc.get("default_prefetch", 1))
    pairs = set()
    for i in range(len(layers)):
        if i in ids:
            layers[i] = swap_wrapper(layers[i])
            pairs.add((i, i + prefetch))
    for i, j in sorted(pairs):
        manager().set_forward_prefetch_layer(layers[i], layers[j])


def torch_parts(probe, bump=False, keep=None, census=None, embed=False, nested=False, all_saved=False):
    import torch
    from torch import nn

    def attention(h, cos, sin, wq, wo):
        q = h @ wq
        half = DIM // 2
        q = q * cos + torch.cat([-q[..., half:], q[..., :half]], dim=-1) * sin
        return torch.tanh(q) @ wo

    class Attn(nn.Module):  # --nested: the part of a layer that swap_wrapper wraps (its layer.attn)
        def __init__(self, w):
            super().__init__()
            self.wq, self.wo = nn.Parameter(torch.tensor(w["wq"])), nn.Parameter(torch.tensor(w["wo"]))

        def forward(self, h, cos, sin):
            return attention(h, cos, sin, self.wq, self.wo)

    class Layer(nn.Module):
        def __init__(self, i, w):
            super().__init__()
            self.i = i
            if nested:
                self.attn = Attn(w)
                self.wu = nn.Parameter(torch.tensor(w["wu"]))
            else:
                for n, a in w.items():
                    setattr(self, n, nn.Parameter(torch.tensor(a)))

        def forward(self, h, *, rotary_cos_sin):
            cos, sin = rotary_cos_sin
            probe(self.i, cos.untyped_storage().nbytes())
            if nested:
                h = h + self.attn(h, cos, sin)
            else:
                h = h + attention(h, cos, sin, self.wq, self.wo)
            return h + torch.sigmoid(h @ self.wu) * h

    class Stack(nn.Module):  # the model: its layers' module paths are layers.0 .. layers.5
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Layer(i, w) for i, w in enumerate(ws)])

        def forward(self, h, cos, sin):
            if embed:  # the first layer's input made inside the model, as an embedding layer makes it
                h = h * 1.0
            for layer in self.layers:
                if keep is not None:
                    keep.append(h)
                h = layer(h, rotary_cos_sin=(cos, sin))
            return h

    ws, emb, target = weights()
    model = Stack()
    layers = model.layers
    emb_p = nn.Parameter(torch.tensor(emb))
    target_t = torch.tensor(target)
    if nested:
        params = [emb_p] + [p for l in layers for p in (l.attn.wq, l.attn.wo, l.wu)]
    else:
        params = [emb_p] + [p for l in layers for p in (l.wq, l.wo, l.wu)]

    # all_saved: weak references to what layers without the stand-in's hooks save, for the census
    plain = []

    def note_save(t):
        if not isinstance(t, nn.Parameter):
            plain.append(weakref.ref(t))
        return t
    outer = (lambda: torch.autograd.graph.saved_tensors_hooks(note_save, lambda t: t)) if all_saved else \
        contextlib.nullcontext

    def step():
        cos, sin = (torch.tensor(a) * 1.0 for a in rope())
        if keep is not None:
            keep.clear()
        plain.clear()
        with outer():
            h = model(emb_p * 1.0, cos, sin)
        if census is not None:
            census([r() for r in plain])
        loss = ((h - target_t) ** 2).mean()
        if keep:  # the hidden states the job kept, read after the last layer (as a model's output_hidden_states)
            loss = loss + sum(t.mean() for t in keep) * 1e-3
        if bump:  # the job changes the RoPE table in place after the forward: backward reads the new bytes
            cos.data.mul_(1.5)
        for p in params:
            p.grad = None
        loss.backward()
        return float(loss.item()), [p.grad.numpy().tobytes().hex() for p in params]

    return layers, step


def ms_parts(probe):
    import mindspore as ms
    from mindspore import nn, ops
    ms.set_context(mode=ms.PYNATIVE_MODE)

    class Layer(nn.Cell):
        def __init__(self, i, w):
            super().__init__()
            self.i = i
            for n, a in w.items():
                setattr(self, n, ms.Parameter(ms.Tensor(a), name="l%d_%s" % (i, n)))

        def construct(self, h, *, rotary_cos_sin):
            cos, sin = rotary_cos_sin
            probe(self.i, cos.untyped_storage().nbytes())
            q = ops.matmul(h, self.wq)
            half = DIM // 2
            q = q * cos + ops.cat([-q[..., half:], q[..., :half]], axis=-1) * sin
            h = h + ops.matmul(ops.tanh(q), self.wo)
            return h + ops.sigmoid(ops.matmul(h, self.wu)) * h

    ws, emb, target = weights()
    layers = nn.CellList([Layer(i, w) for i, w in enumerate(ws)])
    emb_p = ms.Parameter(ms.Tensor(emb), name="emb")
    target_t = ms.Tensor(target)
    params = [emb_p] + [p for l in layers for p in (l.wq, l.wo, l.wu)]

    def forward():
        cos, sin = (ms.Tensor(a) * 1.0 for a in rope())
        h = emb_p * 1.0
        for layer in layers:
            h = layer(h, rotary_cos_sin=(cos, sin))
        return ((h - target_t) ** 2).mean()

    grad_fn = ms.value_and_grad(forward, None, params)

    def step():
        loss, grads = grad_fn()
        return float(loss.asnumpy()), [g.asnumpy().tobytes().hex() for g in grads]

    return layers, step


def swap_tensors(layout):
    """The stand-in's SwapTensors of this step, in either layout."""
    if layout == "memory":
        from hyper_parallel.core.activation_memory.swap import SwapManager as M
        return [st for g in M().groups() for st in g.swap_tensors()]
    from hyper_parallel.core.activation_checkpoint.swap import SwapManager as M
    return [st for sts in M().groups.values() for st in sts if st is not None]


def swap_tensors_alive():
    """(how many, device bytes) of the stand-in's SwapTensors anything still holds (either layout)."""
    import gc
    gc.collect()
    n, seen = 0, {}
    for o in gc.get_objects():
        if type(o).__name__ == "SwapTensor" and type(o).__module__.startswith("hyper_parallel."):
            n += 1
            val = getattr(o, "val", None)
            s = val.untyped_storage() if hasattr(val, "untyped_storage") else None
            if s is not None and s.nbytes():
                seen[s.data_ptr()] = s.nbytes()
    return n, sum(seen.values())


def main():
    global LAYERS, SWAP  # pylint: disable=global-statement
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", choices=["torch", "mindspore"], required=True)
    ap.add_argument("--mode", choices=["noswap", "swap", "ownswap", "acswap"], required=True)
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--keep-inputs", action="store_true")
    ap.add_argument("--embed", action="store_true", help="torch: the first layer's input made inside the model")
    ap.add_argument("--nested", action="store_true",
                    help="torch, --mode swap: swap_wrapper on each layer's attention, the layers chained (its test_act_swap)")
    ap.add_argument("--layout", choices=["checkpoint", "memory"], default="checkpoint")
    ap.add_argument("--group-swap", action="store_true", help="--layout memory: swap_wrapper(..., group_swap=True)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--swap-yaml", help="torch, --mode swap: wire the swap from a MindFormers YAML's swap: section")
    ap.add_argument("--out", required=True)
    ap.add_argument("--bump-rope", action="store_true",
                    help="torch: scale cos in place between forward and backward (a copy back of stale bytes shows)")
    a = ap.parse_args()
    # Under msrun every process gets the same arguments. The scheduler trains nothing (a real job's waits in
    # mindspore.communication.init()); each worker writes into a directory of its own.
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        return 0
    if os.environ.get("RANK_ID") is not None:
        a.out = os.path.join(a.out, "rank" + os.environ["RANK_ID"])
    os.makedirs(a.out, exist_ok=True)
    probe = Probe(a.out)
    LAYERS, SWAP = a.layers, list(range(a.layers - 1))  # layers 0..N-2 swapped, each prefetched with the next
    held, saved = [], []

    def census(plain):
        seen = {}
        for st in swap_tensors(a.layout):
            s = st.val.untyped_storage()
            if s.nbytes():
                seen[s.data_ptr()] = s.nbytes()
        held.append(sum(seen.values()))
        for t in plain:
            if t is not None and t.untyped_storage().nbytes():
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        saved.append(sum(seen.values()))
    if a.framework == "torch":
        layers, step = torch_parts(probe, a.bump_rope, [] if a.keep_inputs else None,
                                   census if a.mode in ("swap", "acswap") else None, a.embed, a.nested,
                                   bool(a.swap_yaml))
    else:
        layers, step = ms_parts(probe)
    if a.mode == "ownswap":
        import torch
        OwnSwap(torch, layers)
    if a.mode == "swap":
        if a.layout == "memory":
            from hyper_parallel.core.activation_memory.api import swap_wrapper as memory_swap_wrapper
            from hyper_parallel.core.activation_memory.swap import SwapManager

            def swap_wrapper(module):
                return memory_swap_wrapper(module, group_swap=a.group_swap)
        else:
            from hyper_parallel.core.activation_checkpoint import SwapManager, swap_wrapper
        if a.swap_yaml:
            mindformers_swap(a.swap_yaml, layers, SwapManager, swap_wrapper)
        else:
            for i in SWAP:
                if a.nested:  # hyper-parallel's groups are the layers, the wrapped attention inside them
                    layers[i].attn = swap_wrapper(layers[i].attn)
                else:
                    layers[i] = swap_wrapper(layers[i])
            for i in SWAP:
                SwapManager().set_forward_prefetch_layer(layers[i], layers[i + 1])
    if a.mode == "acswap":
        import torch
        if a.layout == "memory":
            from hyper_parallel.core.activation_memory.api import CheckpointPolicy, checkpoint_wrapper
            from hyper_parallel.core.activation_memory.swap import SwapManager
        else:
            from hyper_parallel.core.activation_checkpoint import CheckpointPolicy, SwapManager, checkpoint_wrapper
        mm = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
              torch.ops.aten.matmul.default}

        def policy_fn(op):
            return CheckpointPolicy.MUST_SWAP if op in mm else CheckpointPolicy.MUST_RECOMPUTE
        for i in range(LAYERS):
            layers[i] = checkpoint_wrapper(layers[i], policy_fn=policy_fn, swap_inputs=True)
        for i in SWAP:  # by name, in another order than hyper-parallel's signature, as a job may call it
            SwapManager().set_forward_prefetch_layer(second_layer=layers[i + 1], first_layer=layers[i])
    released = [0, 0]
    if a.mode in ("swap", "acswap"):  # the stand-in's own count of what it released (SwapTensor.wait_offload)
        if a.layout == "memory":
            from hyper_parallel.core.activation_memory.swap import SwapTensor
        else:
            from hyper_parallel.core.activation_checkpoint.swap import SwapTensor
        wait = SwapTensor.wait_offload

        def counted(self):
            before = self.val.untyped_storage().nbytes()
            wait(self)
            after = self.val.untyped_storage().nbytes()
            if before and not after:
                released[0] += 1
                released[1] += before
        SwapTensor.wait_offload = counted
    losses, grads, left = [], None, []
    for i in range(a.steps):
        probe.step = i
        loss, grads = step()
        losses.append(loss)
        if a.mode == "acswap":
            left.append(swap_tensors_alive())
        print("step %d/%d: loss %.9g" % (i + 1, a.steps, loss), flush=True)
    with open(os.path.join(a.out, "result.json"), "w") as f:
        json.dump({"losses": [repr(x) for x in losses], "grads": grads, "released": released[0],
                   "released_bytes": released[1], "held": held, "saved": saved, "left": left}, f)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
