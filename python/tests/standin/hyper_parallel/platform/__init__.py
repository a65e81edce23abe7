"""hyper_parallel.platform (stand-in): get_platform() picks the framework part, as hyper-parallel's does:
MindSpore when it is imported (or HYPER_PARALLEL_PLATFORM=mindspore), else torch."""

import importlib
import os
import sys

from hyper_parallel import placeholders


def get_platform():
    name = os.environ.get("HYPER_PARALLEL_PLATFORM") or ("mindspore" if "mindspore" in sys.modules else "torch")
    return importlib.import_module("hyper_parallel.platform.%s.activation_checkpoint.activation_swap" % name)


__getattr__ = placeholders(__name__, globals())
