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
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
LIB = os.path.join(REPO, "build", "lib", "libswapagent.so")
CLI = os.path.join(REPO, "build", "bin", "swapagent")
PKG = os.path.join(REPO, "python")
STEPS = 3
TIMEOUT = 300
FRAMEWORKS = ["torch", "mindspore"]

sys.path.insert(0, PKG)
sys.path.insert(0, HERE)
import models  # noqa: E402


def need(path):
    # A missing build output is a failure, never a skip: these checks must run.
    assert os.path.exists(path), "%s is missing: run `make build` first" % path


def run(framework, mode, policy, out, steps=STEPS, preload=True, model="decoder", grad_from=0):
    need(LIB)
    env = dict(os.environ)
    env.update({"PYTHONPATH": PKG, "SWAPAGENT_OUT": os.path.join(out, "trace"), "SWAPAGENT_MIN_BYTES": "1024",
                "SWAPAGENT_PREFETCH": "1", "GLOG_v": "3", "PYTHONFAULTHANDLER": "1"})
    env.pop("SWAPAGENT_LIB", None)
    if preload:
        env["LD_PRELOAD"] = LIB
        env["SWAPAGENT_POLICY"] = policy
        # "-plain": by plain control calls instead of queued ones; "safe-still": safe with every
        # storage below SWAPAGENT_MIN_BYTES, so that nothing moves.
        if policy.endswith("-plain"):
            policy = env["SWAPAGENT_POLICY"] = policy[:-len("-plain")]
            env["SWAPAGENT_TEST_PLAIN_CALLS"] = "1"
        if policy == "safe-still":
            env["SWAPAGENT_POLICY"], env["SWAPAGENT_MIN_BYTES"] = "safe", str(1 << 40)
    else:
        env.pop("LD_PRELOAD", None)
    cmd = [sys.executable, os.path.join(HERE, "run_case.py"), "--framework", framework, "--mode", mode,
           "--steps", str(steps), "--out", out, "--model", model, "--grad-from", str(grad_from)]
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
    """case(framework, mode, policy, model, grad_from) -> (process, result, out dir); each distinct run
    happens once per session. Only mode "swap" runs under the preloaded agent."""
    def get(framework, mode, policy="safe", model="decoder", grad_from=0):
        if mode != "swap":
            policy = "-"
        key = (framework, mode, policy, model, grad_from)
        if key not in _runs:
            out = str(tmp_path_factory.mktemp("%s-%s-%s-%s-%d" % key))
            _runs[key] = run(framework, mode, policy, out, preload=(mode == "swap"), model=model,
                             grad_from=grad_from)
            _runs[key] = _runs[key] + (out,)
        p, res, out = _runs[key]
        return p, res, out
    return get


def ok(p, res):
    assert p.returncode == 0 and res is not None, "run failed (rc %d):\n%s\n%s" % (
        p.returncode, p.stdout[-3000:], head_tail(p.stderr))
    return res


