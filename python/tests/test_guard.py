"""test_guard.py proves the guard on an unmodified job whose own swap releases storages: hp_job.py, which
swaps with the hyper-parallel stand-in (standin/, the public shape of hyper-parallel's swap with its
issue-294 bug) on torch and MindSpore, run as it is with and without `swapagent run`. The stand-in's
device check is forced on (HYPER_PARALLEL_STANDIN_DEVICE=1), so its swap runs on CPU.

Every run is a separate process; they start with the module, two at a time."""

import concurrent.futures
import json
import os
import re
import subprocess
import sys

import pytest

from test_companions import CLI, HERE, LIB, PKG, need  # pylint: disable=unused-import

JOB = os.path.join(HERE, "hp_job.py")
MF_JOB = os.path.join(HERE, "mf_job.py")
STANDIN = os.path.join(HERE, "standin")
FRAMEWORKS = ["torch", "mindspore"]
TIMEOUT = 300
KEPT_LINE = "swapagent: guard kept keyword input rotary_cos_sin[0]"


def job_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWAPAGENT_") and k not in (
        "LD_PRELOAD", "PYTHONPATH")}
    env.update({"PYTHONPATH": STANDIN, "HYPER_PARALLEL_STANDIN_DEVICE": "1", "SWAPAGENT_MIN_BYTES": "1024",
                "GLOG_v": "3", "PYTHONFAULTHANDLER": "1"})
    env.update(extra)
    return env


class Run:
    """One finished process: its return code, output and what it left in its directory."""

    def __init__(self, p, out):
        self.rc, self.stdout, self.stderr, self.out = p.returncode, p.stdout, p.stderr, out
        self.result = None
        rp = os.path.join(out, "result.json")
        if os.path.exists(rp):
            with open(rp) as f:
                self.result = json.load(f)
        self.probe = []
        pp = os.path.join(out, "probe.txt")
        if os.path.exists(pp):
            with open(pp) as f:
                self.probe = [tuple(int(x) for x in line.split()) for line in f if line.strip()]

    def report(self):
        p = subprocess.run([CLI, "report", "--format", "json", os.path.join(self.out, "trace")],
                           capture_output=True, text=True, timeout=60)
        # 3: written, with a batch the crash damaged left out (a run that dies of its own bug, outputs-only)
        assert p.returncode == 0 or (p.returncode == 3 and self.rc != 0), p.stderr
        return json.loads(p.stdout)["processes"]

    def why(self):
        return "exit %s\n--- stdout\n%s\n--- stderr\n%s" % (self.rc, self.stdout[-3000:], self.stderr[-6000:])


def start(tmp, name, framework, mode, policy=None, layout="checkpoint", env=None, python=None, extra=()):
    """Runs hp_job.py (under `swapagent run --policy P` when policy is given) in tmp/name; framework
    "mindformers" runs mf_job.py (layout "no-workaround" switches MindFormers' own workaround off)."""
    out = os.path.join(str(tmp), name)
    os.makedirs(out, exist_ok=True)
    if framework == "mindformers":
        cmd = [sys.executable, MF_JOB, "--mode", mode, "--out", out] + (
            ["--no-workaround"] if layout == "no-workaround" else [])
    else:
        cmd = [sys.executable, JOB, "--framework", framework, "--mode", mode, "--layout", layout, "--out", out]
    cmd += list(extra)
    if policy is not None:
        pre = [CLI, "run", "--policy", policy, "--out", os.path.join(out, "trace")]
        if python is not None:
            pre += ["--python", python]
        cmd = pre + ["--"] + cmd
    p = subprocess.run(cmd, env=job_env(**(env or {})), capture_output=True, text=True, timeout=TIMEOUT, cwd=out)
    return Run(p, out)


# hyper-parallel's recompute + swap (hp_job.py --mode acswap): 8 layers, prefetch 1, the first layer's input
# made inside the model as an embedding makes it.
AC = ("--layers", "8", "--embed")

# (name, framework, mode, policy, layout, env, python[, extra]): every run of the module.
RUNS = []
for fw in FRAMEWORKS:
    RUNS += [
        ("%s-noswap" % fw, fw, "noswap", None, "checkpoint", None, None),
        ("%s-bug" % fw, fw, "swap", None, "checkpoint", None, None),
        ("%s-safe" % fw, fw, "swap", "safe", "checkpoint", None, None),
        ("%s-safe-noprotect" % fw, fw, "swap", "safe", "checkpoint", {"HYPER_PARALLEL_STANDIN_NO_PROTECT": "1"}, None),
        ("%s-outputs-only" % fw, fw, "swap", "outputs-only", "checkpoint", None, None),
        ("%s-off" % fw, fw, "swap", "off", "checkpoint", None, None),
    ]
