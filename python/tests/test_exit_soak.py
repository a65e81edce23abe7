"""The exit soak: the fan-out companion child (test_companions.py's) under the preloaded agent, run again
and again beside a CPU hog, two at a time. Every run must exit 0 with its result written and no Go fatal
error or goroutine dump on stderr: a job that finished its steps and then died at exit is a failed job.
This child once printed every step and then died with SIGABRT and a goroutine dump, 2 times in about 38
pytest runs: Go ran the exit hook on a main thread whose alternate signal stack faulthandler had freed
(PYTHONFAULTHANDLER=1, which tc.run sets; docs/design.md, "Failure containment"). sa-altstack reproduces it.

SWAPAGENT_SOAK_RUNS sets the runs per framework: 8 in `make test` (16 in all), 250 in `make soak`."""

import concurrent.futures
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_companions as tc  # noqa: E402

RUNS = int(os.environ.get("SWAPAGENT_SOAK_RUNS", "8"))
GO_CRASH = ("fatal error:", "goroutine ", "SIGABRT", "panic:")


@pytest.fixture
def cpu_hog():
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield
    hog.kill()
    hog.wait()


@pytest.mark.parametrize("fw", tc.FRAMEWORKS)
def test_exit_soak(fw, cpu_hog, tmp_path):
    def one(i):
        out = str(tmp_path / ("run%d" % i))
        os.makedirs(out)
        p, res = tc.run(fw, "swap", "safe", out, model=tc.FAN)
        return i, p, res

    failed = []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for i, p, res in pool.map(one, range(RUNS)):
            crash = [m for m in GO_CRASH if m in p.stderr]
            if p.returncode != 0 or res is None or crash:
                failed.append("run %d: rc %d, result %s, %s\n%s" % (
                    i, p.returncode, "written" if res else "missing", crash or "no Go dump",
                    tc.head_tail(p.stderr, 2000)))
    assert not failed, "%d of %d runs did not end cleanly:\n%s" % (len(failed), RUNS, "\n".join(failed))


ACL = os.path.join(tc.REPO, "build", "ascend", "latest", "lib64", "libascendcl.so")


def test_exit_after_faulthandler_freed_the_signal_stack(tmp_path):
    """The exit abort's own path, widened: Go code on the main thread after faulthandler freed the stack Go
    adopted, under a rain of SIGURG. Before the agent lent such a thread a stack for its calls
    (shim/c/signals.c), 8 of 10 runs here aborted with "fatal error: non-Go code disabled sigaltstack" and a
    goroutine dump; after it none."""
    tc.need(tc.LIB)
    tc.need(ACL)
    env = dict(os.environ, LD_PRELOAD=tc.LIB, SWAPAGENT_OUT=str(tmp_path), PYTHONFAULTHANDLER="1")
    failed = []
    for i in range(10):
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "altstack_child.py"), ACL, "20000"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while p.poll() is None and time.monotonic() < deadline:
            try:
                os.kill(p.pid, signal.SIGURG)
            except ProcessLookupError:
                break
        out, err = p.communicate(timeout=60)
        crash = [m for m in GO_CRASH if m in err]
        if p.returncode != 0 or crash or "exiting" not in out:
            failed.append("run %d: rc %d, %s\n%s" % (i, p.returncode, crash or "no Go dump", tc.head_tail(err, 1500)))
    assert not failed, "%d of 10 runs did not end cleanly:\n%s" % (len(failed), "\n".join(failed))