def head_tail(text, n=4000):
    """A long stderr's first and last n characters: a crash says what happened first (a Go fatal error's
    first lines), and what the process printed last."""
    if len(text) <= 2 * n:
        return text
    return "%s\n[... %d characters ...]\n%s" % (text[:n], len(text) - 2 * n, text[-n:])


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
    # a process killed by the fault never closed its trace, which report says (exit 3) after reading it all; one
    # that raised closed it on its way out
    killed = p.returncode < 0 or p.returncode >= 128
    assert rep.returncode == (3 if killed else 0) and killed == ("trace not closed" in rep.stderr), (
        p.returncode, rep.returncode, rep.stderr)
    procs = json.loads(rep.stdout)["processes"]
    faults = [f for pr in procs for f in pr["faults"]]
    assert faults, "no fault record in the trace: " + rep.stdout[:2000]
    named = [f for f in faults if f["released_by"] == "layer.0" and f["storage"]
             and int(f["storage"].split("#")[0], 16) in rope]
    assert named, "no fault names the RoPE storage %s released by layer.0: %s" % (
        [hex(r) for r in rope], json.dumps(faults, indent=1))
    f = named[0]
    # The companion described the arguments: the owner names the keyword argument, the storage its dtype
    # and shape (never a guess from the size), and so does the block on stderr.
    assert re.match(r"keyword input (cos|sin) of layer\.0", f["owner"]), f
    assert re.fullmatch(r"float32 \[\d+(, \d+)*\]", f.get("storage_tensor", "")), f
    assert re.search(r"keyword input (cos|sin) \(float32 \[[\d, ]+\], \d+ bytes\) of layer\.\d+ has no device "
                     r"memory", p.stderr), p.stderr[-6000:]
    assert "guessed" not in p.stderr, p.stderr[-6000:]


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_boundary_regressions(case, fw):
    """hyper-parallel issue 294's regression list, on the real model."""
    res = ok(*case(fw, "swap", "safe")[:2])
    assert res["groups_wrapped"] == ["layer.%d" % i for i in models.SWAP]
    last = "layer.%d" % models.SWAP[-1]
    for g, entries in res["groups"].items():
        roles = collections.defaultdict(list)
        for e in entries:
            roles[e["role"]].append(e)
        # keyword inputs the model still holds (RoPE), with reason input, left on device
        for role in ("pos0", "cos", "sin"):
            assert roles[role], "%s: %s was not saved (test model changed?)" % (g, role)
        for e in roles["cos"] + roles["sin"]:
            assert e["reason"] in ("input", "duplicate"), (g, e)
            assert e["state"] == 0, (g, e)
        assert any(e["reason"] == "input" for e in roles["cos"]), g
        # the hidden state entering a layer: nothing but the layer's saved tensors holds it once the next
        # layer is entered, so under torch (which counts holders) it moves like an activation; MindSpore
        # counts none, and the last layer's is never counted (no wrapped layer comes after it): kept
        released = fw == "torch" and g != last
        for e in roles["pos0"]:
            assert e["reason"] in (("internal",) if released else ("input", "duplicate")), (g, e)
            assert e["state"] == (2 if released else 0), (g, e)
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

    # the same decisions for the same tensors: (role, keep reason, state) of every save, per group; but the
    # hidden state entering layers 0-9, which torch's holder count lets go and MindSpore (no count) keeps
    moved = {"layer.%d" % i for i in models.SWAP[:-1]}

    def decisions(res, fw):
        out = {}
        for g, es in res["groups"].items():
            ds = [(e["role"], str(e["reason"]), e["state"]) for e in es]
            if g in moved:
                want = ("pos0", "internal", 2) if fw == "torch" else ("pos0", "input", 0)
                assert want in ds, (fw, g, ds)
                ds.remove(want)
            out[g] = sorted(ds)
        return out
    td, md = decisions(t, "torch"), decisions(m, "mindspore")
    assert set(td) == set(md)
    for g in td:
        assert td[g] == md[g], "%s: torch %s\nmindspore %s" % (g, td[g], md[g])
    # the same offloaded and kept counts per group, and in total, but that storage
    tg, mg = t["stats"]["groups"], m["stats"]["groups"]
    assert set(tg) == set(mg) == {"layer.%d" % i for i in models.SWAP}
    hidden = models.BATCH * models.SEQ * models.DIM * 4
    for g in tg:
        d = STEPS if g in moved else 0  # the group counts are the run's
        for k, diff in (("saves", 0), ("internal", d), ("offloaded", d), ("kept", -d), ("restored", d),
                        ("offloaded_bytes", d * hidden)):
            assert tg[g][k] == mg[g][k] + diff, "%s %s: torch %d, mindspore %d" % (g, k, tg[g][k], mg[g][k])
    d = STEPS * len(moved)
    assert t["stats"]["kept"] == dict(m["stats"]["kept"], input=m["stats"]["kept"]["input"] - d)
    for k, diff in (("offloaded_storages", d), ("offloaded_bytes", d * hidden), ("restored_bytes", d * hidden),
                    ("saves", 0)):
        assert t["stats"][k] == m["stats"][k] + diff, (k, t["stats"][k], m["stats"][k])


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
    assert res["agent"] == {"preloaded": False, "path": LIB, "queued": True}
    assert res["steps"][0]["loss_hex"] == base["steps"][0]["loss_hex"]
    assert res["steps"][0]["grad_digest"] == base["steps"][0]["grad_digest"]
    assert res["stats"]["offloaded_bytes"] > 0 and res["stats"]["released_external"] == 0
    p, res2, _ = case(fw, "swap", "safe")
    assert ok(p, res2)["agent"] == {"preloaded": True, "path": "(preloaded)", "queued": True}


