"""hyper_parallel.core.activation_memory.policy (stand-in): what a checkpoint or swap policy_fn says, the same
enum as the older layout's."""

from hyper_parallel.core.activation_checkpoint import CheckpointPolicy  # noqa: F401
