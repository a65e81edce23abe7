"""test_plan_mindformers.py: what `swapagent plan` hands a MindFormers user passes MindFormers 2.1.0's own
validation, run from the installed wheel (mf_validate.py): the YAML of a sweep of budgets, the tightest
reachable included, on three decoder-sim configurations and on a profile recorded as docs/plan.md's
MindFormers recipe records one (its last layer undeclared, given with --num-layers); the recipe itself, as
docs/plan.md writes it; and no YAML at all for a budget nothing MindFormers can express meets. The
hyper-parallel calls plan prints run as printed against the hyper-parallel stand-in (standin/)."""

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from test_companions import CLI, HERE, REPO, need

SIM = os.path.join(REPO, "build", "bin", "decoder-sim")
VALIDATE = os.path.join(HERE, "mf_validate.py")
STANDIN = os.path.join(HERE, "standin")
TIMEOUT = 300

# decoder-sim configurations (their layer counts first), and the layers each profile declares: all, or all
# but the last, as MindFormers' recipe must (every listed layer i needs layer i + default_prefetch).
CONFIGS = {
    "10x2048": (10, ["--seq", "2048"], "all"),
    "12-2streams-synclayer": (12, ["--streams", "2", "--sync", "layer"], "all"),
    "8-vmm": (8, ["--seq", "1024", "--alloc", "vmm"], "all"),
    "10-recipe": (10, ["--seq", "2048"], "0-8"),
}


def swapagent(*args, check=None):
    r = subprocess.run([CLI] + list(args), capture_output=True, text=True, timeout=TIMEOUT)
    if check is not None:
        assert r.returncode == check, (args, r.returncode, r.stdout, r.stderr)
    return r


def validate(items, scratch):
    """MindFormers' validation of each {"yaml", "num_layers"}: "ok" or its error."""
    res = os.path.join(scratch, "validated.json")
    r = subprocess.run([sys.executable, VALIDATE, res], input=json.dumps(items), capture_output=True, text=True,
                       timeout=TIMEOUT, cwd=scratch)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(res) as f:
        out = json.load(f)
    # the wheel's own files, not copies in this repository
    for m in (out["module"], out["graph_module"]):
        assert "site-packages" in m and not m.startswith(REPO + os.sep + "python"), out
    return out["results"]


def layer_ids(specs):
    ids = []
    for s in specs:
        lo, _, hi = str(s).partition("-")
        ids.extend(range(int(lo), int(hi or lo) + 1))
    return ids


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    need(CLI)
    need(SIM)
    out = {}
    for name, (layers, flags, declared) in CONFIGS.items():
        d = str(tmp_path_factory.mktemp(name))
        swapagent("run", "--policy", "off", "--out", d, "--", SIM, "--layers", str(layers), "--steps", "3",
                  "--swap-layers", declared, *flags, check=0)
        out[name] = (d, layers, [] if declared == "all" else ["--num-layers", str(layers)])
    return out


def plan_json(prof, budget, more):
    r = swapagent("plan", prof, "--budget", str(budget), "--format", "json", *more)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout), r.returncode