# ---- backward enter/exit without module backward hooks (models.py's fan-out model) ---------------

FAN = "fanout"
GRAD_FROM = 5  # test_exit_when_an_input_gradient_never_comes: the backward asks for layers >= 5 only
BANNED = {"register_full_backward_hook", "register_full_backward_pre_hook", "register_backward_hook",
          "register_backward_pre_hook"}


def grad_arrays(out, step):
    arrays, i = [], 0
    while os.path.exists(os.path.join(out, "grad.%d.%d.npy" % (step, i))):
        arrays.append(np.load(os.path.join(out, "grad.%d.%d.npy" % (step, i))))
        i += 1
    return arrays


def equal(fw, a, b):
    """Bit-identical: same dtype and shape, same bytes (torch.equal / numpy array_equal on top)."""
    if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
        return False
    if fw == "torch":
        import torch
        return torch.equal(torch.from_numpy(a), torch.from_numpy(b))
    return np.array_equal(a, b)


def differing(fw, base_out, out, step):
    """Indexes of the gradient arrays of step that are not bit-identical between two runs."""
    a, b = grad_arrays(base_out, step), grad_arrays(out, step)
    assert a and len(a) == len(b), (len(a), len(b))
    return [i for i, (x, y) in enumerate(zip(a, b)) if not equal(fw, x, y)]


def assert_same_numerics(fw, base, base_out, res, out):
    assert len(res["steps"]) == len(base["steps"]) == STEPS
    for n, (a, b) in enumerate(zip(base["steps"], res["steps"])):
        assert a["loss_hex"] == b["loss_hex"], "step %d: loss %r vs %r" % (n, a["loss"], b["loss"])
        d = differing(fw, base_out, out, n)
        assert d == [], "step %d: %d of %d gradients differ (first: %d)" % (
            n, len(d), len(grad_arrays(base_out, n)), d[0])


def calls_by_group(step):
    """group -> {"enter": [i], "exit": [i], "unpack": [i]}: positions of the step's backward ABI calls;
    every unpacked handle must be one the step's forward saved."""
    owner = {h: g for g, hs in step["handles"].items() for h in hs}
    by = collections.defaultdict(lambda: {"enter": [], "exit": [], "unpack": []})
    for i, (kind, arg) in enumerate(step["abi"]):
        if kind == "unpack":
            assert arg in owner, "unpack of handle %d, not saved in this step" % arg
            arg = owner[arg]
        by[arg][kind].append(i)
    return by


def assert_brackets(step, group, exit_here=True):
    """group entered once, exited once (in this step unless exit_here is False), and every handle it
    saved was unpacked between the two: backward_exit (the agent forgets the handles) never precedes an
    unpack."""
    c = calls_by_group(step)[group]
    assert len(c["enter"]) == 1, (group, c)
    unpacked = {step["abi"][i][1] for i in c["unpack"]}
    assert unpacked == set(step["handles"][group]), "%s: handles saved but not unpacked" % group
    assert all(c["enter"][0] < i for i in c["unpack"]), (group, c)
    if exit_here:
        assert len(c["exit"]) == 1, (group, c)
        assert all(i < c["exit"][0] for i in c["unpack"]), (group, c)
    else:
        assert c["exit"] == [], (group, c)


