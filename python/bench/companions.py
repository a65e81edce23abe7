"""companions.py: what the framework companions (swapagent.torch, swapagent.mindspore) cost a training step,
and where that time goes. `make bench-companions` runs it; figures only, never an assertion.

The workloads are llama.py's Llama-shaped decoders (RoPE cos/sin passed as a keyword to every layer): the
llama shape (12 layers, hidden 64, layers 0-10 wrapped), for torch and MindSpore, and the wide one (4
layers, hidden 1024, layers 0-2 wrapped: layers that do realistic work), for torch; on CPU with one thread,
include_cpu=True (the agent moves CPU storages with memcpy). Each framework runs in three processes under the preloaded agent, one per agent setting (the
agent reads SWAPAGENT_POLICY and SWAPAGENT_MIN_BYTES at load):

    off        none | saved | hooks | python | off      (SWAPAGENT_POLICY=off)
    still      none | safe                      (safe, SWAPAGENT_MIN_BYTES above every storage: nothing moves)
    moves      none | safe                      (safe, SWAPAGENT_MIN_BYTES=1024: internal storages move)

none is the model without companion; hooks the framework's own cost of the hooks the companion uses, with
empty bodies (forward pre-hook with kwargs and forward hook, saved-tensor hooks that return the tensor,
one gradient hook per tensor crossing a layer), and saved the saved-tensor hooks of those alone (torch
scopes them to a layer with its forward hooks: those are in too); python the companion against a null
agent (its Python only: the ABI calls are Python functions that return at once); off and safe the
companion against the agent. Within a process the configurations take turns, blocks of --steps steps,
--rounds rounds; each figure is the best block. Time is wall-clock and the main thread's CPU time
(time.thread_time, which a loaded machine disturbs less: it does not count the time the thread waits for a
core).

µs per saved tensor is (step time with it - step time without) / saved tensors per step: everything the
companion adds (hooks, Python, ABI, agent) divided over the saves. The profile is measured directly on
extra steps: the time spent inside the companion's hooks (timers around its entry points) and inside each
ABI call (timers around the C functions), so that

    all-in = framework hooks (hooks - none) + companion Python (in hooks - in ABI) + ABI and agent (in ABI)

Under safe with moves the added time is split into the transfer work (moves - still: the storage ops
that release and restore, and the agent's copies) and the rest (still - none, the same work as off).

The wide shape's rows also give the median block against none's, the figure the companion's cost is judged by
there (docs/design.md, "Where each rule lives").

    python python/bench/companions.py [--framework torch,mindspore] [--shape llama,wide] [--rounds N] [--steps N]
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from frameworks import MindSpore, Removable, Torch

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.normpath(os.path.join(HERE, ".."))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
LIB = os.path.join(REPO, "build", "lib", "libswapagent.so")

PROCESSES = {  # name -> (agent environment, configurations)
    "off": ({"SWAPAGENT_POLICY": "off"}, ["none", "saved", "hooks", "python", "off"]),
    "still": ({"SWAPAGENT_POLICY": "safe", "SWAPAGENT_MIN_BYTES": str(1 << 40)}, ["none", "safe"]),
    "moves": ({"SWAPAGENT_POLICY": "safe", "SWAPAGENT_MIN_BYTES": "1024"}, ["none", "safe"]),
}
# The wide shape's steps take about half a second: only the rows its question needs (how much of a real
# step the companion costs), in two processes.
WIDE_PROCESSES = {
    "off": (PROCESSES["off"][0], ["none", "hooks", "off"]),
    "still": (PROCESSES["still"][0], ["none", "safe"]),
}
# rounds, steps per block: short blocks and many rounds, so that the best block of each configuration is
# one that ran undisturbed on a shared machine
DEFAULTS = {"torch": (30, 2), "mindspore": (20, 1)}
WIDE_DEFAULTS = (24, 1)  # the wide shape's steps are long: fewer, and one a block


# ---- one process: one framework, one agent setting --------------------------------------------------

def install(fw, config):
    """config's hooks on fw's layers."""
    if config == "none":
        return Removable([])
    if config in ("hooks", "saved"):
        return fw.install_hooks(saved_only=config == "saved")
    if config == "python":
        return fw.install_null()
    import llama
    return fw.companion().layer_swap(fw.layers, swap=range(len(llama.SWAP)), prefetch=None, include_cpu=True)


class Profile:
    """Timers around the companion's entry points (the hooks it registers call these) and around the
    agent's C functions, for a few extra steps."""
    ENTRY = ("forward_pre", "forward_post", "pack", "unpack", "backward_end")
    # The agent's C functions the companion calls: swapagent_call by the kind of its record, and the two
    # fixed ones of the hot path.
    ABI = tuple("swapagent_call " + k for k in ("region_enter", "region_exit", "save", "describe",
                                                "backward_enter", "backward_exit")) + \
        ("swapagent_save", "swapagent_unpack")

    def __init__(self):
        from swapagent import core
        self.core = core
        self.hook_s, self.hook_calls = 0.0, 0
        self.calls = collections.defaultdict(list)
        self.undo = []

    def timed(self, fn, sink):
        perf = time.perf_counter

        def call(*args):
            t = perf()
            try:
                return fn(*args)
            finally:
                sink(perf() - t)
        return call

    def add_hook_time(self, d):
        self.hook_s += d
        self.hook_calls += 1

    @staticmethod
    def overhead():
        """What one timed call adds to the time measured around it (best of many): subtracted."""
        prof = Profile.__new__(Profile)
        prof.hook_s, prof.hook_calls = 0.0, 0
        inner = prof.timed(lambda *a: None, prof.add_hook_time)
        outer = prof.timed(inner, lambda d: None)
        best = 1.0
        for _ in range(20):
            t = time.perf_counter()
            for _ in range(2000):
                inner(1)
            t1 = time.perf_counter()
            for _ in range(2000):
                (lambda *a: None)(1)
            best = min(best, ((t1 - t) - (time.perf_counter() - t1)) / 2000)
        del outer
        return max(best, 0.0)

    def wrap_companion(self):
        """Before layer_swap: the layers make their pack and unpack closures when they are made."""
        core = self.core
        entry = self.ENTRY
        if "_make_hooks" in core.Layer.__dict__:
            entry = tuple(n for n in entry if n not in ("pack", "unpack"))
            orig_make = core.Layer.__dict__["_make_hooks"]

            def make_hooks(layer):
                orig_make(layer)
                layer._pack = self.timed(layer._pack, self.add_hook_time)  # pylint: disable=protected-access
                layer._unpack = self.timed(layer._unpack, self.add_hook_time)  # pylint: disable=protected-access
            core.Layer._make_hooks = make_hooks  # pylint: disable=protected-access
            self.undo.append(lambda: setattr(core.Layer, "_make_hooks", orig_make))
        for cls, names in ((core.Layer, entry), (core._Chain, ("__call__",)),  # pylint: disable=protected-access
                           (core.Packed, ("__del__",))):
            for n in names:
                orig = cls.__dict__[n]
                setattr(cls, n, self.timed(orig, self.add_hook_time))
                self.undo.append(lambda cls=cls, n=n, orig=orig: setattr(cls, n, orig))

    def wrap_agent(self, agent):
        """Timers around the agent's C functions (its methods look them up on the agent at each call), the
        calls through swapagent_call by the kind of their record."""
        from swapagent import _abi
        perf, call = time.perf_counter, agent._call  # pylint: disable=protected-access

        def timed_call(rec, opts):
            t = perf()
            try:
                return call(rec, opts)
            finally:
                self.calls["swapagent_call " + _abi.CALL_NAMES[rec._obj.kind - 1]].append(perf() - t)
        for attr, w in (("_call", timed_call), ("save_c", self.timed(agent.save_c, self.calls["swapagent_save"].append)),
                        ("_unpack_c", self.timed(agent._unpack_c, self.calls["swapagent_unpack"].append))):  # pylint: disable=protected-access
            old = getattr(agent, attr)
            setattr(agent, attr, w)
            self.undo.append(lambda attr=attr, old=old: setattr(agent, attr, old))

    def restore(self):
        while self.undo:
            self.undo.pop()()

    def reset(self):
        for v in self.calls.values():
            v.clear()
        self.hook_s, self.hook_calls = 0.0, 0

    def block(self, steps, over):
        """Per step: the time inside the companion's entry points and inside the ABI calls, and the timers'
        own cost (over per timed call), which the block's time also holds."""
        n_abi = sum(len(v) for v in self.calls.values())
        return {"hook_s": (self.hook_s - over * (self.hook_calls + n_abi)) / steps,
                "abi_s": (sum(sum(v) for v in self.calls.values()) - over * n_abi) / steps,
                "timers_s": over * (self.hook_calls + n_abi) / steps,
                "calls": {k: [max(x - over, 0.0) for x in v] for k, v in self.calls.items()}}


