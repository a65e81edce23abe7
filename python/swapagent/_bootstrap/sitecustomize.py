"""The bootstrap `swapagent run` puts first on PYTHONPATH (ddtrace-run and opentelemetry-instrument do the
same): Python's site module imports it at start-up. It takes its own directory off sys.path, installs the
guard's import hook (swapagent.guard: it acts only when the job imports hyper-parallel's swap, and imports
neither a framework nor hyper-parallel itself), then runs the job's own sitecustomize, if there is one,
exactly as Python would have. SWAPAGENT_PYTHON=off (`swapagent run --python off`) leaves the hook out.
The agent's trace records the outcome (python_guard=...), so the run's summary can name a Python process
the bootstrap never reached (python -I or -S, or a job that replaced PYTHONPATH)."""


def _bootstrap():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    mode = os.environ.get("SWAPAGENT_PYTHON", "").strip().lower()  # the agent's rule (agent.Settings)
    state = "off" if mode == "off" else "attached"
    try:
        if state == "attached":
            from swapagent import guard  # pylint: disable=import-outside-toplevel
            guard.install()
    except Exception as ex:  # noqa: BLE001 - the job must start whatever happens here
        state = "failed: %s: %s" % (type(ex).__name__, ex)
        sys.stderr.write("swapagent: the Python guard could not be installed (%s); the job runs unguarded\n"
                         % state)
    try:
        import ctypes  # pylint: disable=import-outside-toplevel
        if hasattr(ctypes.CDLL(None), "swapagent_call"):  # only a preloaded agent: never load one for this
            from swapagent import core  # pylint: disable=import-outside-toplevel
            core.load().note("python_guard", state)
    except Exception:  # noqa: BLE001 - no agent to record it in
        pass
    # The job's own sitecustomize: this module leaves sys.modules so that the import finds it, and comes
    # back when there is none (the import machinery that runs this module expects its entry there).
    own = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
    except ImportError as ex:
        if ex.name != "sitecustomize":
            raise
        sys.modules["sitecustomize"] = own


_bootstrap()