@pytest.mark.parametrize("policy", ["safe", "off"])
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_fanout_gradients_bit_identical(case, fw, policy):
    """A layer output used by two later layers (one of them as a keyword input), skip connections,
    nested outputs: with the companion every gradient and loss is bit-identical to the run without it."""
    base_p, base, base_out = case(fw, "noswap", model=FAN)
    base = ok(base_p, base)
    p, res, out = case(fw, "swap", policy, model=FAN)
    res = ok(p, res)
    assert_same_numerics(fw, base, base_out, res, out)
    assert res["backward_module_hooks"] == 0
    assert [w for w in res["warnings"] if "swapagent" in w] == []
    assert res["registry_errors"] == [] and res["registry_left"] == 0
    st = res["stats"]
    assert st["faults"] == [] and st["released_external"] == 0, st
    if policy == "safe":
        assert st["offloaded_bytes"] > 0 and st["restored_bytes"] == st["offloaded_bytes"], st
    else:
        assert st["offloaded_bytes"] == 0, st
    if policy == "safe" and fw == "torch":
        # The job keeps every layer's output in a list (as output_hidden_states=True does): layer 1's input
        # (layer 0's output) stays; layer 2 gets a fresh tensor nothing else holds, which moves. (Layer 0's
        # input takes no gradient and from layer 3 on the input is added to a skip before anything saves it.)
        for g, want in (("layer.1", "input"), ("layer.2", "internal")):
            pos0 = [e["reason"] for e in res["groups"][g] if e["role"] == "pos0"]
            assert pos0 and set(pos0) <= {want, "duplicate"}, (g, pos0)
    assert res["alive_after_step"] == [], res["alive_after_step"]
    assert res["hooks_left"] == 0
    assert res["after_remove"]["loss_hex"] == base["after_remove"]["loss_hex"]
    assert res["after_remove"]["grad_digest"] == base["after_remove"]["grad_digest"]


@pytest.mark.parametrize("model", ["decoder", FAN])
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_backward_enter_exit_from_gradient_hooks(case, fw, model):
    """Every swapped group enters and exits backward once per step, around all its unpacks, one group
    at a time in backward order (layer g's exit before layer g-1's enter). In the fan-out model layer 0's
    positional input takes no gradient: it exits at its last unpack."""
    res = ok(*case(fw, "swap", "safe", model=model)[:2])
    groups = ["layer.%d" % i for i in models.SWAP]
    for n, step in enumerate(res["steps"]):
        for g in groups:
            assert_brackets(step, g)
        order = [(k, a) for k, a in step["abi"] if k != "unpack"]
        want = [(k, g) for g in reversed(groups) for k in ("enter", "exit")]
        assert order == want, "step %d: %s" % (n, order)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_exit_when_an_input_gradient_never_comes(case, fw):
    """The backward asks for the gradients of layers >= GRAD_FROM only: the gradient of layer
    GRAD_FROM's positional input never comes, and the nodes of its backward that only lead there never
    run. It still exits, without an unpack after it: at the next forward, once the framework freed the
    saved tensors it did not need (nothing keeps them: no reference cycle through the saved tensor).
    Layers below never enter backward; the framework frees their saved tensors with the graph, and the
    next forward reports their exit too: the agent forgets a dropped forward's handles, so it never takes
    the next step's storages at the same addresses for the dropped ones (a duplicate of a dead save, or
    one shared with it, whose handle the framework no longer knows), and holds no host memory for them."""
    base_p, base, base_out = case(fw, "noswap", model=FAN, grad_from=GRAD_FROM)
    base = ok(base_p, base)
    p, res, out = case(fw, "swap", "safe", model=FAN, grad_from=GRAD_FROM)
    res = ok(p, res)
    assert_same_numerics(fw, base, base_out, res, out)
    assert [w for w in res["warnings"] if "swapagent" in w] == []
    assert res["registry_errors"] == [] and res["registry_left"] == 0, "saved tensors kept alive"
    first = "layer.%d" % GRAD_FROM
    below = ["layer.%d" % i for i in models.SWAP if i < GRAD_FROM]
    for n, step in enumerate(res["steps"]):
        by = calls_by_group(step)
        for i in models.SWAP:
            g = "layer.%d" % i
            if i > GRAD_FROM:
                assert_brackets(step, g)
            elif i < GRAD_FROM:
                assert by[g]["enter"] == by[g]["unpack"] == [], (n, g, by[g])
        c = by[first]
        assert len(c["enter"]) == 1 and c["unpack"] and all(c["enter"][0] < i for i in c["unpack"]), c
        # the previous step's exits, once each, reported in this step's forward (in the order the
        # framework freed their saved tensors), before any backward call
        ended = below + [first] if n > 0 else []
        assert sorted(step["abi"][:len(ended)]) == sorted(["exit", g] for g in ended), (n, step["abi"][:8])
        for g in below + [first]:
            assert len(by[g]["exit"]) == (n > 0), (n, g, by[g])
    # Every step's storages are new to the agent: each step classifies and moves the same, and the host
    # memory held for released storages does not grow.
    agent = [s["agent"] for s in res["steps"]]
    for n in range(1, len(agent)):
        for k in ("internal", "offloaded_storages"):
            assert agent[n][k] - agent[n - 1][k] == agent[0][k], (n, k, agent)
        for r, v in agent[n]["kept"].items():
            assert v - agent[n - 1]["kept"][r] == agent[0]["kept"][r], (n, r, agent)
        assert agent[n]["saved_bytes"] == agent[0]["saved_bytes"], (n, agent)


