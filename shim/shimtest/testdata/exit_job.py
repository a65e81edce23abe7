"""exit_job.py MODE ACL_LIB: a process that makes runtime calls through the emulated runtime, then ends in
the way MODE names, for the test that every way of ending is clean under the agent (exit_test.go)."""
import atexit
import ctypes
import os
import sys
import threading
import time

mode, acl_path = sys.argv[1], sys.argv[2]
acl = ctypes.CDLL(acl_path)
acl.aclInit(None)
acl.aclrtSetDevice(0)
ptr = ctypes.c_void_p()


def churn(n):
    for _ in range(n):
        acl.aclrtMalloc(ctypes.byref(ptr), 4096, 0)
        acl.aclrtFree(ptr)


churn(2000)
if mode == "return":
    pass
elif mode == "exit-from-thread":
    # C exit() on a thread that is not main: the agent's exit hook runs there, while main still runs.
    threading.Thread(target=lambda: ctypes.CDLL(None).exit(5)).start()
    while True:
        churn(100)
elif mode == "os-exit":
    # No exit hook runs: the trace holds what the drainer flushed before (it drains every 2 ms and flushes
    # at least every 50 ms). A loaded machine may not have run it yet when churn ends: give it time.
    time.sleep(0.3)
    os._exit(4)
elif mode == "atexit-raises":
    def fail():
        raise RuntimeError("the framework's own atexit handler failed")
    atexit.register(fail)
elif mode == "fork":
    pid = os.fork()
    if pid == 0:
        churn(100)
        sys.exit(3)  # the child's own exit: Python finalization and exit handlers in a forked child
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status), flush=True)
elif mode in ("sigterm", "sigint"):
    # Kept busy so the agent's drainer is too, when the signal comes.
    print("ready", os.getpid(), flush=True)
    while True:
        churn(1000)
elif mode == "companion":
    # Python finalization with the torch companion still installed: no remove(), no aclFinalize.
    import torch
    import swapagent.torch as sat
    layers = [torch.nn.Linear(64, 64) for _ in range(3)]
    handle = sat.layer_swap(layers)
    x = torch.randn(32, 64, requires_grad=True)
    for layer in layers:
        x = torch.relu(layer(x))
    x.sum().backward()
    print("companion installed", flush=True)
elif mode == "companion-mindspore":
    # The same with the MindSpore companion (the exit abort once seen was a MindSpore run's).
    import mindspore as ms
    import numpy as np
    import swapagent.mindspore as sam
    ms.set_context(mode=ms.PYNATIVE_MODE)
    layers = [ms.nn.Dense(64, 64) for _ in range(3)]
    handle = sam.layer_swap(layers, include_cpu=True)
    x = ms.Tensor(np.ones((32, 64), np.float32))
    params = [p for layer in layers for p in layer.trainable_params()]

    def loss():
        y = x
        for layer in layers:
            y = ms.ops.relu(layer(y))
        return y.sum()
    ms.value_and_grad(loss, None, params)()
    print("companion installed", flush=True)
else:
    sys.exit("exit_job.py: unknown mode %r" % mode)
