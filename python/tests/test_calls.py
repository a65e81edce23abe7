"""test_calls.py proves SWAPAGENT_CALL_RELEASABLE end to end (a record from Python through the library's C
copy to the agent's engine and back): for a guarded layer's storages it answers what the guard release that
follows is told, under each policy, and changes nothing (the stats' guard counts stay until the releases)."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
LIB = os.path.join(REPO, "build", "lib", "libswapagent.so")

# Run in a process of its own, with the library loaded (not preloaded) under the policy given: a guarded
# layer with an input, an activation and an output, then each question asked and the release made.
CHILD = r"""
import ctypes, json, sys
from swapagent import binding
from swapagent._abi import CALL_RELEASABLE

agent = binding.load()
agent.set_queued(False)
bufs = [ctypes.create_string_buffer(1 << 16) for _ in range(4)]
inp, act, out, other = [ctypes.addressof(b) for b in bufs]
g = "swap_group_0"
assert agent.guard(g) == 0
assert agent.region_enter(g, [inp], 1) == 0
hs = agent.region_exit(g, [out], [inp, act], [1 << 16, 1 << 16], [0, 0])
assert min(hs) > 0, hs

def releasable(ptr, held):
    counts = (ctypes.c_int64 * 3)(held, 0, 0)
    call = binding.Call(binding._CALL_SIZE, CALL_RELEASABLE, None, counts=ctypes.addressof(counts), n=3, ptr=ptr)
    return agent._run(call, 0)

def guard_counts():
    st = json.loads(agent.stats_json())
    return st["guard_released"], st["guard_kept"]

cases = [("input held", inp, 1), ("input unheld", inp, 0), ("input uncounted", inp, -1), ("activation", act, 0),
         ("unsaved", other, 0)]
asked = {name: releasable(ptr, held) for name, ptr, held in cases}
before = guard_counts()
# Each release after its question: the input kept (or not) first, the activation last.
told = {}
for name, ptr, held in cases:
    told[name] = agent.guard_release(None, ptr, 1 << 16, held)[0]
    if told[name] == 1 and ptr == inp:
        break
json.dump({"asked": asked, "told": told, "before": before, "after": guard_counts(),
           "null": releasable(0, 0)}, sys.stdout)
"""


def ask(policy, tmp_path):
    assert os.path.exists(LIB), "%s is missing: run `make build` first" % LIB
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), SWAPAGENT_LIB=LIB, SWAPAGENT_POLICY=policy,
               SWAPAGENT_MIN_BYTES="1024", SWAPAGENT_OUT=str(tmp_path))
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("policy,want", [
    # safe: an input still held, or whose holders are not counted, stays; one nothing else holds may go, as may
    # the layer's own activation; a storage no live group saved is not the agent's to decide.
    ("safe", {"input held": 0, "input unheld": 1, "input uncounted": 0, "activation": 1, "unsaved": 1}),
    ("off", {"input held": 0, "input unheld": 0, "input uncounted": 0, "activation": 0, "unsaved": 1}),
    ("outputs-only", {"input held": 1, "input unheld": 1, "input uncounted": 1, "activation": 1, "unsaved": 1}),
])
def test_releasable_answers_what_the_release_is_told(policy, want, tmp_path):
    r = ask(policy, tmp_path)
    assert r["asked"] == want
    assert r["before"] == [0, 0], "a question released or kept something"
    for name, answer in r["told"].items():  # the releases that followed, up to the first that went
        assert answer == want[name], (name, r)
    assert r["after"] != r["before"]  # the releases themselves are counted
    assert r["null"] == -1  # address 0: EINVAL