def worker(opt):
    sys.path.insert(0, HERE)
    sys.path.insert(0, PKG)
    fw = Torch() if opt.framework == "torch" else MindSpore()
    configs = opt.configs.split(",")
    import llama
    res = {"framework": opt.framework, "version": fw.version, "configs": {}, "process": opt.process,
           "shape": llama.describe()}
    digests = {}
    for c in configs:  # warm up, and the numerics of one step under each configuration
        h = install(fw, c)
        fw.step()
        if c == "hooks":
            fw.packs[0] = 0
        loss = fw.step()
        if c == "hooks":
            res["saved_tensors"] = fw.packs[0]
        digests[c] = fw.digest(loss)
        res["configs"][c] = {"wall": [], "cpu": []}
        h.remove()
    res["digests"] = digests
    # The profile's block: the companion under the agent, with timers.
    timed = "off" in configs and "python" in configs  # the llama shape only
    if timed:
        res["configs"]["timed"] = {"wall": [], "cpu": [], "blocks": []}
        over = Profile.overhead()
    for _ in range(opt.rounds):
        for c in configs + (["timed"] if timed else []):
            prof = None
            if c == "timed":
                prof = Profile()
                prof.wrap_agent(prof.core.load())
                prof.wrap_companion()
            try:
                h = install(fw, "off" if c == "timed" else c)
                fw.step()
                if prof is not None:
                    prof.reset()
                w0, c0 = time.perf_counter(), time.thread_time()
                for _ in range(opt.steps):
                    fw.step()
                r = res["configs"][c]
                r["wall"].append((time.perf_counter() - w0) / opt.steps)
                r["cpu"].append((time.thread_time() - c0) / opt.steps)
                h.remove()
            finally:
                if prof is not None:
                    prof.restore()
            if prof is not None:
                r["blocks"].append(prof.block(opt.steps, over))
    if timed:
        r = res["configs"]["timed"]
        res["profile"] = r["blocks"][r["cpu"].index(min(r["cpu"]))]
        calls = collections.defaultdict(list)
        for b in r["blocks"]:
            for k, v in b.pop("calls").items():
                calls[k].extend(v)
        res["profile"]["medians"] = {k: sorted(v)[len(v) // 2] for k, v in calls.items() if v}
        res["profile"]["counts"] = {k: len(v) / (len(r["blocks"]) * opt.steps) for k, v in calls.items()}
        del r["blocks"]
    real = [c for c in configs if c in ("off", "safe")]
    if real:
        res["stats"] = stats_per_step(fw, real[0], max(3, 3 * opt.steps))
    with open(opt.out, "w") as f:
        json.dump(res, f)


def stats_per_step(fw, config, steps):
    """The agent's stats over steps more steps, and the time spent in the storage ops (resize_)."""
    from swapagent import core
    spent = [0.0, 0]
    sa = fw.companion()
    cls = sa.Torch if fw.name == "torch" else sa.MindSpore
    orig = cls.resize

    def resize(self, s, nbytes):
        t = time.perf_counter()
        try:
            return orig(self, s, nbytes)
        finally:
            spent[0] += time.perf_counter() - t
            spent[1] += 1
    h = install(fw, config)
    fw.step()
    before = core.stats()
    cls.resize = resize
    try:
        for _ in range(steps):
            fw.step()
    finally:
        cls.resize = orig
        h.remove()
    after = core.stats()
    keys = ("saves", "offloaded_bytes", "restored_bytes", "offloaded_storages", "restored_storages")
    out = {k: (after.get(k, 0) - before.get(k, 0)) / steps for k in keys}
    out["resize_s"], out["resizes"] = spent[0] / steps, spent[1] / steps
    out["policy"] = after.get("policy")
    return out


# ---- the driver: processes, then the figures ---------------------------------------------------------

def run_process(framework, process, rounds, steps, shape):
    env_add, configs = (PROCESSES if shape == "llama" else WIDE_PROCESSES)[process]
    env = dict(os.environ)
    env.update(env_add)
    env["SWAPAGENT_BENCH_SHAPE"] = shape
    out_dir = tempfile.mkdtemp(prefix="swapagent-bench-")
    env.update({"LD_PRELOAD": LIB, "SWAPAGENT_OUT": out_dir, "PYTHONPATH": PKG, "GLOG_v": "3",
                "SWAPAGENT_PREFETCH": "1"})
    out = os.path.join(out_dir, "result.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--framework", framework, "--process", process,
           "--configs", ",".join(configs), "--rounds", str(rounds), "--steps", str(steps), "--out", out]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0 or not os.path.exists(out):
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
        raise SystemExit("bench-companions: %s/%s failed (rc %d)" % (framework, process, p.returncode))
    with open(out) as f:
        res = json.load(f)
    subprocess.run(["rm", "-rf", out_dir], check=False)
    return res


def best(r, kind):
    return min(r[kind])


def report_rows(runs, rows, rounds, steps, median=False):
    """The heading and the table of step times for rows (label, process, configuration); median: also each
    row's median block against none's (cpu), the blocks having taken turns."""
    off = runs["off"]
    saves = off["saved_tensors"]
    print("%s, %s: %d saved tensors per step, %.0f swapagent_save calls; best of %d x %d steps" % (
        off["version"], off["shape"], saves, off["stats"]["saves"], rounds, steps))
    print("  %-32s %9s %7s %9s   %9s %7s %9s%s" % ("", "wall ms", "vs none", "us/saved", "cpu ms", "vs none",
                                                  "us/saved", "   median cpu vs none" if median else ""))
    for label, proc, c in rows:
        run = runs[proc]
        r, b = run["configs"][c], run["configs"]["none"]
        cells = []
        for kind in ("wall", "cpu"):
            t, t0 = best(r, kind), best(b, kind)
            if c == "none":
                cells.append("%9.2f %7s %9s" % (t * 1e3, "", ""))
            else:
                cells.append("%9.2f %+6.1f%% %9.2f" % (t * 1e3, (t / t0 - 1) * 100, (t - t0) / saves * 1e6))
        if median and c != "none":
            cells.append("%+6.1f%%" % ((statistics.median(r["cpu"]) / statistics.median(b["cpu"]) - 1) * 100))
        print("  %-32s %s" % (label, "   ".join(cells)))
    same = all(d == r["digests"]["none"] for r in runs.values() for d in r["digests"].values())
    print("  loss and gradients bit-identical to none in every configuration: %s" % ("yes" if same else "NO"))


def report(framework, runs, rounds, steps):
    off, still, moves = runs["off"], runs["still"], runs["moves"]
    saves = off["saved_tensors"]
    report_rows(runs, [("none", "off", "none"), ("saved-tensor hooks (empty)", "off", "saved"),
                       ("hooks (empty)", "off", "hooks"),
                       ("companion, null agent", "off", "python"), ("companion, off", "off", "off"),
                       ("none", "still", "none"), ("companion, safe, still", "still", "safe"),
                       ("none", "moves", "none"), ("companion, safe, moves", "moves", "safe")], rounds, steps)
    # the profile: where the time of a saved tensor goes (main-thread CPU, per saved tensor), from the
    # timed block that ran fastest, against none's fastest block
    cfg = off["configs"]
    us = lambda sec: sec / saves * 1e6  # noqa: E731
    none_cpu = best(cfg["none"], "cpu")
    prof = off["profile"]
    timed_cpu = best(cfg["timed"], "cpu") - prof["timers_s"]
    allin, py, abi = us(timed_cpu - none_cpu), us(prof["hook_s"] - prof["abi_s"]), us(prof["abi_s"])
    print("  split under off, per saved tensor (cpu; a block with timers, their own cost taken out): +%.2f us = "
          "companion Python %.2f + ABI and agent %.2f + the framework's hook calls and the rest %.2f" % (
              allin, py, abi, allin - py - abi))
    print("    for comparison: empty hooks %+.2f us (of which the saved-tensor hooks %+.2f us), the companion against "
          "a null agent %+.2f us (its Python without the agent)" % (
              us(best(cfg["hooks"], "cpu") - none_cpu), us(best(cfg["saved"], "cpu") - none_cpu),
              us(best(cfg["python"], "cpu") - none_cpu)))
    parts = []
    for name in Profile.ABI:
        if name in prof["medians"]:
            parts.append("%s %d x %.1f us" % (name.replace("swapagent_", ""), round(prof["counts"][name]),
                                               prof["medians"][name] * 1e6))
    print("    ABI calls per step (median): " + ", ".join(parts))
    # safe: transfer work vs the rest
    sc, mc = still["configs"], moves["configs"]
    rest = best(sc["safe"], "wall") - best(sc["none"], "wall")
    total = best(mc["safe"], "wall") - best(mc["none"], "wall")
    st = moves.get("stats", {})
    print("  safe with moves: +%.2f ms per step (wall) = transfer work %.2f ms (%.0f storages out, %.0f back, "
          "%.2f MB; storage ops %.2f ms of it) + the rest %.2f ms (safe with nothing to move)" % (
              total * 1e3, (total - rest) * 1e3, st.get("offloaded_storages", 0), st.get("restored_storages", 0),
              st.get("offloaded_bytes", 0) / 1e6, st.get("resize_s", 0) * 1e3, rest * 1e3))
    nones = [best(r["configs"]["none"], "cpu") for r in runs.values()]
    print("  noise: none's best block differs by %.2f ms (%.1f us per saved tensor) between the three processes" % (
        (max(nones) - min(nones)) * 1e3, (max(nones) - min(nones)) / saves * 1e6))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--framework", default="torch,mindspore")
    ap.add_argument("--rounds", type=int, default=0, help="blocks per configuration (best of)")
    ap.add_argument("--steps", type=int, default=0, help="steps per block")
    ap.add_argument("--shape", default="llama,wide", help="llama.py's shapes to run (torch only for wide)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--process", help=argparse.SUPPRESS)
    ap.add_argument("--configs", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    opt = ap.parse_args()
    if opt.worker:
        worker(opt)
        return
    if not os.path.exists(LIB):
        raise SystemExit("bench-companions: %s is missing: run `make build` first" % LIB)
    print("== companions: Llama-shaped decoders (RoPE cos/sin as keyword), CPU, one thread, include_cpu=True")
    for shape in opt.shape.split(","):
        for framework in opt.framework.split(","):
            if shape != "llama" and framework != "torch":
                continue  # MindSpore's CPU kernels make the wide model's step minutes long
            rounds, steps = DEFAULTS[framework] if shape == "llama" else WIDE_DEFAULTS
            rounds, steps = opt.rounds or rounds, opt.steps or steps
            if shape == "llama":
                runs = {p: run_process(framework, p, rounds, steps, shape) for p in PROCESSES}
                report(framework, runs, rounds, steps)
            else:
                runs = {p: run_process(framework, p, rounds, steps, shape) for p in WIDE_PROCESSES}
                report_rows(runs, [("none", "off", "none"), ("hooks (empty)", "off", "hooks"),
                                   ("companion, off", "off", "off"),
                                   ("none", "still", "none"), ("companion, safe, still", "still", "safe")],
                            rounds, steps, median=True)


if __name__ == "__main__":
    main()