def test_plans_pass_mindformers_validation(profiles, tmp_path):
    items, why = [], []
    for name, (prof, layers, more) in profiles.items():
        whole, _ = plan_json(prof, 1 << 40, more)
        assert whole["num_layers"] == layers, whole["num_layers"]
        if more:  # the layer the recipe cannot declare is predicted for: the declared layers' median times
            last = whole["layers"][-1]
            assert last["undeclared"] and last["index"] == layers - 1 and last["forward_ns"] > 0, last
        none, code = plan_json(prof, 1, more)
        tightest = none["mindformers"]["predicted_peak_bytes"]
        no_swap = whole["no_swap_peak_bytes"]
        assert code == 1 and not none["mindformers"]["feasible"] and tightest < no_swap, none["mindformers"]
        budgets = [tightest + (no_swap - tightest) * k // 5 for k in range(5)] + [no_swap]
        for budget in budgets:
            p, code = plan_json(prof, budget, more)
            mf = p["mindformers"]
            assert code == 0 and mf["feasible"] and mf["predicted_peak_bytes"] <= budget, (name, budget, mf)
            r = swapagent("plan", prof, "--budget", str(budget), "--format", "yaml", *more, check=0)
            assert r.stdout == p["mindformers_yaml"]
            assert r.stdout.startswith("# MindFormers 2.1.0 PyNative") and "num_layers %d" % layers in r.stdout
            sc = yaml.safe_load(r.stdout)["swap"]
            # written as the candidate it is: its layers and its prefetch, none rewritten
            if mf["swap_layers"]:
                assert sc["enable"] is True and sc["default_prefetch"] == mf["prefetch"] >= 1, (sc, mf)
                assert layer_ids(sc["layer_swap"][0]["layers"]) == mf["swap_layers"], (sc, mf)
            else:
                assert sc["enable"] is False and budget >= no_swap, (sc, budget)
            items.append({"yaml": r.stdout, "num_layers": layers})
            why.append((name, budget, mf["swap_layers"], mf["prefetch"]))
        # Full recompute over a slow link (any set of layers, MindFormers' full_recompute_layer lists them)
        mid = budgets[2]
        r = swapagent("plan", prof, "--budget", str(mid), "--format", "yaml", "--recompute", "--link", "0.01", *more,
                      check=0)
        rc = yaml.safe_load(r.stdout)
        assert rc["recompute"]["mode"] == "full" and rc["swap"]["enable"] is False, r.stdout
        items.append({"yaml": r.stdout, "num_layers": layers})
        why.append((name, mid, "recompute", layer_ids(rc["recompute"]["full_recompute_layer"])))
        # Below the tightest: no YAML in any format (exit 1 for --format yaml; JSON and text exit by the plan
        # in the agent's terms, which may still fit: a swap without prefetch, which MindFormers cannot state).
        r = swapagent("plan", prof, "--budget", str(tightest - 1), "--format", "yaml", *more)
        assert r.returncode == 1 and r.stdout == "" and "no YAML written" in r.stderr, (r.stdout, r.stderr)
        low, code = plan_json(prof, tightest - 1, more)
        assert low["mindformers_yaml"] == "" and not low["mindformers"]["feasible"], low["mindformers"]
        assert code == (0 if low["feasible"] else 1), (code, low["feasible"])
        if not low["feasible"]:  # no form at all
            assert low["hyper_parallel"] == low["companions"] == "" and low["decoder_sim_args"] is None, low
        ls = low["swap_layers"]  # a plan MindFormers cannot state: no prefetch, past the model, or with gaps
        assert not low["feasible"] or low["prefetch"] == 0 or ls[-1] + low["prefetch"] >= layers or \
            ls[-1] - ls[0] != len(ls) - 1, low
        r = swapagent("plan", prof, "--budget", str(tightest - 1), *more)
        assert r.returncode == code and "enable: True" not in r.stdout, r.stdout
        said = "no configuration fits" if code else "MindFormers 2.1.0 PyNative (YAML): no configuration it can express fits"
        assert said in r.stdout, r.stdout
    results = validate(items, str(tmp_path))
    bad = [(w, res) for w, res in zip(why, results) if res != "ok"]
    assert not bad, bad
    print("plan: %d YAML plans over %d configurations passed MindFormers 2.1.0's validation" % (
        len(items), len(profiles)))


def test_graph_plans_pass_mindformers_validation(profiles, tmp_path):
    """--mode graph: MindFormers' graph-mode swap_config for a sweep of budgets, the tightest it reaches
    included, passes the wheel's graph-mode checks; it lists exactly the plan's layers (any set: graph mode
    offloads each listed layer), each once, with backward_prefetch the operators ahead (at least 1); a
    budget below what it reaches writes none."""
    items, why = [], []
    for name, (prof, layers, more) in profiles.items():
        more = more + ["--mode", "graph"]
        whole, _ = plan_json(prof, 1 << 40, more)
        assert whole["mindformers_mode"] == "graph"
        kernels = [l["backward_kernels"] for l in whole["layers"]]
        assert all(k > 0 for k in kernels), kernels
        none, code = plan_json(prof, 1, more)
        tightest = none["mindformers"]["predicted_peak_bytes"]
        no_swap = whole["no_swap_peak_bytes"]
        assert code == 1 and not none["mindformers"]["feasible"] and tightest < no_swap, none["mindformers"]
        for budget in [tightest + (no_swap - tightest) * k // 4 for k in range(4)] + [no_swap]:
            p, code = plan_json(prof, budget, more)
            mf = p["mindformers"]
            assert mf["feasible"] and mf["predicted_peak_bytes"] <= budget, (name, budget, mf)
            r = swapagent("plan", prof, "--budget", str(budget), "--format", "yaml", *more, check=0)
            assert r.stdout == p["mindformers_yaml"]
            assert r.stdout.startswith("# MindFormers 2.1.0 graph mode") and "num_layers %d" % layers in r.stdout
            sc = yaml.safe_load(r.stdout)["swap_config"]
            if mf["swap_layers"]:
                listed = [i for e in sc["layer_swap"] for i in e["layers"]]
                assert sc["swap"] is True and sorted(listed) == mf["swap_layers"] and mf["prefetch"] >= 1, (sc, mf)
                assert all(e["backward_prefetch"] >= 1 for e in sc["layer_swap"]), sc
                if mf["swap_layers"] == p["swap_layers"] and mf["prefetch"] == p["prefetch"]:
                    assert p["feasible"]  # the plan itself, when graph mode can state it
            else:
                assert sc["swap"] is False and budget >= no_swap, (sc, budget)
            items.append({"yaml": r.stdout, "num_layers": layers, "mode": "graph"})
            why.append((name, budget, mf["swap_layers"], mf["prefetch"]))
        r = swapagent("plan", prof, "--budget", str(tightest - 1), "--format", "yaml", *more)
        assert r.returncode == 1 and r.stdout == "" and "no YAML written" in r.stderr, (r.stdout, r.stderr)
    # the control: graph mode's own check refuses a prefetch of 0
    bad = "swap_config:\n  swap: True\n  default_prefetch: 1\n  layer_swap:\n    - backward_prefetch: 0\n      layers: [1]\n"
    results = validate(items + [{"yaml": bad, "num_layers": 4, "mode": "graph"}], str(tmp_path))
    assert "must be positive" in results[-1], results[-1]
    bad = [(w, res) for w, res in zip(why, results) if res != "ok"]
    assert not bad, bad
    print("plan: %d graph-mode YAML plans over %d configurations passed MindFormers 2.1.0's checks" % (
        len(items), len(profiles)))


def recipe():
    """The profiling recipe's YAML block in docs/plan.md, and the num_layers it says it is for."""
    with open(os.path.join(REPO, "docs", "plan.md")) as f:
        doc = f.read()
    m = re.search(r"```yaml\n(# profiling recipe[^\n]*num_layers (\d+)[^\n]*\n.*?)```", doc, re.S)
    assert m, "docs/plan.md has no ```yaml block starting '# profiling recipe ... num_layers N'"
    return m.group(1), int(m.group(2))


def test_recipe_and_controls(tmp_path):
    """The recipe passes; MindFormers' validation is no formality: the prefetch-0 recipe, and a last layer
    listed with prefetch 1, are refused."""
    text, n = recipe()
    sc = yaml.safe_load(text)["swap"]
    assert layer_ids(sc["layer_swap"][0]["layers"]) == list(range(n - sc["default_prefetch"])), sc
    old = "swap:\n  enable: True\n  default_prefetch: 0\n  layer_swap:\n    - layers: ['0-%d']\n" % (n - 1)
    last = "swap:\n  enable: True\n  default_prefetch: 1\n  layer_swap:\n    - layers: ['0-%d']\n" % (n - 1)
    ok, zero, over = validate([{"yaml": text, "num_layers": n}, {"yaml": old, "num_layers": n},
                               {"yaml": last, "num_layers": n}], str(tmp_path))
    assert ok == "ok", ok
    assert "out of range [1, %d]" % (n - 1) in zero, zero
    assert "exceeds num_layers (%d)" % n in over, over


def test_hyper_parallel_calls_run(profiles):
    """The calls as printed, run on a model of the job's layer count with the stand-in's torch
    hyper-parallel: every planned layer wrapped, every chained layer a layer of the model."""
    prof, layers, more = profiles["10x2048"]
    whole, _ = plan_json(prof, 1 << 40, more)
    tight, _ = plan_json(prof, 1, more)
    budget = tight["mindformers"]["predicted_peak_bytes"]
    p, code = plan_json(prof, budget, more)
    hp = p["hyper_parallel_plan"]
    assert code == 0 and hp["feasible"] and hp["swap_layers"] and "def policy_fn" in p["hyper_parallel"], p
    prog = ("import torch\nfrom types import SimpleNamespace\n"
            "model = SimpleNamespace(layers=torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(%d)))\n"
            "%s\n"
            "import json\nprint(json.dumps([i for i, l in enumerate(model.layers) if type(l).__name__ != 'Linear']))\n"
            ) % (layers, p["hyper_parallel"])
    env = dict(os.environ, PYTHONPATH=STANDIN, HYPER_PARALLEL_STANDIN_DEVICE="1")
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert r.returncode == 0, (p["hyper_parallel"], r.stderr[-3000:])
    assert json.loads(r.stdout.strip().splitlines()[-1]) == hp["swap_layers"], (r.stdout, hp)
    assert whole["num_layers"] == layers
