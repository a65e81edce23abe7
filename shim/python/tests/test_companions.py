"""test_companions.py proves the torch and MindSpore companions on real models (models.py) against the real
agent (build/lib/libswapagent.so, preloaded): each case runs run_case.py in its own process per policy,
and every case is parametrized over both frameworks."""

import collections
import dataclasses
import gc
import json
import os
import re
import subprocess
import sys
import weakref

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
LIB = os.path.join(REPO, "build", "lib", "libswapagent.so")
CLI = os.path.join(REPO, "build", "bin", "swapagent")
PKG = os.path.join(REPO, "shim", "python")
STEPS = 3
TIMEOUT = 300
FRAMEWORKS = ["torch", "mindspore"]

sys.path.insert(0, PKG)
sys.path.insert(0, HERE)
import models  # noqa: E402


def need(path):
    # A missing build output is a failure, never a skip: these checks must run.
    assert os.path.exists(path), "%s is missing: run `make build` first" % path


def run(framework, mode, policy, out, steps=STEPS, preload=True):
    need(LIB)
    env = dict(os.environ)
    env.update({"PYTHONPATH": PKG, "SWAPAGENT_OUT": os.path.join(out, "trace"), "SWAPAGENT_MIN_BYTES": "1024",
                "SWAPAGENT_PREFETCH": "1", "GLOG_v": "3", "PYTHONFAULTHANDLER": "1"})
    env.pop("SWAPAGENT_LIB", None)
    if preload:
        env["LD_PRELOAD"] = LIB
        env["SWAPAGENT_POLICY"] = policy
    else:
        env.pop("LD_PRELOAD", None)
    cmd = [sys.executable, os.path.join(HERE, "run_case.py"), "--framework", framework, "--mode", mode,
           "--steps", str(steps), "--out", out]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT, cwd=out)
    res = None
    rp = os.path.join(out, "result.json")
    if os.path.exists(rp):
        with open(rp) as f:
            res = json.load(f)
    return p, res


_runs = {}


@pytest.fixture(scope="session")
def case(tmp_path_factory):
    """case(framework, mode, policy) -> (process, result); each distinct run happens once per session."""
    def get(framework, mode, policy="safe"):
        key = (framework, mode, policy)
        if key not in _runs:
            out = str(tmp_path_factory.mktemp("%s-%s-%s" % key))
            _runs[key] = run(framework, mode, policy, out, preload=(mode == "swap"))
            _runs[key] = _runs[key] + (out,)
        p, res, out = _runs[key]
        return p, res, out
    return get


def ok(p, res):
    assert p.returncode == 0 and res is not None, "run failed (rc %d):\n%s\n%s" % (
        p.returncode, p.stdout[-3000:], p.stderr[-6000:])
    return res


