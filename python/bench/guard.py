"""guard.py: what the guard costs a training step whose own swap (the hyper-parallel stand-in of the tests)
does the copies. `make bench-companions` runs it after the companions' bench; figures only.

The workloads are llama.py's torch decoders (position_embeddings=(cos, sin) as a keyword): the llama shape
(12 layers, hidden 64, layers 0-10 wrapped) and the wide one (4 layers, hidden 1024, layers 0-2 wrapped), by
the stand-in's swap_wrapper and wired with prefetch 1, on CPU, one thread,
the stand-in's device check forced on. Its swap policy keeps the decoder's shared inputs (cos, sin, the
mask) itself, MindFormers 2.1.0's workaround, so the job is correct without the guard too. The script runs
under `swapagent run --policy safe`, so the guard is installed as in a real job; in one process the blocks
take turns between the guard on and the guard switched to pass-through (every wrapper calls straight
through), --rounds rounds of --steps steps each, and the best block of each counts:

    µs per saved tensor = (step with the guard - step without) / the stand-in's saved tensors per step

    python python/bench/guard.py --child   (run by `make bench-companions` under swapagent run)
"""

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
CLI = os.path.join(REPO, "build", "bin", "swapagent")
STANDIN = os.path.join(REPO, "python", "tests", "standin")


def child(rounds, steps):
    import torch
    torch.set_num_threads(1)
    sys.path.insert(0, HERE)
    import llama
    from hyper_parallel.core.activation_checkpoint import CheckpointPolicy, SwapManager, swap_wrapper
    from hyper_parallel.core.activation_checkpoint.swap import SwapTensor
    from swapagent import guard

    model = llama.torch_model()
    shared = set()

    def keep_shared(t):  # MindFormers' workaround: the decoder's shared inputs are not swapped
        return CheckpointPolicy.MUST_SAVE if t.untyped_storage().data_ptr() in shared else CheckpointPolicy.MUST_SWAP

    layers = model.model.layers if hasattr(model, "model") else model.layers
    for i in llama.SWAP:
        layers[i] = swap_wrapper(layers[i], policy_fn=keep_shared)
    for i in llama.SWAP:
        SwapManager().set_forward_prefetch_layer(layers[i], layers[i + 1])

    def capture(_m, _args, kwargs):
        shared.clear()
        for v in list(kwargs.values()):
            for t in (v if isinstance(v, (tuple, list)) else (v,)):
                if isinstance(t, torch.Tensor):
                    shared.add(t.untyped_storage().data_ptr())
    for i in llama.SWAP:
        layers[i].register_forward_pre_hook(capture, with_kwargs=True, prepend=True)

    saves = [0]
    init = SwapTensor.__init__

    def counted(self, *a, **k):
        saves[0] += 1
        init(self, *a, **k)
    SwapTensor.__init__ = counted

    def step():
        for p in model.parameters():
            p.grad = None
        loss = model()
        loss.backward()
        return float(loss.item())

    g = guard._guard  # pylint: disable=protected-access
    if not guard._installed or g.failed:  # pylint: disable=protected-access
        sys.exit("guard.py --child: the guard is not installed (run it under `swapagent run`)")
    losses = {}
    best = {"on": float("inf"), "off": float("inf")}
    for _ in range(2):  # warm-up: the first steps allocate and wire
        step()
    saves[0] = 0
    step()
    per_step = saves[0]
    for _ in range(rounds):
        for mode in ("on", "off"):
            g.failed = mode == "off"
            t0 = time.perf_counter()
            for _ in range(steps):
                losses[mode] = step()
            best[mode] = min(best[mode], (time.perf_counter() - t0) / steps)
    g.failed = False
    st = g.agent and __import__("json").loads(g.agent.stats_json())
    d = best["on"] - best["off"]
    print("  torch, llama.py decoder (%s), swapped by the stand-in, %d saved tensors per step, best of %d blocks "
          "of %d steps" % (llama.describe(), per_step, rounds, steps))
    print("    the stand-in's swap alone:    %8.2f ms per step" % (best["off"] * 1e3))
    print("    with the guard (safe):        %8.2f ms per step  (x%.3f)" % (best["on"] * 1e3, best["on"] / best["off"]))
    print("    the guard per saved tensor:   %8.2f us" % (d * 1e6 / max(per_step, 1)))
    print("    loss equal with and without:  %s; the guard allowed %d releases, refused %d" % (
        losses["on"] == losses["off"], st.get("guard_released", 0), st.get("guard_kept", 0)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--rounds", type=int, default=0, help="blocks per mode (0: 15 for llama, 16 for wide)")
    ap.add_argument("--steps", type=int, default=0, help="steps per block (0: 2 for llama, 1 for wide)")
    ap.add_argument("--shape", default="llama,wide", help="llama.py's shapes to run")
    a = ap.parse_args()
    if a.child:
        child(a.rounds, a.steps)
        return 0
    rc = 0
    print("== the guard's cost (python/bench/guard.py): the job's own swap asks the agent before each release")
    for shape in a.shape.split(","):
        rounds, steps = {"llama": (15, 2)}.get(shape, (16, 1))
        rc = rc or run(shape, a.rounds or rounds, a.steps or steps)
    return rc


def run(shape, rounds, steps):
    """One child under `swapagent run --policy safe` on llama.py's shape."""
    env = dict(os.environ)
    env.update({"PYTHONPATH": STANDIN, "HYPER_PARALLEL_STANDIN_DEVICE": "1", "SWAPAGENT_MIN_BYTES": "1024",
                "OMP_NUM_THREADS": "1", "SWAPAGENT_BENCH_SHAPE": shape})
    with __import__("tempfile").TemporaryDirectory() as out:
        p = subprocess.run([CLI, "run", "--policy", "safe", "--out", out, "--", sys.executable, os.path.abspath(__file__),
                            "--child", "--rounds", str(rounds), "--steps", str(steps)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
