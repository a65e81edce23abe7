"""floor.py: issue 26's own check of the torch companion against the floor, the framework's cost of empty hooks
of the companion's kinds. `make bench-companions` runs it; figures only, never an assertion.

The model is the one the issue states (model() below: 12 layers, hidden 96, batch 64, cos/sin as keyword
inputs, layers 0-10 wrapped, 165 saved tensors per step; the issue gives no more of it), on CPU with one
thread, in one process under the preloaded agent with SWAPAGENT_POLICY=off.
Configurations, taking turns in that process:

    none       no hooks
    hooks      empty hooks of the companion's kinds: forward pre-hooks with kwargs, forward hooks, saved-tensor
               hooks, a gradient hook per tensor crossing a layer
    null       the companion, compiled hot path, against a null agent (frameworks.NullAgent: the agent's
               Python interface with nothing behind it, its region calls C callbacks): the companion's own
               cost, no agent's
    off-py     the companion, pure-Python hot path
    off-pyregion  the companion, compiled pack and unpack only: the region hooks and the gradient chains in
               Python (what the compiled path would be without its region part: the step-time difference to
               off is what _hot_region.c and _hot_grad.c buy per region)
    off-plain  the companion, compiled hot path, by the plain control calls (each one runs in the agent)
    off        the companion, compiled hot path (_hot.c), by queued calls (answered in C, run later)

Each figure is the least of 3 interleaved runs, each run the best of 5 blocks of 20 steps. The issue's
target: the companion within 1.3x of the empty hooks' step time.

Then where the time goes, inside the same steps: each hook's own time per call, the empty hooks' timed from
Python (the timer's own cost taken out) against the compiled companion's under off (the timed build of
_hot.c, build/bench/swapagent_hot.abi3.so: a probe at each entry point and in the parts of the region hooks),
best of the blocks; what the companion adds above the floor that is not inside its hooks is the rest (the
framework's work for what the hooks return and keep, and the caches they cool).

    python python/bench/floor.py [--runs N] [--blocks N] [--steps N]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
LIB = os.path.join(REPO, "build", "lib", "libswapagent.so")
TIMED_HOT = os.path.join(REPO, "build", "bench", "swapagent_hot.abi3.so")
WRAPPED = 11  # layers 0-10: one region each a step
CONFIGS = ("none", "hooks", "null", "off-py", "off-pyregion", "off-plain", "off")


def model():
    """The check's model: 12 layers of hidden 96 over a batch of 64 (one token each), each an RMSNorm, a
    projection with RoPE from the cos/sin keyword inputs, SiLU and an output projection: 15 saved tensors a
    layer, 165 per step for layers 0-10, as the issue states its model."""
    import torch
    from torch import nn
    dim, batch = 96, 64

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.n = nn.Parameter(torch.ones(dim))
            self.wq, self.wo = nn.Linear(dim, dim), nn.Linear(dim, dim)

        def forward(self, h, *, cos, sin):
            x = h * torch.rsqrt((h * h).mean(-1, keepdim=True) + 1e-6) * self.n
            q = self.wq(x)
            q = q * cos + torch.cat([-q[..., dim // 2:], q[..., :dim // 2]], -1) * sin
            return h + torch.tanh(self.wo(torch.nn.functional.silu(q)))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Layer() for _ in range(12)])
            self.inp = nn.Parameter(torch.randn(batch, dim))
            ang = torch.arange(batch, dtype=torch.float32)[:, None] * torch.linspace(0, 1, dim)[None]
            self.register_buffer("cos", ang.cos())
            self.register_buffer("sin", ang.sin())

        def forward(self):
            cos, sin = self.cos * 1.0, self.sin * 1.0  # made every step, as a framework's RoPE tables are
            h = self.inp
            for layer in self.layers:
                h = layer(h, cos=cos, sin=sin)
            return h.pow(2).mean()
    return Model()


# The split's rows: (label, the empty hooks' hook, the companion's probe); a probe of a part (indented) is
# inside the one before it.
SPLIT = (("pack", "pack", "pack"), ("unpack", "unpack", "unpack"), ("forward pre-hook", "pre", "pre"),
         ("  parameters' pointers", None, "pre.params"), ("  inputs' pointers and descriptions", None, "pre.inputs"),
         ("forward hook", "post", "post"), ("  saves' descriptions", None, "post.descs"),
         ("  region end (the report)", None, "post.report"), ("  output's gradient hook", None, "post.grads"),
         ("gradient hook", "grad", "grad"), ("end of backward", None, "end"), ("saved tensor freed", None, "free"))
SPLIT_TOP = ("pack", "unpack", "pre", "post", "grad", "end", "free")


def split(fw, blocks, steps):
    """Each hook's own time per step and per call, inside steps (the block of least step time): the empty
    hooks' ({hook: (seconds, calls)}) and the compiled companion's under off ({probe: (seconds, calls)})."""
    from swapagent import core
    clock = time.perf_counter
    acc = {}

    def wrap(name, fn):
        def timed(*a):
            t = clock()
            try:
                return fn(*a)
            finally:
                e = acc.setdefault(name, [0.0, 0])
                e[0] += clock() - t
                e[1] += 1
        return timed
    n = 100000  # the timer's own cost per call: two clock reads
    t = clock()
    for _ in range(n):
        clock()
        clock()
    over = (clock() - t) / n

    def best_block(read):
        best = None
        for _ in range(blocks):
            read()
            t = clock()
            for _ in range(steps):
                fw.step()
            el = (clock() - t) / steps
            got = read()
            if best is None or el < best[0]:
                best = (el, got)
        return {k: (s / steps, c / steps) for k, (s, c) in best[1].items()}

    def read_empty():
        got = {k: (s - c * over, c) for k, (s, c) in acc.items()}
        acc.clear()
        return got
    h = fw.install_hooks(wrap=wrap)
    fw.step()
    empty = best_block(read_empty)
    h.remove()
    hot, core._hot = core._hot, core.load_hot(TIMED_HOT)  # pylint: disable=protected-access
    try:
        h = fw.companion().layer_swap(fw.layers, swap=range(len(fw.layers)), prefetch=None, include_cpu=True)
        fw.step()
        comp = best_block(core._hot.timers)  # pylint: disable=protected-access
        h.remove()
    finally:
        core._hot = hot  # pylint: disable=protected-access
    return empty, comp


def _per_call(seconds, calls):
    return "%.2f" % (seconds / calls * 1e6) if calls else "-"


def print_split(empty, comp, per_step, above):
    """The split as a table, per call and per saved tensor above the empty hooks; above: the companion's
    whole cost above the floor per saved tensor (µs), of which the rest is outside its hooks."""
    print("  where the time goes: each hook's own time inside the steps (µs per call; the empty hooks timed from "
          "Python, their timer's cost taken out; the companion by the timed build's probes, under off)")
    print("  %-36s %10s %10s %10s %14s" % ("", "empty", "companion", "calls/step", "above/saved*"))
    for label, e_key, c_key in SPLIT:
        cs, cn = comp.get(c_key, (0.0, 0))
        es, en = empty.get(e_key, (0.0, 0)) if e_key else (0.0, 0)
        if not cn and not en:
            continue
        top = c_key in SPLIT_TOP
        print("  %-36s %10s %10s %10s %14s" % (label, _per_call(es, en) if e_key else "", _per_call(cs, cn),
                                               "%.0f" % cn if top else "",
                                               "%.2f" % ((cs - es) / per_step * 1e6) if top else ""))
    inside_e = sum(empty.get(k, (0.0, 0))[0] for k in SPLIT_TOP)
    inside_c = sum(comp.get(k, (0.0, 0))[0] for k in SPLIT_TOP)
    inside = (inside_c - inside_e) / per_step * 1e6
    print("  inside the hooks: empty %.3f ms a step, companion %.3f ms: %.2f µs per saved tensor above the floor, of "
          "the %.2f above it by the step times; the rest, %.2f, is outside the hooks (the framework's own work for "
          "what they return and keep; below 0 where calling the floor's Python hooks cost it more than calling the "
          "companion's C ones) or the noise between the blocks"
          % (inside_e * 1e3, inside_c * 1e3, inside, above, above - inside))
    print("  * µs per saved tensor: (companion - empty) time per step / saved tensors per step")


def child(args):
    sys.path[:0] = [HERE, os.path.join(REPO, "python")]
    import torch
    import frameworks

    class Check(frameworks.Torch):
        def __init__(self):  # pylint: disable=super-init-not-called
            self.torch = torch
            torch.set_num_threads(1)
            torch.manual_seed(0)
            self.model = model()
            self.layers = list(self.model.layers[:WRAPPED])

    fw = Check()
    swap = range(len(fw.layers))

    def install(config):
        if config == "none":
            return frameworks.Removable([])
        if config == "hooks":
            return fw.install_hooks()
        if config == "null":
            return fw.install_null()
        from swapagent import core
        import swapagent.torch as companion
        core.hot_module()
        hot, push = core._hot, companion._push_hooks  # pylint: disable=protected-access
        if config.endswith("-py"):
            core._hot = None  # pylint: disable=protected-access
        if config == "off-pyregion":
            # No torch push and pop: the Python region hooks (swapagent.torch._install); a view of the compiled
            # module whose Chain is core._Chain: the Python gradient chains, for as long as it is installed.
            companion._push_hooks = None  # pylint: disable=protected-access
            view = types.SimpleNamespace(**{k: getattr(hot, k) for k in dir(hot) if not k.startswith("__")})
            view.Chain = core._Chain  # pylint: disable=protected-access
            core._hot = view  # pylint: disable=protected-access
        agent = core.load()
        agent.set_queued(config != "off-plain")
        try:
            h = fw.companion().layer_swap(fw.layers, swap=swap, prefetch=None, include_cpu=True)
        finally:
            companion._push_hooks = push  # pylint: disable=protected-access
            if config != "off-pyregion":
                core._hot = hot  # pylint: disable=protected-access

        class Undo:  # the plain calls until the companion is removed
            def remove(self):
                h.remove()
                core._hot = hot  # pylint: disable=protected-access
                agent.set_queued(True)
        return Undo()

    h = fw.install_hooks()  # its pack hook counts the saved tensors
    fw.step()
    per_step = fw.packs[0]
    h.remove()

    digests, least = {}, {c: float("inf") for c in CONFIGS}
    for _ in range(args.runs):
        for config in CONFIGS:
            h = install(config)
            loss = fw.step()  # warm: the first step makes the companion's caches
            digests.setdefault(config, set()).add(fw.digest(loss))
            best = float("inf")
            for _ in range(args.blocks):
                t = time.perf_counter()
                for _ in range(args.steps):
                    fw.step()
                best = min(best, (time.perf_counter() - t) / args.steps)
            h.remove()
            least[config] = min(least[config], best)
    split_figures = split(fw, args.blocks * 2, 10) if os.path.exists(TIMED_HOT) else None
    return per_step, least, all(d == digests["none"] for d in digests.values()), split_figures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        per_step, least, same, split_figures = child(args)
        print(json.dumps({"per_step": per_step, "least": least, "same": same, "split": split_figures}))
        return
    if not os.path.exists(LIB):
        sys.exit("floor.py: %s is missing (make build)" % LIB)
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, LD_PRELOAD=LIB, SWAPAGENT_OUT=out, SWAPAGENT_POLICY="off")
        p = subprocess.run([sys.executable, __file__, "--child", "--runs", str(args.runs), "--blocks",
                            str(args.blocks), "--steps", str(args.steps)], env=env, capture_output=True,
                           text=True, check=False)
    if p.returncode != 0:
        sys.exit("floor.py: the measuring process failed (%d):\n%s" % (p.returncode, p.stderr[-2000:]))
    got = json.loads(p.stdout.strip().splitlines()[-1])
    per_step, same, least = got["per_step"], got["same"], got["least"]
    print("== companions against the floor (issue 26's check): 12 layers, hidden 96, batch 64, cos/sin as keyword "
          "inputs, layers 0-10 wrapped, %d saved tensors per step; least of %d interleaved runs of best of %d x %d steps"
          % (per_step, args.runs, args.blocks, args.steps))
    print("  %-28s %9s %9s %12s" % ("", "ms/step", "vs hooks", "us/saved*"))
    for c, name in zip(CONFIGS, ("none", "empty hooks (the floor)", "companion, null agent",
                                 "companion, off, python", "companion, off, py. regions",
                                 "companion, off, plain calls",
                                 "companion, off, compiled")):
        above = (least[c] - least["hooks"]) / per_step * 1e6
        print("  %-28s %9.2f %8.2fx %12s" % (name, least[c] * 1e3, least[c] / least["hooks"],
                                              "%.1f" % above if c not in ("none", "hooks") else ""))
    print("  * above the floor, per saved tensor; target: the companion within 1.3x of the empty hooks")
    print("  the compiled path's region hooks and gradient chains: %.0f µs a region less than in Python (py. regions "
          "- compiled, %d regions a step)" % ((least["off-pyregion"] - least["off"]) / WRAPPED * 1e6, WRAPPED))
    print("  loss and gradients bit-identical to none in every configuration: %s" % ("yes" if same else "NO"))
    if got["split"] is None:
        print("  (no split: %s is missing; make bench-companions builds it)" % TIMED_HOT)
    else:
        print_split(*got["split"], per_step, (least["off"] - least["hooks"]) / per_step * 1e6)


if __name__ == "__main__":
    main()
