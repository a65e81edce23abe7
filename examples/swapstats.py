"""swapstats.py: what both examples share: the agent's swap threshold for their tiny models, and the stats
printout."""

import os
import sys


def min_bytes_1024():
    """The tiny models' activations (a few KB each) are (nearly all) below the agent's default threshold
    (SWAPAGENT_MIN_BYTES, 64 KiB), and the agent takes its settings from the environment the process
    started with (also when the companion loads it later). Unset: run the script again with 1024, unless
    the agent is preloaded (its process has started: say so)."""
    if "SWAPAGENT_MIN_BYTES" in os.environ:
        return
    if "libswapagent" in os.environ.get("LD_PRELOAD", ""):
        print("note: SWAPAGENT_MIN_BYTES is unset: this tiny model's activations are (nearly all) below "
              "the agent's default 64 KiB and will stay; set SWAPAGENT_MIN_BYTES=1024", file=sys.stderr)
        return
    os.environ["SWAPAGENT_MIN_BYTES"] = "1024"
    os.execv(sys.executable, [sys.executable] + sys.argv)


def mb(n):
    return "%.2f MB" % (n / 1e6)


def print_stats(st, steps):
    """The agent's stats (swapagent.<framework>.stats()) after steps training steps."""
    print("swap stats (policy %s, prefetch %d):" % (st["policy"], st["prefetch"]))
    print("  saved tensors reported: %d, internal (swap candidates): %d" % (st["saves"], st["internal"]))
    print("  offloaded: %d storages, %s; restored: %d storages, %s" % (
        st["offloaded_storages"], mb(st["offloaded_bytes"]), st["restored_storages"], mb(st["restored_bytes"])))
    print("  kept on device, by reason: %s" % ", ".join("%s %d" % kv for kv in sorted(st["kept"].items()) if kv[1]))
    print("  released_external: %d, faults: %d" % (st["released_external"], len(st["faults"])))
    print("bytes saved: %s of activations left the device per step (%d steps), at most %s at once" % (
        mb(st["offloaded_bytes"] / max(steps, 1)), steps, mb(st["saved_bytes_peak"])))