def test_module_backward_hooks_change_gradients(case):
    """Why the torch companion registers no module backward hook: on the fan-out model, empty
    register_full_backward_pre_hook/register_full_backward_hook on the swapped layers (what it used to
    register; no companion, no agent) change gradients (the forward, hence the loss, stays the same)."""
    base_p, base, base_out = case("torch", "noswap", model=FAN)
    base = ok(base_p, base)
    p, res, out = case("torch", "fullhooks", model=FAN)
    res = ok(p, res)
    assert res["steps"][0]["loss_hex"] == base["steps"][0]["loss_hex"]
    d = differing("torch", base_out, out, 0)
    assert d, "the fan-out model no longer shows the effect of module backward hooks: strengthen it"
    print("module backward hooks: %d of %d gradients differ" % (len(d), len(grad_arrays(base_out, 0))))


def test_tensor_gradient_hooks_keep_gradients(case):
    """What the companion relies on: empty Tensor.register_hook on every gradient-taking input and output
    of the swapped layers (no companion, no agent) leaves every gradient bit-identical."""
    base_p, base, base_out = case("torch", "noswap", model=FAN)
    p, res, out = case("torch", "tensorhooks", model=FAN)
    assert_same_numerics("torch", ok(base_p, base), base_out, ok(p, res), out)


def test_companions_register_no_module_backward_hook():
    import ast
    for name in ("core.py", "torch.py", "mindspore.py"):
        path = os.path.join(PKG, "swapagent", name)
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        used = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
        assert not used & BANNED, (name, used & BANNED)


def test_package_files_stay_within_700_lines():
    """Each concern of the companions in a file of its own: no file of the package over 700 lines."""
    root = os.path.join(PKG, "swapagent")
    sizes = {}
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith(".py"):
                with open(os.path.join(d, n)) as f:
                    sizes[os.path.relpath(os.path.join(d, n), root)] = sum(1 for _ in f)
    assert "core.py" in sizes, sorted(sizes)
    assert {n: k for n, k in sizes.items() if k > 700} == {}


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


class FakeAgent:
    """Records the ABI calls a companion's layers make (in process, no agent library)."""

    def __init__(self):
        self.calls, self._h = [], 0

    def region_enter(self, group, _ptrs, _n_pos, _descs=None):
        self.calls.append(("region_enter", group))

    def describe(self, _group, _ptrs, _descs):
        return 0

    def region_exit(self, group, _out_ptrs, ptrs=(), nbytes=(), flags=(), _desc_ptrs=(), _descs=()):
        self.calls.append(("region_exit", group))
        return self.save_n(group, ptrs, nbytes, flags)

    def save_n(self, _group, ptrs, _nbytes, _flags):
        first = self._h + 1
        self._h += len(ptrs)
        return list(range(first, self._h + 1))

    def unpack(self, handle):
        self.calls.append(("unpack", handle))
        return 1

    def backward_enter(self, group):
        self.calls.append(("enter", group))

    def backward_exit(self, group):
        self.calls.append(("exit", group))

    def check(self, call, rc):
        raise AssertionError("%s: %d" % (call, rc))