RUNS += [
    # the newest layout (activation_memory: api, wrapper, swap, checkpoint): swap_wrapper, then group_swap=True
    ("torch-bug-newest", "torch", "swap", None, "memory", None, None),
    ("torch-safe-newest", "torch", "swap", "safe", "memory", None, None),
    ("torch-outputs-only-newest", "torch", "swap", "outputs-only", "memory", None, None),
    ("torch-bug-newest-group", "torch", "swap", None, "memory", None, None, ("--group-swap",)),
    ("torch-safe-newest-group", "torch", "swap", "safe", "memory", None, None, ("--group-swap",)),
    ("torch-python-off", "torch", "swap", "safe", "checkpoint", None, "off"),
    # MindFormers' DeepSeek-V3 through its own apply_ac/apply_swap (layers 0-10 of 12, prefetch 1)
    ("mf-noswap", "mindformers", "noswap", None, "", None, None),
    ("mf-workaround", "mindformers", "swap", None, "", None, None),
    ("mf-bug", "mindformers", "swap", None, "no-workaround", None, None),
    ("mf-safe", "mindformers", "swap", "safe", "no-workaround", None, None),
    ("torch-ac-noswap", "torch", "noswap", None, "checkpoint", None, None, AC),
    ("torch-ac-standin", "torch", "acswap", None, "checkpoint", None, None, AC),
    ("torch-ac-safe", "torch", "acswap", "safe", "checkpoint", None, None, AC),
    # the job keeps every layer's input (output_hidden_states=True) and reads them after the last layer:
    # nothing it holds may go (the stand-in alone releases them, and the read crashes)
    ("torch-ac-keep-noswap", "torch", "noswap", None, "checkpoint", None, None, AC + ("--keep-inputs",)),
    ("torch-ac-keep-standin", "torch", "acswap", None, "checkpoint", None, None, AC + ("--keep-inputs",)),
    ("torch-ac-keep-off", "torch", "acswap", "off", "checkpoint", None, None, AC + ("--keep-inputs",)),
    ("torch-ac-keep-safe", "torch", "acswap", "safe", "checkpoint", None, None, AC + ("--keep-inputs",)),
    ("torch-ac-newest-standin", "torch", "acswap", None, "memory", None, None, AC),
    ("torch-ac-newest-safe", "torch", "acswap", "safe", "memory", None, None, AC),
    ("torch-ac-newest-keep-standin", "torch", "acswap", None, "memory", None, None, AC + ("--keep-inputs",)),
    ("torch-ac-newest-keep-off", "torch", "acswap", "off", "memory", None, None, AC + ("--keep-inputs",)),
    ("torch-ac-newest-keep-safe", "torch", "acswap", "safe", "memory", None, None, AC + ("--keep-inputs",)),
    # hyper-parallel's test_act_swap layout: swap_wrapper on each layer's attention, the layers chained
    ("torch-nested-noswap", "torch", "noswap", None, "checkpoint", None, None, ("--nested",)),
    ("torch-nested-safe", "torch", "swap", "safe", "checkpoint", None, None, ("--nested",)),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    need(LIB)
    need(CLI)
    tmp = tmp_path_factory.mktemp("guard")
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futs = {r[0]: pool.submit(start, tmp, *r) for r in RUNS}
        return {k: f.result() for k, f in futs.items()}


def released_cos_read(run):
    """The first (step, layer) whose entry found the cos storage empty, or None."""
    return next(((s, l) for s, l, n in run.probe if n == 0), None)


@pytest.mark.parametrize("name", ["%s-bug" % fw for fw in FRAMEWORKS] + ["torch-bug-newest", "torch-bug-newest-group"])
def test_bug_reproduces_without_swapagent(runs, name):
    r = runs[name]
    fw = name.split("-")[0]
    assert released_cos_read(r) == (0, 2), "the stand-in's swap must empty cos before layer 2 reads it:\n" + r.why()
    assert r.rc != 0 and r.result is None, r.why()
    # the control: the same job without swap reads cos whole everywhere and finishes
    n = runs["%s-noswap" % fw]
    assert n.rc == 0 and n.result and released_cos_read(n) is None, n.why()


def check_safe(r, base):
    assert r.rc == 0 and r.result is not None, r.why()
    assert released_cos_read(r) is None, "cos lost its storage under the guard:\n" + r.why()
    assert r.result["losses"] == base.result["losses"], "losses differ from no swap"
    assert r.result["grads"] == base.result["grads"], "gradients differ from no swap"
    # The stand-in still released its internal activations (its own count), and the summary says so.
    assert r.result["released"] > 0 and r.result["released_bytes"] > 0, r.why()
    m = re.search(r"guard: 5 groups moved by the job's own swap \(swap_group_0\.\.swap_group_4\); it asked "
                  r"(\d+) releases: (\d+) allowed \(([^)]+)\)", r.stderr)
    assert m and int(m.group(2)) == r.result["released"], r.why()
    assert "kept rotary_cos_sin[0] (input) in swap_group_0..swap_group_4" in r.stderr, r.why()
    assert r.stderr.count(KEPT_LINE) == 1, "one stderr line the first time an argument is kept:\n" + r.why()
    (proc,) = r.report()
    g = proc["guard"]
    assert g["releases_allowed"] == r.result["released"] and g["allowed_bytes"] == r.result["released_bytes"]
    assert proc["released_external"] == 0 and proc["offloaded_bytes"] == r.result["released_bytes"]
    kept = {(k["arg"], k["reason"]): k for k in g["kept"]}
    for arg in ("rotary_cos_sin[0]", "rotary_cos_sin[1]"):
        assert kept[(arg, "input")]["groups"] == "swap_group_0..swap_group_4", g
    # layer 0's hidden state is held by the model's own call (its argument) whatever the framework counts
    assert kept[("args[0]", "input")]["groups"].startswith("swap_group_0"), g
    if "mindspore" in r.out:  # MindSpore counts no holders: the role keeps every input
        assert kept[("args[0]", "input")]["groups"] == "swap_group_0..swap_group_4", g
        assert g["released_unheld"] == [], g
    assert proc["meta"].get("python_guard") == "attached"


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_safe_is_bit_identical_and_still_swaps(runs, fw):
    r = runs["%s-safe" % fw]
    check_safe(r, runs["%s-noswap" % fw])
    g = runs["%s-safe" % fw].report()[0]["guard"]
    if fw == "mindspore":  # hyper-parallel got every input through protect_alias_tensors: never asked for one
        assert g["releases_kept"] == 0, g
    else:  # it got those a second layer received (RoPE's, from layer 1 on); layer 0's were asked and kept
        held = {k["arg"]: k["held_by"] for k in g["kept"]}
        assert g["releases_kept"] > 0 and held["rotary_cos_sin[0]"] > 0 and held["args[0]"] > 0, g


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_safe_refuses_releases_where_protect_is_missing(runs, fw):
    """An older hyper-parallel without protect_alias_tensors: the guard can only refuse the releases, and
    the loads that follow (resize back, copy the host bytes in) must leave the kept storages alone."""
    r = runs["%s-safe-noprotect" % fw]
    check_safe(r, runs["%s-noswap" % fw])
    g = r.report()[0]["guard"]
    assert g["releases_kept"] > 0 and g["kept_bytes"] > 0, g


def test_kept_storage_is_never_overwritten_with_stale_bytes(tmp_path):
    """The job scales cos in place between forward and backward. hyper-parallel (without
    protect_alias_tensors) copied cos out before, and each of the five groups that saved it loads those
    stale bytes back in backward: the guard, which refused the releases, skips each of those copies, so the
    backward reads what the job wrote, as without swap (a copy let through once changes the gradients)."""
    need(CLI)
    base = start(tmp_path, "noswap", "torch", "noswap", extra=["--bump-rope"])
    plain = start(tmp_path, "plain", "torch", "noswap")
    r = start(tmp_path, "safe", "torch", "swap", policy="safe", env={"HYPER_PARALLEL_STANDIN_NO_PROTECT": "1"},
              extra=["--bump-rope"])
    assert base.rc == 0 and plain.rc == 0 and r.rc == 0 and r.result, r.why()
    assert base.result["grads"] != plain.result["grads"], "the bump must change the gradients, or the test shows nothing"
    assert r.result["grads"] == base.result["grads"] and r.result["losses"] == base.result["losses"]
    assert r.report()[0]["guard"]["releases_kept"] > 0


@pytest.mark.parametrize("name", ["torch-safe-newest", "torch-safe-newest-group"])
def test_safe_newest_layout(runs, name):
    """The newest layout's swap_wrapper, per tensor and with group_swap=True: RoPE kept, bit-identical; the
    hidden states nothing but the layer's own machinery holds (the detached value its pack hook hands
    autograd) released."""
    r = runs[name]
    check_safe(r, runs["torch-noswap"])
    g = r.report()[0]["guard"]
    assert [(k["arg"], k.get("own_holders")) for k in g["released_unheld"]] == [("args[0]", ["packed"])], g


@pytest.mark.parametrize("fw", FRAMEWORKS + ["torch-newest"])
def test_outputs_only_names_the_cause_before_the_crash(runs, fw):
    r = runs["torch-outputs-only-newest"] if fw == "torch-newest" else runs["%s-outputs-only" % fw]
    assert r.rc != 0 and r.result is None, "outputs-only is hyper-parallel as shipped: it must crash\n" + r.why()
    assert released_cos_read(r) == (0, 2), r.why()
    first = r.stderr.find("swapagent: ========= FAULT")
    assert first >= 0, r.why()
    block = r.stderr[first:first + 2000]
    assert "keyword input rotary_cos_sin[0]" in block and "of swap_group_2 has no device memory" in block, block
    # The stand-in's offloads complete asynchronously: under load group 1's release of the shared storage
    # can come before group 0's. Either way the block names the group that really released it.
    assert re.search(r"released by swap_group_[01]\b", block), block
    crash = max(r.stderr.find("Segmentation fault"), r.stderr.find("storage of size 0"))
    assert crash < 0 or first < crash, "the diagnosis must come before the crash:\n" + r.why()
    assert r.report()[0]["guard"]["releases_kept"] == 0


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_off_releases_nothing(runs, fw):
    r = runs["%s-off" % fw]
    assert r.rc == 0 and r.result, r.why()
    assert r.result["released"] == 0 and r.result["grads"] == runs["%s-noswap" % fw].result["grads"]
    g = r.report()[0]["guard"]
    assert g["releases_allowed"] == 0 and g["releases_kept"] == 60, g


def test_mindformers_deepseek_v3_swap_path_guarded(runs):
    """MindFormers 2.1.0's YAML swap path (apply_ac -> apply_swap -> swap_wrapper and SwapManager of the
    stand-in) on its DeepSeek-V3. Its own workaround (MUST_SAVE for the decoder block's inputs) hides the
    bug; without it the bug is back; the guard alone makes the run bit-identical to no swap."""
    base, wa, bug, safe = (runs[k] for k in ("mf-noswap", "mf-workaround", "mf-bug", "mf-safe"))
    assert base.rc == 0 and base.result and released_cos_read(base) is None, base.why()
    assert wa.rc == 0 and wa.result["grads"] == base.result["grads"], wa.why()
    assert released_cos_read(bug) == (0, 2) and bug.rc != 0, "without the workaround the bug must show:\n" + bug.why()
    assert safe.rc == 0 and safe.result, safe.why()
    assert released_cos_read(safe) is None, safe.why()
    assert safe.result["losses"] == base.result["losses"] and safe.result["grads"] == base.result["grads"]
    (proc,) = safe.report()
    g = proc["guard"]
    assert g["groups"] == ["swap_group_%d" % i for i in range(11)], g["groups"]
    assert g["releases_allowed"] > 0 and g["allowed_bytes"] > 0 and proc["released_external"] == 0, g
    kept = {(k["arg"], k["reason"]): k["groups"] for k in g["kept"]}
    assert kept[("rotary_cos_sin[0]", "input")] == "swap_group_0..swap_group_10", kept
    assert KEPT_LINE in safe.stderr, safe.why()


def test_python_off_leaves_the_job_alone(runs):
    r = runs["torch-python-off"]
    assert released_cos_read(r) == (0, 2) and r.rc != 0, "--python off must not guard:\n" + r.why()


def test_own_sitecustomize_still_runs(tmp_path):
    need(CLI)
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "marker"
    (site / "sitecustomize.py").write_text("open(%r, 'w').write('ran')\n" % str(marker))
    code = "import sys, swapagent.guard as g; print('guard', g._installed); print('path', %r in sys.path)" % (
        os.path.join(PKG, "swapagent", "_bootstrap"))
    env = job_env(PYTHONPATH=str(site))
    p = subprocess.run([CLI, "run", "--out", str(tmp_path / "t"), "--", sys.executable, "-c", code], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert marker.read_text() == "ran", "the job's own sitecustomize did not run"
    assert "guard True" in p.stdout and "path False" in p.stdout, p.stdout


def test_unknown_layout_is_said_not_guarded(tmp_path):
    """A job that imports hyper-parallel's swap from a module path the guard does not know: one line on stderr
    naming it and what it defines, and the report says it too; a module of hyper_parallel that defines no swap
    code says nothing."""
    need(CLI)
    pkg = tmp_path / "hp" / "hyper_parallel"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "offload_next.py").write_text(
        "class SwapTensor:\n    pass\n\n\ndef swap_wrapper(module):\n    return module\n")
    (pkg / "core" / "mesh.py").write_text("def device_mesh():\n    return None\n")
    code = "import hyper_parallel.core.mesh, hyper_parallel.core.offload_next, hyper_parallel.core.offload_next; print('ran')"
    out = tmp_path / "t"
    p = subprocess.run([CLI, "run", "--out", str(out), "--", sys.executable, "-c", code],
                       env=job_env(PYTHONPATH=str(tmp_path / "hp")), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout == "ran\n", p.stderr
    said = [l for l in p.stderr.splitlines() if l.startswith("swapagent: not guarded:")]
    assert said == ["swapagent: not guarded: hyper_parallel.core.offload_next (SwapTensor, swap_wrapper): "
                    "hyper-parallel's swap in a layout the guard does not know; its releases go unasked"], p.stderr
    r = subprocess.run([CLI, "report", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "  not guarded: hyper_parallel.core.offload_next (SwapTensor, swap_wrapper): hyper-parallel's swap in a " \
        "layout the guard does not know; its releases go unasked" in r.stdout, r.stdout


def test_non_python_command_is_unaffected(tmp_path):
    need(CLI)
    cmd = ["sh", "-c", "echo hello; printf '%s|' a 'b c'; ls -1 /"]
    plain = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    under = subprocess.run([CLI, "run", "--out", str(tmp_path / "t"), "--"] + cmd, capture_output=True, text=True,
                           timeout=60)
    assert under.returncode == plain.returncode == 0
    assert under.stdout == plain.stdout


def test_python_the_bootstrap_never_reached_is_named(tmp_path):
    need(CLI)
    p = subprocess.run([CLI, "run", "--out", str(tmp_path / "t"), "--", sys.executable, "-I", "-c", "print(1)"],
                       env=job_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout == "1\n", p.stderr
    assert "is a Python process the guard did not reach" in p.stderr and " -I " in p.stderr, p.stderr


def test_msrun_two_workers_both_guarded(tmp_path):
    """MindSpore's msrun, two workers, under `swapagent run --policy safe`: the environment (PYTHONPATH with
    the bootstrap) reaches both, each is guarded and writes one trace, and both match no swap."""
    need(CLI)
    msrun = os.path.join(os.path.dirname(sys.executable), "msrun")
    need(msrun)
    import socket  # pylint: disable=import-outside-toplevel
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    out.mkdir()
    base = start(tmp_path, "noswap", "mindspore", "noswap")
    assert base.rc == 0, base.why()
    cmd = [CLI, "run", "--policy", "safe", "--out", str(out / "trace"), "--", msrun, "--worker_num=2",
           "--local_worker_num=2", "--master_port=%d" % port, "--log_dir=%s" % (out / "logs"), "--join=True",
           JOB, "--framework", "mindspore", "--mode", "swap", "--out", str(out)]
    # msrun starts `python SCRIPT` from PATH in every process: this environment's
    env = job_env(PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT, cwd=str(out))
    logs = "".join(open(os.path.join(out, "logs", f)).read()[-3000:] for f in sorted(os.listdir(out / "logs")))
    assert p.returncode == 0, p.stderr[-4000:] + logs
    traces = sorted(f for f in os.listdir(out / "trace") if f.endswith(".swtrace") and ".rank" in f)
    assert [t.split(".")[1] for t in traces] == ["rank0", "rank1"], (traces, p.stderr[-3000:])
    procs = json.loads(subprocess.run([CLI, "report", "--format", "json", str(out / "trace")],
                                      capture_output=True, text=True, timeout=60).stdout)["processes"]
    workers = [q for q in procs if q["rank"] in (0, 1)]
    assert len(workers) == 2, procs
    for q in workers:
        assert q["meta"].get("python_guard") == "attached" and q["guard"]["releases_allowed"] > 0, q["guard"]
        with open(os.path.join(out, "rank%d" % q["rank"], "result.json")) as f:
            res = json.load(f)
        assert res["grads"] == base.result["grads"] and res["losses"] == base.result["losses"]


FOREIGN_JOB = r'''
"""A torch job under the companion (layers 0-2 of 4) with other swap code beside it that releases every
storage a layer received as a keyword input once the layer ran (its forward hook, registered after the
companion's): a companion's region saved those."""
import json, sys
import torch
import swapagent.torch as sa

torch.manual_seed(0)
layers = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(4))
foreign = sys.argv[1] == "foreign"


def release_kwargs(_m, _args, kwargs, _out):
    if foreign:
        for t in kwargs.values():
            t.untyped_storage().resize_(0)


for l in layers:
    l.forward = (lambda l: lambda x, *, scale: torch.tanh(torch.nn.functional.linear(x, l.weight, l.bias)) * scale)(l)
h = sa.layer_swap(layers, swap=range(3), include_cpu=True)
for l in layers:
    l.register_forward_hook(release_kwargs, with_kwargs=True)
x = torch.randn(8, 32, requires_grad=True)
out = {}
for step in range(2):
    scale = torch.full((8, 32), 0.5) * 1.0
    y = x
    for l in layers:
        y = l(y, scale=scale)
    y.sum().backward()
    out["grad%d" % step] = x.grad.numpy().tobytes().hex()
    x.grad = None
print(json.dumps(out))
'''


def test_other_swap_code_in_a_companion_region_is_vetoed(tmp_path):
    """A release other code attempts (resize_(0)) of a storage a companion's region saved is asked of the
    agent too: the keyword input every layer reads stays, and the run equals one without that code."""
    need(CLI)
    job = tmp_path / "foreign.py"
    job.write_text(FOREIGN_JOB)
    res = {}
    for name, mode, python in (("plain", "plain", "auto"), ("guarded", "foreign", "auto"), ("unguarded", "foreign", "off")):
        p = subprocess.run([CLI, "run", "--policy", "safe", "--python", python, "--out", str(tmp_path / name), "--",
                            sys.executable, str(job), mode], env=job_env(PYTHONPATH=PKG), capture_output=True,
                           text=True, timeout=120)
        res[name] = p
    assert res["plain"].returncode == 0, res["plain"].stderr[-3000:]
    g = res["guarded"]
    assert g.returncode == 0, g.stderr[-3000:]
    assert json.loads(g.stdout.splitlines()[-1]) == json.loads(res["plain"].stdout.splitlines()[-1])
    assert re.search(r"it asked \d+ releases: 0 allowed \(0 B\), [1-9]\d* refused", g.stderr), g.stderr[-3000:]
    assert res["unguarded"].returncode != 0, "the foreign release must break the job without the guard"


def test_guard_layers_names_layers_of_a_hand_written_swap(tmp_path):
    """SWAPAGENT_GUARD_LAYERS: a job whose hand-written swap (hp_job.py --mode ownswap) releases the RoPE
    keyword input too; the guard knows its layers by module path only, and keeps what crosses them."""
    need(CLI)
    base = start(tmp_path, "noswap", "torch", "noswap")
    bug = start(tmp_path, "bug", "torch", "ownswap")
    assert released_cos_read(bug) == (0, 2) and bug.rc != 0, bug.why()
    r = start(tmp_path, "guarded", "torch", "ownswap", policy="safe", env={"SWAPAGENT_GUARD_LAYERS": "layers.*"})
    assert r.rc == 0 and r.result, r.why()
    assert r.result["losses"] == base.result["losses"] and r.result["grads"] == base.result["grads"]
    g = r.report()[0]["guard"]
    assert g["groups"] == ["layers.%d" % i for i in range(6)] and g["releases_kept"] > 0, g
    kept = {(k["arg"], k["reason"]) for k in g["kept"]}
    assert ("rotary_cos_sin[0]", "input") in kept, g


# layout -> (the stand-in alone, under safe, keeping its inputs alone, under off and under safe, the own
# holders' kind)
AC_LAYOUTS = {"checkpoint": ("torch-ac-standin", "torch-ac-safe", "torch-ac-keep-standin", "torch-ac-keep-off",
                             "torch-ac-keep-safe", "view base"),
              "memory": ("torch-ac-newest-standin", "torch-ac-newest-safe", "torch-ac-newest-keep-standin",
                         "torch-ac-newest-keep-off", "torch-ac-newest-keep-safe", "packed")}


@pytest.mark.parametrize("layout", sorted(AC_LAYOUTS))
def test_recompute_swap_releases_what_nobody_else_holds(runs, layout):
    """hyper-parallel's checkpoint(..., swap_inputs=True), through torch's CheckpointWrapper and non-reentrant
    checkpoint, the layers chained with full backward hooks: the hidden state entering each layer is saved
    for the recompute and released after the next layer. Nothing but the layer's own machinery holds it then
    (the backward hooks hand the layer a view of it, whose base is the job's tensor), so the guard lets it
    go: the saved bytes left on device at the end of forward are the stand-in's own. In the newest layout
    hyper-parallel's pack hook hands autograd a detached alias of the input and swaps that: the job's
    tensor is gone, the alias autograd holds for the layer's backward is the layer's own."""
    alone_name, safe_name, _, _, _, own_kind = AC_LAYOUTS[layout]
    base, alone, safe = runs["torch-ac-noswap"], runs[alone_name], runs[safe_name]
    for r in (base, alone, safe):
        assert r.rc == 0 and r.result is not None, r.why()
    assert safe.result["losses"] == base.result["losses"] == alone.result["losses"]
    assert safe.result["grads"] == base.result["grads"], "gradients differ from no swap"
    assert alone.result["released"] == 14, alone.why()  # 7 swapped layers' inputs, 2 steps
    assert safe.result["released"] == alone.result["released"], safe.why()
    for got, own in zip(safe.result["held"], alone.result["held"]):
        assert got <= own * 1.01, "saved bytes on device at the end of forward: %s, the stand-in alone %s" % (
            safe.result["held"], alone.result["held"])
    assert "released args[0] (input) in swap_group_0..swap_group_6: 14 saves, 56.0 KiB; no other holder but " \
        "the layer's own (%s)" % own_kind in safe.stderr, safe.why()
    g = safe.report()[0]["guard"]
    assert [(k["arg"], k["reason"], k["saves"], k.get("own_holders")) for k in g["released_unheld"]] == [
        ("args[0]", "input", 14, [own_kind])], g
    assert g["kept"] == [] and g["releases_kept"] == 0, g
    # The chain's last layer saves into a group of its own that hyper-parallel never offloads: no release
    # goes unasked there, and it is not called unguarded. Nothing the guard keeps of hyper-parallel's swap
    # outlives a step (it drops each SwapTensor at its unpack): the memory after every step is the stand-in's
    # own.
    assert "not guarded" not in safe.stderr, safe.why()
    assert g["groups"] == ["swap_group_%d" % i for i in range(7)], g["groups"]
    assert safe.result["left"] == alone.result["left"] == [[0, 0], [0, 0]], (safe.result["left"], alone.result["left"])


@pytest.mark.parametrize("layout", sorted(AC_LAYOUTS))
def test_recompute_swap_keeps_inputs_the_job_holds(runs, layout):
    """The same job keeping every layer's input (as output_hidden_states=True does) and reading them after
    the last layer: the stand-in alone releases them and the read crashes; under safe each release is
    refused, the holder counted, and the results stay bit-identical to the same swap releasing nothing
    (off). The losses match no swap; its gradients differ from no swap's in their last bits, as the stand-in's
    full backward hooks sum the gradients of a tensor with two consumers (a layer, the job's list) in
    another order."""
    _, _, alone_name, off_name, safe_name, _ = AC_LAYOUTS[layout]
    base, alone, off, r = runs["torch-ac-keep-noswap"], runs[alone_name], runs[off_name], runs[safe_name]
    for x in (base, off):
        assert x.rc == 0 and x.result is not None, x.why()
    assert alone.rc != 0 and alone.result is None, "the stand-in alone must release what the job reads:\n" + alone.why()
    assert r.rc == 0 and r.result is not None, r.why()
    assert r.result["losses"] == base.result["losses"] == off.result["losses"]
    assert r.result["grads"] == off.result["grads"], "gradients differ from the same swap releasing nothing"
    assert r.result["released"] == 0, r.why()
    # layer 0's input is the embedding's output, held by the job's list; every later one is a layer's output as
    # its full backward hook hands it on (a view), held by the list, and the tensor it views, held by that view
    assert "kept args[0] (input) in swap_group_0..swap_group_6: 14 saves, 56.0 KiB; held by 2 reference(s) " \
        "outside its saved tensors" in r.stderr, r.why()
    assert "1 references outside its saved tensors still hold it" in r.stderr, r.why()
    g = r.report()[0]["guard"]
    assert g["released_unheld"] == [] and [(k["arg"], k["held_by"]) for k in g["kept"]] == [("args[0]", 2)], g


def test_nested_wrappers_one_group_per_hyper_parallel_group(runs):
    """swap_wrapper on each layer's attention inside layers that set_forward_prefetch_layer chains:
    hyper-parallel's groups are the layers (swap_group_0..4), the attention's saves go into them. The guard
    reports one group per hyper-parallel group (no group of the inner wrapper's own, so no region entered
    twice: no EORDER), keeps RoPE, lets the rest go, and the job is bit-identical."""
    base, r = runs["torch-nested-noswap"], runs["torch-nested-safe"]
    assert r.rc == 0 and r.result, r.why()
    assert r.result["losses"] == base.result["losses"] and r.result["grads"] == base.result["grads"]
    assert "EORDER" not in r.stderr, r.why()
    assert r.result["released"] > 0, r.result  # the stand-in still swapped the attention's activations
    g = r.report()[0]["guard"]
    assert g["groups"] == ["swap_group_%d" % i for i in range(5)], g["groups"]
    kept = {(k["arg"], k["reason"]) for k in g["kept"]}
    assert ("rotary_cos_sin[0]", "input") in kept and ("rotary_cos_sin[1]", "input") in kept, g
    assert g["releases_allowed"] > 0, g


def test_shared_inputs_ignore_an_address_a_released_input_left():
    """What the guard hands protect_alias_tensors: an input another layer also received (RoPE), not one
    that only sits where a previous step's input of another layer was. hyper-parallel releases an input
    with resize_(0), the allocator gives its address to the next step's input before that other layer's
    next forward forgets it: the guard must not take the new tensor for a shared one (it then kept the
    hidden state of swap_group_0 now and then, under load)."""
    from swapagent import guard  # pylint: disable=import-outside-toplevel

    class T:  # a tensor: its storage pointer, 0 once released
        def __init__(self, ptr):
            self.ptr = ptr

    class FW:
        counts_holders = True

        @staticmethod
        def is_tensor(x):
            return isinstance(x, T)

        @staticmethod
        def ptr(t):
            return t.ptr

    g = guard.Guard()
    first, later = guard.GuardLayer(g, FW, None, 0), guard.GuardLayer(g, FW, None, 5)
    rope, old = T(0x2000), T(0x1000)
    later.inputs = ((old,), {"rotary_cos_sin": (rope,)})
    assert later.shared_inputs() == []  # the first to receive them
    old.ptr = 0  # released by the swap after the next layer; its address goes to the next step's input
    new = T(0x1000)
    first.inputs = ((new,), {"rotary_cos_sin": (rope,)})
    assert first.shared_inputs() == [rope]


def test_plan_applied_as_mindformers_yaml(tmp_path):
    """`swapagent plan` on the stand-in (torch, 8 layers, RoPE as the keyword input): recorded under --policy
    off with docs/plan.md's MindFormers recipe (every layer but the last in the YAML's layer_swap, prefetch 1:
    what MindFormers accepts), planned with --num-layers 8 for two budgets, each plan's YAML applied through
    MindFormers' wiring (hp_job.py --swap-yaml) under safe. Each run is bit-identical to no swap, its saved
    bytes at the end of the forward (a census of every saved storage) fit the budget and are within 5% of
    the predicted peak, and neither the plan nor the run releases RoPE's tables."""
    need(CLI)
    steps = ("--layers", "8", "--steps", "3")
    every = tmp_path / "every.yaml"
    every.write_text("swap:\n  enable: True\n  default_prefetch: 1\n  layer_swap:\n    - layers: ['0-6']\n")
    prof = start(tmp_path, "profile", "torch", "swap", policy="off", extra=steps + ("--swap-yaml", str(every)))
    base = start(tmp_path, "base", "torch", "noswap", extra=steps)
    assert prof.rc == 0 and base.rc == 0 and prof.result["released"] == 0, prof.why()
    assert prof.result["losses"] == base.result["losses"]

    def plan(budget):
        p = subprocess.run([CLI, "plan", os.path.join(prof.out, "trace"), "--budget", str(budget), "--format", "json",
                            "--num-layers", "8"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)
    whole = plan(1 << 40)
    no_swap, lowest = whole["no_swap_peak_bytes"], whole["lowest_reachable_peak_bytes"]
    # the layer the recipe cannot declare is predicted (the declared layers' mean), erring high
    assert whole["footprint"] == "saved" and whole["layers"][-1]["undeclared"], whole
    assert 1 <= no_swap / max(prof.result["saved"]) <= 1.05, (no_swap, prof.result["saved"])
    assert lowest < no_swap * 0.6, whole
    for budget in (lowest + (no_swap - lowest) * 2 // 3, lowest + (no_swap - lowest) // 4):
        got = plan(budget)
        assert got["feasible"] and got["predicted_peak_bytes"] <= budget and got["swap_layers"], got
        for c in [got] + got["candidates"]:
            assert not [a for a in c["released_bytes_by_argument"] if a.startswith("rotary_cos_sin")], c
        yaml = tmp_path / ("plan-%d.yaml" % budget)
        yaml.write_text(got["mindformers_yaml"])
        r = start(tmp_path, "plan-%d" % budget, "torch", "swap", policy="safe", extra=steps + ("--swap-yaml", str(yaml)))
        assert r.rc == 0 and r.result, r.why()
        assert r.result["losses"] == base.result["losses"] and r.result["grads"] == base.result["grads"]
        measured = max(r.result["saved"])
        assert measured <= budget, (budget, r.result["saved"], got)
        assert abs(measured - got["predicted_peak_bytes"]) <= 0.05 * got["predicted_peak_bytes"], (r.result, got)
        assert r.result["released"] > 0, r.why()
        g = r.report()[0]["guard"]
        assert g["groups"] == ["swap_group_%d" % i for i in range(len(got["swap_layers"]))], g
        assert not [k for k in g["released_unheld"] if k["arg"].startswith("rotary_cos_sin")], g
        assert any(k["arg"].startswith("rotary_cos_sin") for k in g["kept"]), g
