"""run_case.py owns one training run of the test decoder stack (models.py) in its own process, so each
policy gets its own agent (the agent reads SWAPAGENT_POLICY at load). It writes a JSON result: per-step
loss and gradient digests (gradients also as .npy files for bitwise comparison), what each swapped group
saved with the agent's keep reason and state, which input tensors were still alive after the forward
pass, the companion's backward ABI calls in order (enter, unpack, exit) with the handles each group saved,
the warnings raised, the hooks left after handle.remove(), and the agent's stats.

    python run_case.py --framework torch|mindspore --mode MODE --model decoder|fanout --steps N --out DIR

MODE: noswap (no companion), swap (the companion on models.SWAP), and without companion nor agent:
fullhooks (empty register_full_backward_pre_hook/register_full_backward_hook on the SWAP layers: what the
torch companion used to register) or tensorhooks (empty Tensor.register_hook on every gradient-taking
input and output of the SWAP layers: what it registers now).
"""

import argparse
import gc
import hashlib
import json
import os
import sys
import warnings
import weakref

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

LR = 0.05


def digest(arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


class Probe:
    """The test's own hooks (registered after the companion's): storage pointers of every layer's
    positional and keyword inputs and outputs, and weak references to the inputs of layer 0."""

    def __init__(self, ptr):
        self.ptr = ptr
        self.inputs = {}   # layer index -> {"pos": [...], "cos": p, "sin": p, "mask": p}
        self.outputs = {}  # layer index -> {"h": p, "v": p}
        self.weak = {}     # name -> weakref of layer 0's input tensors in the inspected step
        self.capture_weak = False

    def pre(self, i):
        def hook(_m, args, kwargs):
            self.inputs[i] = {"pos": [self.ptr(a) for a in args],
                              **{k: self.ptr(v) for k, v in kwargs.items()}}
            if i == 0 and self.capture_weak:
                # Before the agent can fault on them: which storages are the shared RoPE inputs.
                print("rope cos=%#x sin=%#x mask=%#x" % (self.ptr(kwargs["cos"]), self.ptr(kwargs["sin"]),
                                                         self.ptr(kwargs["mask"])), flush=True)
                self.weak = {"h": weakref.ref(args[0]), **{k: weakref.ref(v) for k, v in kwargs.items()}}
        return hook

    def post(self, i):
        def hook(_m, _args, out):
            if isinstance(out, dict):  # the fan-out model's nested outputs
                out = (out["hidden"], out["extra"][0])
            self.outputs[i] = {"h": self.ptr(out[0]), "v": self.ptr(out[1])}
        return hook


class Recorder:
    """Records the companion's backward calls to the agent, in order: ("enter", group), ("exit", group),
    ("unpack", handle). Wraps the methods on the agent object the companion's layers call."""

    def __init__(self, agent):
        self.events = []
        for kind in ("backward_enter", "backward_exit", "unpack"):
            setattr(agent, kind, self._wrap(kind, getattr(agent, kind)))

    def _wrap(self, kind, fn):
        short = {"backward_enter": "enter", "backward_exit": "exit", "unpack": "unpack"}[kind]

        def call(arg):
            self.events.append([short, arg])
            return fn(arg)
        return call

    def take(self):
        ev, self.events = self.events, []
        return ev


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", required=True, choices=["torch", "mindspore"])
    ap.add_argument("--mode", required=True, choices=["noswap", "swap", "fullhooks", "tensorhooks"])
    ap.add_argument("--model", default="decoder", choices=["decoder", "fanout"])
    ap.add_argument("--grad-from", type=int, default=0,
                    help="ask the backward for the gradients of layers >= N only (0: every parameter)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-remove", action="store_true", help="skip the handle.remove() step")
    opt = ap.parse_args()
    os.makedirs(opt.out, exist_ok=True)
    fw = Torch() if opt.framework == "torch" else MindSpore()
    fw.grad_from = opt.grad_from

    warnings.simplefilter("always")
    caught = warnings.catch_warnings(record=True)
    warned = caught.__enter__()
    model = fw.model(fanout=opt.model == "fanout")
    layers = list(model.layers)
    res = {"framework": opt.framework, "mode": opt.mode, "model": opt.model, "steps": [], "groups": {}}
    probe = Probe(fw.ptr)
    probe_handles = []
    for i, layer in enumerate(layers):
        probe_handles += fw.probe(layer, probe.pre(i), probe.post(i))

    handle, sa, rec = None, None, None
    if opt.mode == "swap":
        sa = fw.companion()
        if os.environ.get("SWAPAGENT_TEST_PLAIN_CALLS") == "1":  # the test's switch: no queued calls
            sa.core.load().set_queued(False)
        handle = sa.layer_swap(layers, swap=models.SWAP, prefetch=1, include_cpu=True)
        res["groups_wrapped"] = handle.groups
        agent = sa.core.load()
        res["agent"] = {"preloaded": agent.preloaded, "path": agent.path, "queued": agent.queued}
        rec = Recorder(agent)
        res["backward_module_hooks"] = fw.backward_hooks(layers)
    elif opt.mode in ("fullhooks", "tensorhooks"):
        probe_handles += fw.empty_hooks(opt.mode, [layers[i] for i in models.SWAP])

    def inspect_groups():
        # After the whole forward pass, before backward: what the agent decided for every save.
        if handle is None:
            return
        for li in handle.layers:
            idx = int(li.group.split(".")[1])
            roles = {}
            ins = probe.inputs[idx]
            for n, p in enumerate(ins["pos"]):
                roles.setdefault(p, "pos%d" % n)
            for k in ("cos", "sin", "mask"):
                roles.setdefault(ins[k], k)
            roles.setdefault(probe.outputs[idx]["v"], "out_v")
            roles.setdefault(probe.outputs[idx]["h"], "out_h")
            entries = []
            for h, ptr, nbytes, flags in li.saved:
                entries.append({"handle": h, "ptr": ptr, "nbytes": nbytes, "flags": flags,
                                "role": roles.get(ptr, "param" if flags else ""),
                                "reason": sa.core.KEEP_REASONS[r] if (r := sa_keep(h)) >= 0 else r,
                                "state": sa_state(h)})
            res["groups"][li.group] = entries

    def sa_keep(h):
        return sa.core.load().keep_reason(h)

    def sa_state(h):
        return sa.core.load().state(h)

    for step in range(opt.steps):
        first = step == 0
        probe.capture_weak = first
        loss, grads, alive = fw.step(model, inspect_groups if first else None, probe if first else None)
        if first:
            res["alive_after_forward"] = alive
        gc.collect()
        if first:
            res["alive_after_step"] = sorted(k for k, w in probe.weak.items() if w() is not None)
            probe.weak = {}
        for n, g in enumerate(grads):
            np.save(os.path.join(opt.out, "grad.%d.%d.npy" % (step, n)), g)
        res["steps"].append({"loss": float(loss), "loss_hex": np.float32(loss).tobytes().hex(),
                             "grad_digest": digest(grads), "grad_norm": float(np.sqrt(sum(
                                 float((g.astype(np.float64) ** 2).sum()) for g in grads)))})
        if rec is not None:
            # this step's backward calls, and the handles each group saved in this step's forward
            res["steps"][-1]["abi"] = rec.take()
            res["steps"][-1]["handles"] = {li.group: [e[0] for e in li.saved] for li in handle.layers}
            # what the agent decided so far, and the host memory it holds for released storages
            st = sa.stats()
            res["steps"][-1]["agent"] = {k: st[k] for k in ("kept", "internal", "offloaded_storages", "saved_bytes")}
        print("step %d/%d: loss %.9g, grad_norm %.9g" % (step + 1, opt.steps, loss,
                                                          res["steps"][-1]["grad_norm"]), flush=True)
        fw.sgd(model, grads)

    if sa is not None:
        res["stats"] = sa.stats()
        res["registry_left"] = len(sa.core.registry)
        res["registry_errors"] = list(sa.core.registry.errors)
    # handle.remove(): afterwards no companion hook is left and one more step matches a run that never
    # had one (the noswap run does the same extra step).
    for h in probe_handles:
        h.remove()
    if handle is not None and not opt.no_remove:
        handle.remove()
    res["hooks_left"] = fw.hooks_left(layers)
    saves_before = sa.stats().get("saves") if sa is not None else None
    loss, grads, _ = fw.step(model, None, None)
    res["after_remove"] = {"loss_hex": np.float32(loss).tobytes().hex(), "grad_digest": digest(grads)}
    if sa is not None:
        res["after_remove"]["agent_saves_delta"] = sa.stats().get("saves", 0) - (saves_before or 0)
    caught.__exit__(None, None, None)
    res["warnings"] = sorted({"%s: %s" % (w.category.__name__, w.message) for w in warned})
    with open(os.path.join(opt.out, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
    print("done", flush=True)


class Harness:
    """What the cases need from a framework beyond its model and training step: the same for both."""
    companion_module = None
    grad_from = 0

    def params(self, model):
        """The parameters whose gradients the step asks for: all, or those of layers >= grad_from."""
        if not self.grad_from:
            return self.all_params(model)
        return [p for i, l in enumerate(model.layers) if i >= self.grad_from for p in self.all_params(l)]

    def companion(self):
        import importlib
        import swapagent.core
        sa = importlib.import_module(self.companion_module)
        sa.core = swapagent.core
        return sa

    def ptr(self, t):
        s = t.untyped_storage()
        return s.data_ptr() if s.nbytes() else 0

    def probe(self, layer, pre, post):
        return [layer.register_forward_pre_hook(pre, with_kwargs=True), layer.register_forward_hook(post)]


class Torch(Harness):
    def __init__(self):
        import torch
        self.torch = torch
        torch.manual_seed(0)
        torch.use_deterministic_algorithms(True)
        torch.set_num_threads(1)

    def model(self, fanout=False):
        return models.torch_model(fanout=fanout)

    companion_module = "swapagent.torch"

    def all_params(self, module):
        return list(module.parameters())

    def step(self, model, inspect, probe):
        params = self.params(model)
        for p in model.parameters():
            p.grad = None
        loss = model()
        alive = None
        if probe is not None:
            gc.collect()
            alive = sorted(k for k, w in probe.weak.items() if w() is not None)
        if inspect is not None:
            inspect()
        if self.grad_from:
            # a backward that needs no gradient of layer grad_from's input: its hook never fires
            grads = [g.detach().numpy().copy() for g in self.torch.autograd.grad(loss, params)]
        else:
            loss.backward()
            grads = [p.grad.detach().numpy().copy() for p in params]
        return loss.item(), grads, alive

    def sgd(self, model, grads):
        with self.torch.no_grad():
            for p, g in zip(self.params(model), grads):
                p -= LR * self.torch.tensor(g)

    def hooks_left(self, layers):
        n = 0
        for m in layers:
            for attr in ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks",
                         "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs",
                         "_forward_hooks_always_called"):
                n += len(getattr(m, attr, {}) or {})
        return n

    def backward_hooks(self, layers):
        """Module backward hooks (full or not) on the layers: the companion registers none."""
        n = 0
        for m in layers:
            n += len(m._backward_pre_hooks) + len(m._backward_hooks)  # pylint: disable=protected-access
            n += int(m._is_full_backward_hook is not None)  # pylint: disable=protected-access
        return n

    def empty_hooks(self, kind, layers):
        """Hooks that do nothing, registered without the companion: what the torch companion used to
        register (module full backward hooks) or what it registers now (tensor gradient hooks)."""
        torch = self.torch
        if kind == "fullhooks":
            hs = []
            for m in layers:
                hs.append(m.register_full_backward_pre_hook(lambda _m, _g: None))
                hs.append(m.register_full_backward_hook(lambda _m, _gi, _go: None))
            return hs

        def hook_all(obj):
            if isinstance(obj, torch.Tensor):
                if obj.requires_grad:
                    obj.register_hook(lambda _g: None)
            elif isinstance(obj, (tuple, list)):
                for v in obj:
                    hook_all(v)
            elif isinstance(obj, dict):
                for v in obj.values():
                    hook_all(v)

        def pre(_m, args, kwargs):
            hook_all(args)
            hook_all(kwargs)

        def post(_m, _args, out):
            hook_all(out)
        hs = []
        for m in layers:
            hs.append(m.register_forward_pre_hook(pre, with_kwargs=True))
            hs.append(m.register_forward_hook(post))
        return hs


class MindSpore(Harness):
    def __init__(self):
        import mindspore as ms
        self.ms = ms
        ms.set_device("CPU")
        ms.set_context(mode=ms.PYNATIVE_MODE)
        ms.set_seed(0)

    def model(self, fanout=False):
        return models.ms_model(fanout=fanout)

    companion_module = "swapagent.mindspore"

    def all_params(self, cell):
        return cell.trainable_params()

    def step(self, model, inspect, probe):
        ms = self.ms
        params = self.params(model)
        state = {}

        def fwd():
            loss = model()
            if probe is not None:
                gc.collect()
                state["alive"] = sorted(k for k, w in probe.weak.items() if w() is not None)
            if inspect is not None:
                inspect()
            return loss

        loss, grads = ms.value_and_grad(fwd, None, params)()
        return float(loss.asnumpy()), [g.asnumpy().copy() for g in grads], state.get("alive")

    def sgd(self, model, grads):
        for p, g in zip(self.params(model), grads):
            p.set_data(self.ms.Tensor(p.asnumpy() - LR * g))

    def hooks_left(self, layers):
        n = 0
        for c in layers:
            for attr in ("_forward_pre_hook", "_forward_hook", "_backward_pre_hook", "_backward_hook",
                         "_forward_pre_hook_with_kwargs", "_forward_hook_with_kwargs"):
                n += len(getattr(c, attr, {}) or {})
            n += c._saved_tensors_pack_hook is not None  # pylint: disable=protected-access
        return n

    def backward_hooks(self, layers):
        """Cell backward hooks on the layers: the companion registers none."""
        return sum(len(getattr(c, a, {}) or {}) for c in layers for a in ("_backward_pre_hook", "_backward_hook"))

    def empty_hooks(self, kind, layers):
        raise SystemExit("--mode %s: torch only" % kind)


if __name__ == "__main__":
    main()