def test_torch_boundaries_in_process():
    """A leaf tensor that takes a gradient is the first layer's input every step: its one gradient hook
    does not pile up calls over the steps, enter/exit bracket every unpack each step, the gradients
    equal those of the unhooked modules bit for bit, and remove() takes the hook off the live tensor."""
    import torch
    from swapagent import core
    import swapagent.torch as sat

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, x, *, extra=None):
            y = torch.tanh(self.lin(x))
            if extra is not None:
                y = y + extra * 0.5
            return {"h": y, "aux": [y * 2]}

    torch.manual_seed(0)
    blocks = [Block() for _ in range(3)]
    x = torch.randn(4, 16, requires_grad=True)

    def step():
        for m in blocks:
            m.zero_grad(set_to_none=True)
        x.grad = None
        h0 = blocks[0](x)["h"]
        h1 = blocks[1](h0)["h"]
        out = blocks[2](h1, extra=h0)  # h0 feeds two blocks, one as a keyword input
        (out["h"].sum() + out["aux"][0].mean()).backward()
        return [p.grad.clone() for m in blocks for p in m.parameters()] + [x.grad.clone()]

    want = step()
    agent = FakeAgent()
    fw = sat.Torch(include_cpu=True)
    layers, removers = [], []
    for i, m in enumerate(blocks):
        layers.append(core.Layer(agent, fw, m, "layer.%d" % i, True))
        removers += sat._install(m, layers[-1], True)  # pylint: disable=protected-access
    handle = core.Handle(layers, removers)
    for _ in range(3):
        agent.calls = []
        got = step()
        assert all(torch.equal(a, b) for a, b in zip(want, got))
        bw = [c for c in agent.calls if c[0] in ("enter", "exit")]
        assert bw == [(k, "layer.%d" % i) for i in (2, 1, 0) for k in ("enter", "exit")], agent.calls
        for i in range(3):
            g = "layer.%d" % i
            e, x_ = agent.calls.index(("enter", g)), agent.calls.index(("exit", g))
            mine = {h for h, *_ in layers[i].saved}
            assert mine and {c[1] for c in agent.calls[e:x_] if c[0] == "unpack"} >= mine
            assert not [c for c in agent.calls if c[0] == "unpack" and c[1] in mine and
                        not e < agent.calls.index(c) < x_]
        ch = core._chains[id(x)][1]  # pylint: disable=protected-access
        assert len(ch.inputs) <= 1 and not ch.outputs, (ch.inputs, ch.outputs)
    assert len(x._backward_hooks) == 1  # pylint: disable=protected-access
    handle.remove()
    assert not x._backward_hooks and id(x) not in core._chains  # pylint: disable=protected-access
    agent.calls = []
    assert all(torch.equal(a, b) for a, b in zip(want, step()))
    assert agent.calls == []


def test_group_streams_reaches_the_agent(monkeypatch, tmp_path):
    """SWAPAGENT_CALL_GROUP_STREAMS through the companions' core: accepted for a group, EINVAL without one."""
    monkeypatch.setenv("SWAPAGENT_OUT", str(tmp_path))
    from swapagent import core
    agent = core.load()
    assert agent.group_streams("layer.0", [0x1000, 0x2000]) == 0
    with pytest.warns(RuntimeWarning, match="EINVAL"):
        assert agent.group_streams("", [0x1000]) == core.EINVAL


