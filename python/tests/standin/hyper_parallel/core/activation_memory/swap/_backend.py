"""The newest layout's backend: the same SwapTensor and SwapManager."""

from hyper_parallel.core.activation_checkpoint.swap import SwapManager, SwapTensor  # noqa: F401