def rope_entries(res):
    return [(g, e) for g, es in res["groups"].items() for e in es if e["role"] in ("cos", "sin")]


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_safe_matches_no_swap(case, fw):
    base = ok(*case(fw, "noswap")[:2])
    p, res, out = case(fw, "swap", "safe")
    res = ok(p, res)
    assert len(res["steps"]) == STEPS
    for n, (a, b) in enumerate(zip(base["steps"], res["steps"])):
        assert a["loss_hex"] == b["loss_hex"], "step %d: loss %r (no swap) vs %r (safe)" % (n, a["loss"], b["loss"])
        assert a["grad_digest"] == b["grad_digest"], "step %d: gradients differ" % n
    # bitwise, array by array (the digests above already cover it; this names the first difference)
    base_out = case(fw, "noswap")[2]
    for n in range(STEPS):
        i = 0
        while os.path.exists(os.path.join(base_out, "grad.%d.%d.npy" % (n, i))):
            a = np.load(os.path.join(base_out, "grad.%d.%d.npy" % (n, i)))
            b = np.load(os.path.join(out, "grad.%d.%d.npy" % (n, i)))
            assert a.tobytes() == b.tobytes(), "step %d gradient %d differs" % (n, i)
            i += 1
        assert i > 0
    st = res["stats"]
    assert st["offloaded_bytes"] > 0 and st["offloaded_storages"] > 0, st
    assert st["restored_bytes"] == st["offloaded_bytes"], st
    assert st["released_external"] == 0, st
    assert st["faults"] == [], st["faults"]
    assert res["registry_errors"] == []
    assert res["registry_left"] == 0, "handles still held after backward_exit"
    rope = rope_entries(res)
    # cos and sin are saved in every swapped layer (twice each: q and k), kept as inputs (a second
    # registration of the same storage in one group is a duplicate)
    assert {(g, e["role"]) for g, e in rope} == {(g, r) for g in res["groups"] for r in ("cos", "sin")}, rope
    assert all(e["reason"] in ("input", "duplicate") for _, e in rope), rope
    first = [e for _, e in rope if e["reason"] == "input"]
    assert len(first) == 2 * len(models.SWAP), rope
    # kept.input counts them (the RoPE entries of every step, besides the positional inputs)
    assert st["kept"]["input"] >= len(first) * STEPS, (st["kept"], len(first))


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_outputs_only_faults_on_rope(case, fw):
    need(CLI)
    p, _, out = case(fw, "swap", "outputs-only")
    assert p.returncode != 0, "outputs-only must fail on the emptied RoPE storage:\n" + p.stdout[-2000:]
    m = re.search(r"rope cos=(0x[0-9a-f]+) sin=(0x[0-9a-f]+)", p.stdout)
    assert m, p.stdout[-2000:]
    rope = {int(m.group(1), 16), int(m.group(2), 16)}
    # stderr: the agent's diagnosis arrived before the process died
    assert "layer.0" in p.stderr and re.search(r"fault", p.stderr, re.I), p.stderr[-6000:]
    rep = subprocess.run([CLI, "report", "--format", "json", os.path.join(out, "trace")],
                         capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    procs = json.loads(rep.stdout)["processes"]
    faults = [f for pr in procs for f in pr["faults"]]
    assert faults, "no fault record in the trace: " + rep.stdout[:2000]
    named = [f for f in faults if f["released_by"] == "layer.0" and f["storage"]
             and int(f["storage"].split("#")[0], 16) in rope]
    assert named, "no fault names the RoPE storage %s released by layer.0: %s" % (
        [hex(r) for r in rope], json.dumps(faults, indent=1))
    f = named[0]
    assert "keyword" in f["owner"] or "input" in f["owner"], f


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_boundary_regressions(case, fw):
    """hyper-parallel issue 294's regression list, on the real model."""
    res = ok(*case(fw, "swap", "safe")[:2])
    assert res["groups_wrapped"] == ["layer.%d" % i for i in models.SWAP]
    for g, entries in res["groups"].items():
        roles = collections.defaultdict(list)
        for e in entries:
            roles[e["role"]].append(e)
        # positional and keyword inputs protected, with reason input, left on device
        for role in ("pos0", "cos", "sin"):
            assert roles[role], "%s: %s was not saved (test model changed?)" % (g, role)
            for e in roles[role]:
                assert e["reason"] in ("input", "duplicate"), (g, e)
                assert e["state"] == 0, (g, e)
        assert any(e["reason"] == "input" for e in roles["cos"]), g
        # output pointers passed too: v is saved inside the layer and returned
        assert roles["out_v"] and all(e["reason"] in ("output", "duplicate") for e in roles["out_v"]), (g, entries)
        assert any(e["reason"] == "output" for e in roles["out_v"]), g
        for e in roles["out_v"]:
            assert e["state"] == 0, (g, e)
        # parameters flagged
        params = [e for e in entries if e["flags"] == 1]
        assert params and all(e["reason"] in ("param", "duplicate") for e in params), (g, params)
        # internal activations still move: by the end of the forward pass every group before the last
        # has its internal storages on host, the last one is on its way (copy launched)
        internal = [e for e in entries if e["reason"] == "internal"]
        assert internal, (g, entries)
        want = {1, 2} if g == "layer.%d" % models.SWAP[-1] else {2}
        assert {e["state"] for e in internal} <= want, (g, internal)
    # the shared RoPE tensor (saved by every layer) completed backward: the run finished, see above
    assert len(res["steps"]) == STEPS


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_no_input_references(case, fw):
    base = ok(*case(fw, "noswap")[:2])
    res = ok(*case(fw, "swap", "safe")[:2])
    # whatever stays alive after the forward pass is what the framework's autograd keeps, never more
    assert set(res["alive_after_forward"]) <= set(base["alive_after_forward"]), (
        res["alive_after_forward"], base["alive_after_forward"])
    assert "mask" not in res["alive_after_forward"]  # used by an add only: nothing may hold it
    assert res["alive_after_step"] == [], res["alive_after_step"]


def test_frameworks_agree(case):
    t = ok(*case("torch", "swap", "safe")[:2])
    m = ok(*case("mindspore", "swap", "safe")[:2])

    # the same decisions for the same tensors: (role, keep reason, state) of every save, per group
    def decisions(res):
        return {g: sorted((e["role"], str(e["reason"]), e["state"]) for e in es) for g, es in res["groups"].items()}
    td, md = decisions(t), decisions(m)
    assert set(td) == set(md)
    for g in td:
        assert td[g] == md[g], "%s: torch %s\nmindspore %s" % (g, td[g], md[g])
    # the same offloaded and kept counts per group, and in total
    tg, mg = t["stats"]["groups"], m["stats"]["groups"]
    assert set(tg) == set(mg) == {"layer.%d" % i for i in models.SWAP}
    for g in tg:
        for k in ("saves", "internal", "offloaded", "kept", "restored", "offloaded_bytes"):
            assert tg[g][k] == mg[g][k], "%s %s: torch %d, mindspore %d" % (g, k, tg[g][k], mg[g][k])
    assert t["stats"]["kept"] == m["stats"]["kept"]
    for k in ("offloaded_storages", "offloaded_bytes", "restored_bytes", "saves"):
        assert t["stats"][k] == m["stats"][k], (k, t["stats"][k], m["stats"][k])


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_remove_restores_modules(case, fw):
    base = ok(*case(fw, "noswap")[:2])
    res = ok(*case(fw, "swap", "safe")[:2])
    assert res["hooks_left"] == 0
    assert base["hooks_left"] == 0
    assert res["after_remove"]["loss_hex"] == base["after_remove"]["loss_hex"]
    assert res["after_remove"]["grad_digest"] == base["after_remove"]["grad_digest"]
    assert res["after_remove"]["agent_saves_delta"] == 0


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_dry_run_without_preload(case, tmp_path, fw):
    """Not preloaded: the companion loads build/lib/libswapagent.so itself (tests, dry runs)."""
    base = ok(*case(fw, "noswap")[:2])
    res = ok(*run(fw, "swap", "safe", str(tmp_path), steps=1, preload=False))
    assert res["agent"] == {"preloaded": False, "path": LIB}
    assert res["steps"][0]["loss_hex"] == base["steps"][0]["loss_hex"]
    assert res["steps"][0]["grad_digest"] == base["steps"][0]["grad_digest"]
    assert res["stats"]["offloaded_bytes"] > 0 and res["stats"]["released_external"] == 0
    p, res2, _ = case(fw, "swap", "safe")
    assert ok(p, res2)["agent"] == {"preloaded": True, "path": "(preloaded)"}


# ---- the shared core, in process (no agent calls) -----------------------------------------------

@dataclasses.dataclass
class Box:
    a: object
    b: object = None


Pair = collections.namedtuple("Pair", "x y")


def make_tensor(fw, n):
    if fw == "torch":
        import torch
        return torch.ones(n) * 2
    import mindspore as ms
    from mindspore import ops
    ms.set_device("CPU")
    return ops.ones((n,), ms.float32) * 2


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_collect_nested_keeps_no_reference(fw):
    from swapagent import core
    if fw == "torch":
        from swapagent.torch import Torch as F
    else:
        from swapagent.mindspore import MindSpore as F
    f = F(include_cpu=True)
    ts = [make_tensor(fw, 256 + i) for i in range(6)]
    want = [f.storage_ptr(f.storage(t)) for t in ts]
    layer = core.Layer(None, f, None, "layer.0", True)
    args = (ts[0], [Pair(ts[1], "s")], {"k": Box(ts[2], (ts[3],))})
    kwargs = {"cos": ts[4], "nested": {"deep": [Box(None, ts[5])]}, "n": 3}
    got = layer.pointers(args) + layer.pointers(kwargs)
    assert got == want and all(type(p) is int for p in got)
    # an emptied storage is reported as 0, not dropped
    f.resize(f.storage(ts[4]), 0)
    assert layer.pointers(kwargs)[0] == 0
    refs = [weakref.ref(t) for t in ts]
    del ts, args, kwargs
    gc.collect()
    assert all(r() is None for r in refs)
    # CPU tensors are not device storages unless include_cpu
    assert core.Layer(None, F(include_cpu=False), None, "layer.0", False).pointers([make_tensor(fw, 4)]) == []


def test_select_checks_indices():
    from swapagent import core
    assert [i for i, _ in core.select("abc", None)] == [0, 1, 2]
    assert [i for i, _ in core.select("abc", [2, 0, 2])] == [0, 2]
    with pytest.raises(ValueError, match="out of range"):
        core.select("abc", [3])
    assert core.group_name(7) == "layer.7"
