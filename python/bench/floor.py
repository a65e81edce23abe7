"""floor.py: issue 26's own check of the torch companion against the floor, the framework's cost of empty hooks
of the companion's kinds. `make bench-companions` runs it; figures only, never an assertion.

The model is the one the issue states (model() below: 12 layers, hidden 96, batch 64, cos/sin as keyword
inputs, layers 0-10 wrapped, 165 saved tensors per step; the issue gives no more of it), on CPU with one
thread, in one process under the preloaded agent with SWAPAGENT_POLICY=off.
Configurations, taking turns in that process:

    none       no hooks
    hooks      empty hooks of the companion's kinds: forward pre-hooks with kwargs, forward hooks, saved-tensor
               hooks, a gradient hook per tensor crossing a layer
    null       the companion against a null agent (frameworks.NullAgent: the agent's Python interface with
               nothing behind it): the companion's own cost, no agent's
    off-plain  the companion by the plain control calls (each one runs in the agent)
    off        the companion by queued calls (answered in C, run later)

Each figure is the least of 3 interleaved runs, each run the best of 5 blocks of 20 steps. The issue's
target: the companion within 1.3x of the empty hooks' step time.

    python python/bench/floor.py [--runs N] [--blocks N] [--steps N]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
LIB = os.path.join(REPO, "build", "lib", "libswapagent.so")
WRAPPED = 11  # layers 0-10: one region each a step
CONFIGS = ("none", "hooks", "null", "off-plain", "off")


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
        agent = core.load()
        agent.set_queued(config != "off-plain")
        h = fw.companion().layer_swap(fw.layers, swap=swap, prefetch=None, include_cpu=True)

        class Undo:  # the plain calls until the companion is removed
            def remove(self):
                h.remove()
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
    return per_step, least, all(d == digests["none"] for d in digests.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        per_step, least, same = child(args)
        print(json.dumps({"per_step": per_step, "least": least, "same": same}))
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
                                 "companion, off, plain calls", "companion, off")):
        above = (least[c] - least["hooks"]) / per_step * 1e6
        print("  %-28s %9.2f %8.2fx %12s" % (name, least[c] * 1e3, least[c] / least["hooks"],
                                              "%.1f" % above if c not in ("none", "hooks") else ""))
    print("  * above the floor, per saved tensor; target: the companion within 1.3x of the empty hooks")
    print("  loss and gradients bit-identical to none in every configuration: %s" % ("yes" if same else "NO"))


if __name__ == "__main__":
    main()
