"""anchors.py: swapagent against what a user would pick instead, on the real transformers Llama of the test
suite (examples/llama_torch.py: LlamaForCausalLM, 12 layers, hidden 64, eager attention, float32, CPU, one
thread), decoder layers 0-10 wrapped, side by side in one run. `make bench-anchors` runs it; figures only.

Settings, each in its own process:
    none          no offload
    save_on_cpu   torch.autograd.graph.save_on_cpu(pin_memory=False), entered for layers 0-10 (forward hooks)
    torchtune     OffloadActivations of torchtune 0.6.1: it cannot run on CPU (see TORCHTUNE); its selection
                  rule (every saved tensor of 1024 bytes or more that is not a parameter or buffer, each save
                  copied on its own) is applied to the same saves and counted
    safe          swapagent.torch.layer_swap, swapagent run --policy safe (SWAPAGENT_MIN_BYTES=1024)
    outputs-only  the same under --policy outputs-only, the behaviour before hyper-parallel's fix
    guard         the hyper-parallel stand-in's swap_wrapper (python/tests/standin) on layers 0-10, prefetch
                  1, unmodified, under swapagent run --policy safe: the guard keeps what it must not release

Per setting: the bytes moved to the host and back per step; the bytes freed at the peak, which on CPU is the
bytes of saved storages released when the forward ends (before the backward starts, where saved
activations peak); the step time relative to none (the least of --steps steps after one warm-up, over
--rounds rounds of every setting in turn, each in its own process); whether every loss and every gradient equals none's, bit for bit.

How each is measured:
- save_on_cpu and torchtune moved: the bytes of each tensor their pack hook copies (each save copies its
  view on a device: save_on_cpu's pack copies the tensor, unpack copies it back). On CPU save_on_cpu's copy
  is tensor.cpu(), the tensor itself: its step time is its hooks' only.
- all-offload freed: a census step in the none process replaces every saved tensor of layers 0-10 by a copy,
  as an offload to the host does, and reads at the forward's end which of the original storages are gone
  (torch's storage weak references): what save_on_cpu frees. The boundary tensors among them (the layers'
  inputs and outputs, RoPE cos/sin included) are what a rule by roles keeps; swapagent keeps those that
  something else still holds (RoPE) and moves the hidden states entering layers 1-9, which nothing but
  their layer's saved tensors holds once the next layer is entered; torchtune frees those storages all of
  whose saves its rule moves.
- swapagent moved and freed: the agent's own stats (offloaded, restored, saved_bytes_peak: the most bytes
  it held released at once; a release is resize_(0), which frees a storage whoever else refers to it). The
  guard's: the stand-in's own count of the storages it released (resize_(0)) and copied back, all of them
  released by the forward's end.

The same for MindFormers' DeepSeek-V3 on MindSpore (examples/deepseek_v3_mindspore.py's): none; all-offload,
a saved-tensor hook on each layer that copies every saved tensor to the host (MindSpore has no save_on_cpu);
safe; outputs-only.

    python python/bench/anchors.py [--steps N] [--rounds N] [--model llama|deepseek|both]
"""

import argparse
import gc
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.normpath(os.path.join(HERE, ".."))
REPO = os.path.normpath(os.path.join(PKG, ".."))
CLI = os.path.join(REPO, "build", "bin", "swapagent")
STANDIN = os.path.join(PKG, "tests", "standin")
SWAP = list(range(11))
TORCHTUNE = ("torchtune 0.6.1's OffloadActivations calls torch.cuda.default_stream() in its constructor and "
             "brings tensors back with .to('cuda'): it needs a CUDA device (and torchao), which this CPU "
             "machine does not have")
SETTINGS = ["none", "save_on_cpu", "torchtune", "safe", "outputs-only", "guard"]


def model_and_batch():
    sys.path.insert(0, os.path.join(REPO, "examples"))
    import llama_torch
    return llama_torch.tiny_llama(), llama_torch.batch()


