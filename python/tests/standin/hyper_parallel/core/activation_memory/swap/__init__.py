"""hyper_parallel.core.activation_memory.swap (stand-in): the newest layout, torch only, whose pack returns
tensor.detach() instead of an index."""

from ._backend import SwapManager, SwapTensor  # noqa: F401
from .wrapper import SwapWrapper, swap_wrapper  # noqa: F401
