"""swapagent: framework companions of the swapagent runtime agent (package root).

`import swapagent.torch` or `import swapagent.mindspore` for the framework parts; this package itself
imports neither framework. stats() returns the agent's stats JSON as a dict."""

from .core import ABI_VERSION, AgentError, group_name, load, stats  # noqa: F401

__all__ = ["ABI_VERSION", "AgentError", "group_name", "load", "stats"]
__version__ = "0.1.0"
