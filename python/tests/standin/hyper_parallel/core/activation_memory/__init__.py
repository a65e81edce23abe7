"""hyper_parallel.core.activation_memory (stand-in): the newest layout (api, wrapper, swap, checkpoint)."""