def digest_grads(model):
    # In parameters() order, without names: the stand-in's wrapper renames the layers' parameters.
    h = hashlib.sha256()
    for p in model.parameters():
        if p.grad is not None:
            h.update(p.grad.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def scoped(layers, enter, leave):
    """Forward hooks that push a saved-tensor context for each layer's forward and pop it after."""
    for i in SWAP:
        layers[i].register_forward_pre_hook(lambda _m, _a, i=i: enter(i))
        layers[i].register_forward_hook(lambda _m, _a, _o, i=i: leave(i))


def census(model, ids):
    """One step in which every saved tensor of layers 0-10 is replaced by a copy, as an offload does: what
    each all-offload rule moves, and which original storages are gone at the forward's end."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    # One entry per storage: an address freed during the forward is handed out again, so a storage is its
    # address until its weak reference expires.
    saves, storages, live = [], [], {}
    ctx = []

    def storage_entry(t):
        s = t.untyped_storage()
        i = live.get(s.data_ptr())
        if i is None or storages[i]["ref"].expired():
            i = live[s.data_ptr()] = len(storages)
            storages.append({"nbytes": s.nbytes(), "ref": StorageWeakRef(s), "boundary": False, "tt": True,
                             "saved": False})
        return storages[i]

    def pack(t):
        e = storage_entry(t)
        view = t.numel() * t.element_size()
        moved_by_tt = view >= 1024 and not isinstance(t, torch.nn.Parameter)
        e["tt"] = e["tt"] and moved_by_tt
        e["saved"] = True
        saves.append((view, moved_by_tt))
        return t.clone()

    def enter(_i):
        c = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        c.__enter__()
        ctx.append(c)

    def leave(_i):
        ctx.pop().__exit__(None, None, None)

    def mark(_m, args, kwargs, out=None):
        for x in list(args) + list(kwargs.values()) + ([out] if out is not None else []):
            for t in (x if isinstance(x, (tuple, list)) else (x,)):
                if isinstance(t, torch.Tensor):
                    storage_entry(t)["boundary"] = True
    layers = model.model.layers
    hooks = [layers[i].register_forward_pre_hook(mark, with_kwargs=True) for i in SWAP]
    hooks += [layers[i].register_forward_hook(lambda m, a, k, o: mark(m, a, k, o), with_kwargs=True) for i in SWAP]
    for i in SWAP:
        hooks.append(layers[i].register_forward_pre_hook(lambda _m, _a, i=i: enter(i)))
        hooks.append(layers[i].register_forward_hook(lambda _m, _a, _o, i=i: leave(i)))
    loss = model(input_ids=ids, labels=ids).loss
    gc.collect()
    saved = [e for e in storages if e["saved"]]
    gone = [e for e in saved if e["ref"].expired()]  # freed: only the copy held them
    loss.backward()
    model.zero_grad(set_to_none=True)
    for h in hooks:
        h.remove()
    return {"saves": len(saves), "storages": len(saved),
            "save_on_cpu_bytes": sum(v for v, _ in saves),
            "torchtune_bytes": sum(v for v, moved in saves if moved),
            "all_freed": sum(e["nbytes"] for e in gone),
            "boundary_freed": sum(e["nbytes"] for e in gone if e["boundary"]),
            "torchtune_freed": sum(e["nbytes"] for e in gone if e["tt"])}

def worker(setting, steps):
    import torch
    torch.set_num_threads(1)
    model, ids = model_and_batch()
    layers = model.model.layers
    res = {"setting": setting}
    if setting == "none":
        res["census"] = census(model, ids)
        model, ids = model_and_batch()  # the timed steps start from the same weights as every other setting
        layers = model.model.layers
    elif setting == "save_on_cpu":
        ctx = []

        def enter(_i):
            c = torch.autograd.graph.save_on_cpu(pin_memory=False)
            c.__enter__()
            ctx.append(c)
        scoped(layers, enter, lambda _i: ctx.pop().__exit__(None, None, None))
    elif setting in ("safe", "outputs-only"):
        sys.path.insert(0, PKG)
        import swapagent.torch as sa
        sa.layer_swap(layers, swap=SWAP, include_cpu=True)
    elif setting == "guard":
        from hyper_parallel.core.activation_checkpoint import SwapManager, swap_wrapper
        from hyper_parallel.core.activation_checkpoint.swap import SwapTensor
        released = res["released"] = [0, 0]
        wait = SwapTensor.wait_offload

        def counted(self):
            before = self.val.untyped_storage().nbytes()
            wait(self)
            if before and not self.val.untyped_storage().nbytes():
                released[0] += 1
                released[1] += before
        SwapTensor.wait_offload = counted
        for i in SWAP:
            layers[i] = swap_wrapper(layers[i])
        for i in SWAP:
            SwapManager().set_forward_prefetch_layer(layers[i], layers[i + 1])
    optim = torch.optim.SGD(model.parameters(), lr=0.05)
    res["steps"], res["times"] = [], []
    for step in range(steps + 1):
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        dt = time.perf_counter() - t0
        res["steps"].append({"loss": loss.item().hex(), "grads": digest_grads(model)})
        optim.step()
        optim.zero_grad(set_to_none=True)
        if step > 0:
            res["times"].append(dt)
        print("step %d: loss %.6f" % (step, loss.item()), flush=True)
    res["ran"] = steps + 1
    if setting in ("safe", "outputs-only", "guard"):
        sys.path.insert(0, PKG)
        import swapagent.core as core
        res["stats"] = core.stats()
    print("RESULT " + json.dumps(res), flush=True)


def ms_worker(setting, steps):
    """The MindSpore table's worker: MindFormers' DeepSeek-V3 (examples/deepseek_v3_mindspore.py's)."""
    sys.modules["torch"] = None  # mindformers imports tensorboardX, which imports torch when it can
    sys.path.insert(0, os.path.join(REPO, "examples"))
    os.environ.setdefault("GLOG_v", "3")
    import mindformers_cpu as mfc
    import mindspore as ms
    model = mfc.tiny_deepseek_v3()
    ids, labels = mfc.batch()
    layers = mfc.decoder_layers(model)
    res = {"setting": setting}
    counted = res["offload"] = [0, 0]  # all-offload: saves, bytes copied (per step, the last step's)

    def pack(t):
        counted[0] += 1
        counted[1] += t.nbytes
        return t.copy()  # the tensor's copy on the host: every saved tensor, as save_on_cpu does
    if setting == "all-offload":
        for i in mfc.SWAP:
            # A Cell applies its saved-tensor hooks on the path it takes when it has forward hooks.
            layers[i].register_forward_pre_hook(lambda _cell, _args: None)
            layers[i].register_saved_tensors_hooks(pack, lambda t: t)
    elif setting in ("safe", "outputs-only"):
        sys.path.insert(0, PKG)
        import swapagent.mindspore as sa
        sa.layer_swap(layers, swap=mfc.SWAP, include_cpu=True)
    params = model.trainable_params()
    step_fn = ms.value_and_grad(lambda: mfc.loss(model, ids, labels), None, params)
    res["steps"], res["times"] = [], []
    for step in range(steps + 1):
        counted[0] = counted[1] = 0
        t0 = time.perf_counter()
        loss, grads = step_fn()
        dt = time.perf_counter() - t0
        h = hashlib.sha256()
        for g in grads:
            h.update(g.asnumpy().tobytes())
        res["steps"].append({"loss": float(loss.asnumpy()).hex(), "grads": h.hexdigest()[:16]})
        for p_, g in zip(params, grads):
            p_.set_data(p_ - 0.05 * g)
        if step > 0:
            res["times"].append(dt)
        print("step %d: loss %.6f" % (step, float(loss.asnumpy())), flush=True)
    res["ran"] = steps + 1
    if setting in ("safe", "outputs-only"):
        import swapagent.core as core
        res["stats"] = core.stats()
    print("RESULT " + json.dumps(res), flush=True)


MS_SETTINGS = ["none", "all-offload", "safe", "outputs-only"]


def ms_report(rs, steps, rounds):
    base = rs["none"]
    t0 = min(base["times"])
    print("anchors: MindFormers DeepSeek-V3 (12 layers, hidden 64, MLA, MoE) on MindSpore, layers 0-10, CPU; "
          "step time: the best of %d steps x %d rounds, relative to none" % (steps, rounds))
    print("  %-13s %11s %11s %13s %8s  %s" % ("setting", "to host", "back", "freed at peak", "step", "bit-identical"))
    rows = {}
    for s in MS_SETTINGS:
        r = rs[s]
        if "failed" in r:
            print("  %-13s %s" % (s, "did not finish: " + r["failed"]))
            continue
        same = r["steps"] == base["steps"] and r.get("steps_all_same", True) and base.get("steps_all_same", True)
        freed = "-"
        if s == "none":
            rows[s] = (0, 0)
        elif s == "all-offload":
            rows[s] = (r["offload"][1], r["offload"][1])
        else:
            st = r["stats"]
            rows[s] = (st["offloaded_bytes"] / r["ran"], st["restored_bytes"] / r["ran"])
            freed = mb(st["saved_bytes_peak"])
        print("  %-13s %11s %11s %13s %7.2fx  %s" % (s, mb(rows[s][0]), mb(rows[s][1]), freed, min(r["times"]) / t0,
                                                    "yes" if same else "NO"))
    print("  all-offload: a saved-tensor hook on each of layers 0-10 that copies every saved tensor (MindSpore has "
          "no save_on_cpu); %d saves per step. Its freed bytes are not measured: MindSpore has no storage weak "
          "reference to tell which originals are gone" % rs["all-offload"].get("offload", [0])[0])
    if "safe" in rows and rows.get("all-offload", (0,))[0]:
        print("  safe moves %.2fx the bytes of the all-offload (target <= 0.5)" % (rows["safe"][0] / rows["all-offload"][0]))


def run_rounds(settings, steps, rounds, model):
    """Rounds of every setting in turn, each its own process: a setting's time is its best step of all
    rounds, so one disturbed by the machine counts less."""
    rs = {}
    with tempfile.TemporaryDirectory(prefix="swapagent-anchors-") as tmp:
        for rnd in range(rounds):
            for s in settings:
                if s == "torchtune":
                    continue
                r = run_setting(s, steps, os.path.join(tmp, "%s-%d" % (model, rnd)), model)
                if s in rs and "failed" not in r and "failed" not in rs[s]:
                    r["times"] += rs[s]["times"]
                    r["steps_all_same"] = rs[s].get("steps_all_same", True) and rs[s]["steps"] == r["steps"]
                rs[s] = r
    return rs


def run_setting(setting, steps, tmp, model="llama"):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", setting, "--steps", str(steps), "--model", model]
    env = dict(os.environ, PYTHONPATH=PKG)
    env.pop("LD_PRELOAD", None)
    if setting in ("safe", "outputs-only", "guard"):
        policy = "outputs-only" if setting == "outputs-only" else "safe"
        cmd = [CLI, "run", "--policy", policy, "--out", os.path.join(tmp, setting), "--"] + cmd
        env["SWAPAGENT_MIN_BYTES"] = "1024"
    if setting == "guard":
        env["PYTHONPATH"] = PKG + os.pathsep + STANDIN
        env["HYPER_PARALLEL_STANDIN_DEVICE"] = "1"  # the stand-in counts CPU tensors as device ones
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    said = [ln for ln in lines if "FAULT" in ln][:1] or lines[-1:] or ["no output"]  # the first fault names the cause
    return {"setting": setting, "failed": "exit %d: %s" % (p.returncode, said[0].strip()[:200])}


def mb(n):
    return "%.2f MB" % (n / 1e6)


def report(rs, steps, rounds):
    base = rs["none"]
    c = base["census"]
    t0 = min(base["times"])
    ideal = c["all_freed"] - c["boundary_freed"]
    print("anchors: transformers LlamaForCausalLM (12 layers, hidden 64), layers 0-10, CPU; step time: the "
          "best of %d steps x %d rounds, each setting in its own process, relative to none" % (steps, rounds))
    print("  census of one step: %d saves of %d distinct storages in layers 0-10; all-offload frees %s at the "
          "peak, %s of it boundary tensors (layer inputs and outputs)" % (
              c["saves"], c["storages"], mb(c["all_freed"]), mb(c["boundary_freed"])))
    print("  %-13s %11s %11s %13s %8s  %s" % ("setting", "to host", "back", "freed at peak", "step", "bit-identical"))
    rows = {}
    for s in SETTINGS:
        r = rs[s]
        if s == "torchtune":
            rows[s] = (c["torchtune_bytes"], c["torchtune_bytes"], c["torchtune_freed"])
            print("  %-13s %11s %11s %13s %8s  %s" % (s, mb(rows[s][0]), mb(rows[s][1]), mb(rows[s][2]), "-",
                                                      "- (its rule, counted: it cannot run here)"))
            continue
        if "failed" in r:
            print("  %-13s %s" % (s, "did not finish: " + r["failed"]))
            continue
        same = r["steps"] == base["steps"] and r.get("steps_all_same", True) and base.get("steps_all_same", True)
        if s == "none":
            rows[s] = (0, 0, 0)
        elif s == "save_on_cpu":
            rows[s] = (c["save_on_cpu_bytes"], c["save_on_cpu_bytes"], c["all_freed"])
        elif s == "guard":
            per = r["released"][1] / r["ran"]
            rows[s] = (per, per, per)
        else:
            st = r["stats"]
            rows[s] = (st["offloaded_bytes"] / r["ran"], st["restored_bytes"] / r["ran"], st["saved_bytes_peak"])
        print("  %-13s %11s %11s %13s %7.2fx  %s" % (s, mb(rows[s][0]), mb(rows[s][1]), mb(rows[s][2]),
                                                    min(r["times"]) / t0, "yes" if same else "NO"))
    print("  torchtune: " + TORCHTUNE)
    print("  save_on_cpu on CPU: its copies are tensor.cpu(), the tensor itself, so its step time is its hooks'")
    if "safe" in rows:
        soc, tt, safe = rows["save_on_cpu"][0], rows["torchtune"][0], rows["safe"][0]
        print("  safe moves %.2fx the bytes of save_on_cpu (target <= 0.5) and %.2fx torchtune's (target < 1); "
              "frees %.2f of what the all-offload frees, %.2f of that less the boundary tensors (target >= 0.9: "
              "above 1 where it moves the layer inputs nothing else holds)"
              % (safe / soc, safe / tt, rows["safe"][2] / c["all_freed"] if c["all_freed"] else 0,
                 rows["safe"][2] / ideal if ideal else 0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", choices=["llama", "deepseek", "both"], default="both")
    ap.add_argument("--worker")
    opt = ap.parse_args()
    if opt.worker:
        return (ms_worker if opt.model == "deepseek" else worker)(opt.worker, opt.steps)
    if opt.model in ("llama", "both"):
        rs = run_rounds(SETTINGS, opt.steps, opt.rounds, "llama")
        rs["torchtune"] = {}
        if "failed" in rs["none"]:
            sys.exit("anchors: the Llama run without offload failed: " + rs["none"]["failed"])
        report(rs, opt.steps, opt.rounds)
    if opt.model in ("deepseek", "both"):
        rs = run_rounds(MS_SETTINGS, opt.steps, opt.rounds, "deepseek")
        if "failed" in rs["none"]:
            sys.exit("anchors: the DeepSeek-V3 run without offload failed: " + rs["none"]["failed"])
        ms_report(rs, opt.steps, opt.rounds)


if __name__ == "__main__":
    main()
