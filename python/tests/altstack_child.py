"""altstack_child.py ACL_LIB N: the exit path of the abort test_exit_soak.py watches for, made wide. Run with
PYTHONFAULTHANDLER=1 under the agent: the main thread calls the agent once (so the Go runtime adopts
faulthandler's alternate signal stack for it, as a companion's control calls do), then registers N
aclFinalize calls with C's exit, which runs them after Python's finalization has disabled and freed that
stack: each reaches the agent's aclFinalize hook, Go code on the main thread, as a framework's C++ teardown
would. The test rains SIGURG (Go's preemption signal) on the process meanwhile."""
import ctypes
import sys

acl = ctypes.CDLL(sys.argv[1])
acl.aclInit(None)
acl.aclrtSetDevice(0)
here = ctypes.CDLL(None)
buf = ctypes.create_string_buffer(1 << 16)
if here.swapagent_stats_json(buf, len(buf)) < 0:
    sys.exit("the agent refused the first call")
fin = ctypes.cast(here.aclFinalize, ctypes.c_void_p)
for _ in range(int(sys.argv[2])):
    here.__cxa_atexit(fin, None, None)
print("exiting", flush=True)