def test_region_exit_in_one_call(monkeypatch, tmp_path, request):
    """Agent.region_exit: the region's saves, descriptions and exit in one call, or (no outputs) its saves
    alone. Every save gets a handle and the region is exited (exiting it again is the exit's EORDER, warned
    of)."""
    import ctypes
    monkeypatch.setenv("SWAPAGENT_OUT", str(tmp_path))
    from swapagent import core
    agent = core.load()
    request.addfinalizer(lambda prev=agent.queued: agent.set_queued(prev))
    agent.set_queued(False)  # every call at once, its code at once
    bufs = [ctypes.create_string_buffer(4096) for _ in range(3)]
    ptrs = [ctypes.addressof(b) for b in bufs]
    descs = ["output\tfloat32\t1024", b"\tfloat32\t1024", b"\tfloat32\t1024"]
    for group in ("layer.0", "layer.1"):
        assert agent.region_enter(group, ptrs[:1], 1, ["args[0]\tfloat32\t1024"]) == 0
        if group == "layer.0":
            hs = agent.region_exit(group, ptrs[:1], ptrs[1:], [4096, 4096], [0, core.SAVE_PARAM], ptrs, descs)
        else:
            hs = agent.save_n(group, ptrs[1:], [4096, 4096], [0, core.SAVE_PARAM])
            assert agent.describe(group, ptrs, descs) == 0
            assert agent.region_exit(group, ptrs[:1]) == []  # no saves left: none reported
        assert len(hs) == 2 and min(hs) > 0, hs
        assert [agent.keep_reason(h) for h in hs][1] != agent.keep_reason(hs[0]), "the parameter flag was lost"
        with pytest.warns(RuntimeWarning, match="EORDER"):
            assert agent.region_exit(group, []) == []
        assert agent.backward_enter(group) == 0
        assert all(agent.unpack(h) for h in hs)
        assert agent.backward_exit(group) == 0


def replay_json(trace_dir, policy):
    """`swapagent replay --format json` of the one trace in trace_dir, without what names the process or
    was timed."""
    p = subprocess.run([CLI, "replay", trace_dir, "--policy", policy, "--min-bytes", "1024", "--format", "json"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    (r,) = json.loads(p.stdout)["replays"]
    r["stats"] = {k: v for k, v in r["stats"].items() if not k.endswith("_ns")}  # the replay's own clock
    return {k: v for k, v in r.items() if k not in ("file", "argv", "pid")}


def decisions(groups):
    """What the agent made of each save (reason, state, size, flags, role), without what differs between
    processes: handles and addresses."""
    return {g: [{k: v for k, v in e.items() if k not in ("handle", "ptr")} for e in es] for g, es in groups.items()}


@pytest.mark.parametrize("policy,model", [("off", "decoder"), ("off", FAN), ("safe-still", "decoder")])
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_queued_calls_match_plain(case, fw, policy, model):
    """Where nothing moves (off; safe with every storage below SWAPAGENT_MIN_BYTES) the companion's calls are
    queued (answered in C, run by the agent later in their place): the agent must make of them what it makes
    of plain calls. Every save's keep reason and state, the stats, the what-if of
    the trace under safe, and the numerics (bit-identical to no companion) are the same as by the plain
    calls."""
    base_p, base, base_out = case(fw, "noswap", model=model)
    base = ok(base_p, base)
    runs = {}
    for policy in (policy, policy + "-plain"):
        p, res, out = case(fw, "swap", policy, model=model)
        runs[policy] = (ok(p, res), out)
        assert_same_numerics(fw, base, base_out, runs[policy][0], out)
    (dres, dout), (pres, pout) = runs.values()
    assert dres["agent"]["queued"] is True and pres["agent"]["queued"] is False
    assert decisions(dres["groups"]) == decisions(pres["groups"])
    ignore = ("runtime", "peak_device_bytes")  # the process's own runtime calls and memory differ slightly
    assert {k: v for k, v in dres["stats"].items() if k not in ignore} == \
        {k: v for k, v in pres["stats"].items() if k not in ignore}
    assert dres["stats"]["saves"] > 0 and dres["stats"]["rejected"] == pres["stats"]["rejected"]
    assert [w for w in dres["warnings"] if "swapagent" in w] == []
    what_if = [replay_json(os.path.join(o, "trace"), "safe") for o in (dout, pout)]
    assert what_if[0] == what_if[1] and what_if[0]["bytes_moved_out"] > 0, what_if
