"""test_hot_path.py: the companions' compiled hot path (python/swapagent/_hot.c). It loads and runs by default,
gives the same losses and gradients as the pure-Python path bit for bit, the pure-Python path takes over when
it cannot load (or SWAPAGENT_COMPILED=0 says so), and the run's summary says which one ran. The rest of the
companion tests run on both paths (make py-test runs them again with SWAPAGENT_COMPILED=0)."""

import gc
import glob
import json
import os
import re
import subprocess
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_companions as tc  # noqa: E402

HOT = os.path.join(tc.REPO, "build", "lib", "swapagent_hot.abi3.so")
HOT_TIMED = os.path.join(tc.REPO, "build", "bench", "swapagent_hot.abi3.so")  # the bench's timed build


def summary(out):
    p = subprocess.run([tc.CLI, "report", os.path.join(out, "trace")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("framework", tc.FRAMEWORKS)
def test_both_paths_bit_identical(framework, tmp_path, monkeypatch):
    tc.need(HOT)
    got = {}
    for want in ("1", "0"):
        out = str(tmp_path / ("compiled" if want == "1" else "python"))
        os.makedirs(out)
        monkeypatch.setenv("SWAPAGENT_COMPILED", want)
        p, res = tc.run(framework, "swap", "safe", out)
        assert p.returncode == 0 and res is not None, p.stderr[-3000:]
        got[want] = (res, out)
    (res_c, out_c), (res_p, out_p) = got["1"], got["0"]
    # The compiled path ran where asked, and moved what the pure-Python one moved.
    assert res_c["stats"]["offloaded_storages"] > 0, res_c["stats"]
    for k in ("offloaded_storages", "restored_storages", "saves"):
        assert res_c["stats"].get(k) == res_p["stats"].get(k), (k, res_c["stats"], res_p["stats"])
    tc.assert_same_numerics(framework, res_p, out_p, res_c, out_c)
    assert "companion hot path: compiled" in summary(out_c)
    assert "companion hot path: python: SWAPAGENT_COMPILED=0" in summary(out_p)


@pytest.fixture
def fresh_core(monkeypatch):
    """swapagent.core with the hot-path decision not taken yet (and put back after)."""
    sys.path.insert(0, tc.PKG)
    from swapagent import core
    monkeypatch.setattr(core, "_hot", None)
    monkeypatch.setattr(core, "_hot_path_ran", None)
    return core


def test_unloadable_module_falls_back_to_python(fresh_core, tmp_path, monkeypatch):
    broken = tmp_path / "swapagent_hot.abi3.so"
    broken.write_bytes(b"not an ELF file")
    monkeypatch.setattr(fresh_core, "hot_candidates", lambda: [str(tmp_path / "missing.so"), str(broken)])
    monkeypatch.delenv("SWAPAGENT_COMPILED", raising=False)
    assert fresh_core.hot_module() is None
    assert fresh_core._hot_path_ran.startswith("python: %s does not load" % broken), fresh_core._hot_path_ran
    # Decided once: asking again does not look again.
    monkeypatch.setattr(fresh_core, "hot_candidates", lambda: [HOT])
    assert fresh_core.hot_module() is None


def test_compiled_required_but_missing_is_a_clear_error(fresh_core, tmp_path, monkeypatch):
    monkeypatch.setattr(fresh_core, "hot_candidates", lambda: [str(tmp_path / "none.so")])
    monkeypatch.setenv("SWAPAGENT_COMPILED", "1")
    with pytest.raises(fresh_core.AgentError, match="SWAPAGENT_COMPILED=1, but the compiled hot path is not there"):
        fresh_core.hot_module()


def test_bad_setting_is_the_default(fresh_core, tmp_path, monkeypatch):
    """A bad SWAPAGENT_COMPILED is auto, the default, by the agent's rule for every setting (the agent names
    it at load; `swapagent run` refuses it): the compiled path is looked for, and its absence is no error."""
    monkeypatch.setattr(fresh_core, "hot_candidates", lambda: [str(tmp_path / "none.so")])
    for bad in ("yes", "2"):
        monkeypatch.setattr(fresh_core, "_hot_path_ran", None)
        monkeypatch.setenv("SWAPAGENT_COMPILED", bad)
        assert fresh_core.hot_module() is None
        assert fresh_core._hot_path_ran.startswith("python: swapagent_hot"), fresh_core._hot_path_ran
    monkeypatch.setattr(fresh_core, "_hot_path_ran", None)
    monkeypatch.setenv("SWAPAGENT_COMPILED", " 0 ")
    assert fresh_core.hot_module() is None and fresh_core._hot_path_ran == "python: SWAPAGENT_COMPILED=0"


def test_compiled_module_loads_and_packs(fresh_core, monkeypatch):
    """The built module, loaded as the companions load it: its Packed carries what core.Packed carries."""
    tc.need(HOT)
    monkeypatch.setattr(fresh_core, "hot_candidates", lambda: [HOT])
    monkeypatch.setenv("SWAPAGENT_COMPILED", "1")
    hot = fresh_core.hot_module()
    assert hot is not None and fresh_core._hot_path_ran == "compiled"

    class Layer:  # what a Pass names as its layer; Hot reads nothing of it
        pass

    layer, region, lists = Layer(), {}, [[] for _ in range(5)]
    unpacked, entries = set(), {}
    storage = object()
    saved = {"a": (storage, 100, 64), "p": (storage, 200, 8), "empty": (storage, 0, 0)}
    # The layer's methods Hot may call: none is called on this path (no unpack, no region hooks).
    calls = {name: (lambda *a, n=name: pytest.fail("Hot called Layer." + n)) for name in
             ("flush", "enter", "maybe_exit", "input_grad", "output_grad", "forward_pre", "forward_post")}
    h = hot.Hot(layer=layer, saved_of=saved.get, alias=lambda t: "alias of " + t, region=region, bptr=lists[0],
                bsize=lists[1], bflag=lists[2], bstore=lists[3], saved_t=lists[4], unpacked=unpacked,
                entries=entries, handles=[], saved=[], agent=object(), group=b"layer.0", lock=threading.RLock(),
                **calls)
    # The layer's state is the Hot's, as core fills it: no forward yet, nothing saved.
    assert h.latest is None and h.params == frozenset() and not h.removed and not h.guarded
    assert h.pack("a") == "a"
    h.latest, h.params = hot.Pass(h), frozenset([200])
    assert h.latest.layer is layer and (h.latest.refs, h.latest.handles, h.latest.inputs_left) == ([], [], 0)
    pa, pa2, pp = h.pack("a"), h.pack("a"), h.pack("p")
    assert h.pack("empty") == "empty" and h.pack("no storage") == "no storage"
    assert fresh_core.is_packed(pa) and (pa.slot, pa2.slot, pp.slot) == (0, 0, 1)
    assert pa.tensor == "alias of a" and pa.pass_ is h.latest and pa.handle == 0
    # Not tracked by the collector (_hot.c says why): its end comes from its reference count alone, below.
    assert not gc.is_tracked(pa)
    bptr, bsize, bflag, bstore, saved_t = lists
    assert (bptr, bsize, bflag, saved_t) == ([100, 200], [64, 8], [0, 1], ["a", "p"]) and bstore == [storage] * 2
    assert h.latest.refs == [2, 1] and region == {100: 0, 200: 1} and len(h) == 3
    # Reported: handles 7 and 8; the registry holds the storages.
    h.latest.handles[:] = [7, 8]
    entries.update({7: storage, 8: storage})
    assert pa.handle == 7
    del pa2  # a saved tensor freed: one reference less, the storage stays while pa holds it
    assert h.latest.refs == [1, 1] and 7 in entries and len(h) == 2
    del pp  # the slot's last one: the registry forgets its storage
    assert h.latest.refs == [1, 0] and 8 not in entries and len(h) == 1
    # The members take what Python's take, and say what is wrong with anything else.
    h.latest.entered, h.latest.inputs_left = True, 2
    assert h.latest.entered is True and h.latest.inputs_left == 2
    with pytest.raises(TypeError):
        h.latest.entered = 1


def test_compiled_path_looks_up_no_name_of_core():
    """C reads the layer's and a forward's state as members of its own structs (Hot, Pass), which core fills,
    and is handed the layer's methods when the Hot is made: every attribute name the C files look up is the
    framework's, the lock's, the binding Agent's (the methods a wrapper may replace on the object) or the
    Hot's own, none of core's objects."""
    import inspect
    from swapagent import binding
    src = "".join(open(p).read() for p in sorted(glob.glob(os.path.join(tc.PKG, "swapagent", "_hot*.c"))))
    interned = set(re.findall(r'\{&s_\w+, "([^"]+)"\}', src))
    on_self = set(re.findall(r'GetAttrString\(self, "([^"]+)"\)', src))
    assert interned and on_self and "GetAttr(h->o.layer" not in src
    assert not re.findall(r'GetAttrString\((?!self,)', src), "a name looked up on something else than the Hot"
    framework = {"dtype", "shape", "is_cpu", "is_meta", "untyped_storage", "data_ptr", "nbytes", "requires_grad",
                 "__dataclass_fields__", "__dict__"}
    lock = {"acquire", "release"}
    agent_src = inspect.getsource(binding.Agent)
    agent = {n for n in interned - framework - lock if "def %s(" % n in agent_src or "self.%s = " % n in agent_src}
    assert interned == framework | lock | agent, interned - framework - lock - agent
    assert on_self <= {"pack", "unpack"}


def test_package_files_stay_within_700_lines():
    """Each concern of the companions in a file of its own: no file of the package (Python or the compiled
    path's C) over 700 lines, which also holds _hot.c, the saved tensors' path, under its 1,000."""
    root = os.path.join(tc.PKG, "swapagent")
    sizes = {}
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith((".py", ".c", ".h")):
                with open(os.path.join(d, n)) as f:
                    sizes[os.path.relpath(os.path.join(d, n), root)] = sum(1 for _ in f)
    assert "_hot.c" in sizes and "core.py" in sizes, sorted(sizes)
    assert {n: k for n, k in sizes.items() if k > 700} == {}


@pytest.mark.parametrize("framework", tc.FRAMEWORKS)
def test_compiled_saved_descs_are_saved_desc(fresh_core, monkeypatch, framework):
    """The compiled descriptions of a region's saved tensors are core.saved_desc's, from the cache or through
    it; an object that is no tensor raises what saved_desc raises."""
    tc.need(HOT)
    monkeypatch.setattr(fresh_core, "hot_candidates", lambda: [HOT])
    monkeypatch.setenv("SWAPAGENT_COMPILED", "1")
    hot = fresh_core.hot_module()
    if framework == "torch":
        import torch
        ts = [torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(4, dtype=torch.float16), torch.tensor(1.0)]
    else:
        import mindspore as ms
        import numpy as np
        ts = [ms.Tensor(np.zeros((2, 3), np.float32)), ms.Tensor(np.zeros(4, np.float16)), ms.Tensor(1.0)]
    cache = {}
    got = hot.saved_descs(ts, cache, fresh_core.saved_desc)  # the module's own cache is not this one
    assert got == [fresh_core.saved_desc(t) for t in ts] and all(type(d) is bytes for d in got)
    assert hot.saved_descs(ts, fresh_core._saved_descs, fresh_core.saved_desc) == got
    with pytest.raises(AttributeError):
        hot.saved_descs([object()], fresh_core._saved_descs, fresh_core.saved_desc)


REGION_CHILD = r"""
import hashlib, json, logging, sys
import torch
from swapagent import core, stats
from swapagent import torch as st

mode = sys.argv[1]
calls = {"forward_pre": 0, "forward_post": 0}
backward = {n: 0 for n in ("enter", "maybe_exit", "input_grad", "output_grad", "backward_end", "Agent.backward_enter",
                           "Agent.backward_exit")}
for counts, names in ((calls, list(calls)), (backward, list(backward))):
    for name in names:
        cls, attr = (core.Agent, name[6:]) if name.startswith("Agent.") else (core.Layer, name)
        def counted(self, *a, _f=getattr(cls, attr), _n=name, _c=counts):
            _c[_n] += 1
            return _f(self, *a)
        setattr(cls, attr, counted)
torch.manual_seed(0)
torch.set_num_threads(1)
layers = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh()) for _ in range(4)])
cos = torch.randn(8, 64)
if mode == "timed":  # the bench's timed build (-DSWAPAGENT_HOT_TIMED) as the hot path
    core._hot, core._hot_path_ran = core.load_hot(sys.argv[2]), "compiled"
if mode != "none":
    h = st.layer_swap(layers, swap=range(3), prefetch=None, include_cpu=True)
    if mode == "python-region":
        agent = core.load()  # its region call replaced on the object (a recorder): Hot.pre and Hot.post hand over
        agent.region_enter = agent.region_enter
    if mode == "python-backward":
        agent = core.load()  # its backward calls replaced on the object: the C bookkeeping calls them
        agent.backward_enter, agent.backward_exit = agent.backward_enter, agent.backward_exit
    if mode == "enter-raises":  # each output gradient's enter fails: logged, the backward goes on
        def boom(group):
            raise RuntimeError("backward_enter(%s) refused by the test" % group)
        core.load().backward_enter = boom
        failed = []
        core.log.addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: failed.append(r.getMessage())})())
digest = hashlib.sha256()
for _ in range(3):
    x = torch.randn(8, 64, requires_grad=True)
    for m in layers:
        x = m(x * cos)
    loss = x.pow(2).mean()
    loss.backward()
    digest.update(loss.detach().numpy().tobytes())
    for p in layers.parameters():
        digest.update(p.grad.numpy().tobytes())
        p.grad = None
print(json.dumps({"calls": calls, "backward": backward, "digest": digest.hexdigest(),
                  "failed": failed if mode == "enter-raises" else None,
                  "saves": stats().get("saves") if mode != "none" else None,
                  "hot": core._hot_path_ran,
                  "timers": core._hot.timers() if mode == "timed" else None}))
"""


def test_compiled_region_hooks_take_the_common_case(tmp_path):
    """On torch, the compiled region hooks (Hot.pre, Hot.post) do a plain region's forward pre-hook and
    forward hook without Layer's Python methods; with no C calls to make they hand every region to those
    methods. Both give no companion's losses and gradients bit for bit, and the agent the same saves. The
    backward bookkeeping runs in C too (no Layer method), with the agent's backward calls through swapagent_call,
    or through its methods where they were replaced: the trace holds every group's enter and exit either way."""
    tc.need(HOT)
    tc.need(HOT_TIMED)
    got = {}
    for mode in ("none", "compiled", "python-region", "python-backward", "enter-raises", "timed"):
        env = dict(os.environ, PYTHONPATH=tc.PKG, LD_PRELOAD=tc.LIB, SWAPAGENT_POLICY="safe",
                   SWAPAGENT_MIN_BYTES="1024", SWAPAGENT_COMPILED="1", SWAPAGENT_OUT=str(tmp_path / mode))
        p = subprocess.run([sys.executable, "-c", REGION_CHILD, mode, HOT_TIMED], env=env, capture_output=True,
                           text=True, timeout=tc.TIMEOUT)
        assert p.returncode == 0, p.stderr[-3000:]
        got[mode] = json.loads(p.stdout.strip().splitlines()[-1])
        if mode != "none":
            rep = subprocess.run([tc.CLI, "report", "--format", "json", str(tmp_path / mode)], capture_output=True,
                                 text=True, timeout=tc.TIMEOUT)
            assert rep.returncode == 0, rep.stderr[-3000:]
            abi = [pr["abi"] for pr in json.loads(rep.stdout)["processes"] if pr["abi"].get("groups")]
            assert len(abi) == 1, abi
            got[mode]["traced"] = [abi[0]["backward_enters"], abi[0]["backward_exits"]]
    assert got["compiled"]["hot"] == "compiled"
    none = dict.fromkeys(got["compiled"]["backward"], 0)
    assert got["compiled"]["backward"] == none, got
    assert got["python-backward"]["backward"] == dict(none, **{"Agent.backward_enter": 9, "Agent.backward_exit": 9})
    assert got["compiled"]["traced"] == got["python-backward"]["traced"] == got["python-region"]["traced"] == [9, 9]
    assert got["python-backward"]["digest"] == got["none"]["digest"]
    # A failing agent call in a gradient hook is logged once per hook call and never breaks the backward: every
    # output gradient's enter (3 layers x 3 steps) failed, each group still exited at its last unpack.
    assert got["enter-raises"]["failed"] == ["swapagent: gradient hook failed"] * 9, got["enter-raises"]["failed"]
    assert got["enter-raises"]["digest"] == got["none"]["digest"] and got["enter-raises"]["traced"] == [0, 9]
    assert got["compiled"]["calls"] == {"forward_pre": 0, "forward_post": 0}, got
    assert got["python-region"]["calls"] == {"forward_pre": 9, "forward_post": 9}, got  # 3 layers x 3 steps
    assert got["compiled"]["digest"] == got["python-region"]["digest"] == got["none"]["digest"]
    assert got["compiled"]["saves"] == got["python-region"]["saves"] > 0, got
    # The timed build does what the plain one does, and its probes count every call: each region's hooks and
    # their parts once a forward (3 layers x 3 steps), each saved tensor packed, unpacked and freed once, the end
    # of each backward once a layer.
    timed = got["timed"]
    assert timed["digest"] == got["none"]["digest"] and timed["traced"] == [9, 9]
    assert timed["saves"] == got["compiled"]["saves"]
    counts = {k: n for k, (_, n) in timed["timers"].items()}
    assert all(sec >= 0 for sec, _ in timed["timers"].values()), timed["timers"]
    for probe in ("pre", "post", "end", "pre.params", "pre.inputs", "post.descs", "post.report", "post.grads"):
        assert counts[probe] == 9, (probe, counts)
    assert counts["pack"] == counts["unpack"] == counts["free"] > 0 and counts["grad"] > 0, counts
