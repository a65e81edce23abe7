"""mf_validate.py runs MindFormers 2.1.0's own validation of PyNative's `swap:` and `recompute:` sections on
YAML texts, from the installed wheel (nothing of MindFormers is copied here): each section is parsed by its
config class (SwapConfig.from_dict, RecomputeConfig.from_dict: MindFormers' type checks), then checked by
mindformers/pynative/distributed/activation_checkpoint.py as apply_ac checks it before it wires anything
(_validate_swap_config when swap is enabled, _validate_recompute_config when a recompute mode is set).
Graph mode's `swap_config:` section (an item with "mode": "graph") goes through the checks a graph-mode run
makes: mindformers/tools/check_rules.py's _check_swap on the YAML as MindFormerConfig loads it, then
TransformerSwapConfig(**swap_config) (modules/transformer/transformer.py), as core/parallel_config.py builds it.

stdin: a JSON list of {"yaml": TEXT, "num_layers": N[, "mode": "graph"]}; the file OUT (the one argument; MindFormers' logger
writes to stdout, and its log files under ./output, so run it in a scratch directory): a JSON object,
"module" (the file the validation came from) and "results", one per text: "ok", or the error MindFormers
raised.

MindFormers imports hyper_parallel, which is not on the package index: examples/mindformers_cpu.py's
import-only stub stands in for it (the validation uses none of it)."""

import json
import os
import sys

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "examples"))


def main():
    import mindformers_cpu  # pylint: disable=import-outside-toplevel
    mindformers_cpu.install_hyper_parallel_stub()
    import yaml  # pylint: disable=import-outside-toplevel
    from mindformers.pynative.config.config import (  # pylint: disable=import-outside-toplevel
        RecomputeCommConfig, RecomputeConfig, SwapConfig)
    from mindformers.pynative.distributed import activation_checkpoint as ac  # pylint: disable=import-outside-toplevel
    from mindformers.modules.transformer.transformer import (  # pylint: disable=import-outside-toplevel
        TransformerSwapConfig)
    from mindformers.tools import check_rules  # pylint: disable=import-outside-toplevel
    from mindformers.tools.register import MindFormerConfig  # pylint: disable=import-outside-toplevel

    results = []
    for item in json.load(sys.stdin):
        try:
            doc = yaml.safe_load(item["yaml"]) or {}
            n = int(item["num_layers"])
            if item.get("mode") == "graph":
                check_rules._check_swap(MindFormerConfig(**doc))  # pylint: disable=protected-access
                TransformerSwapConfig(**doc["swap_config"])
                results.append("ok")
                continue
            if "recompute" in doc:
                rc = RecomputeConfig.from_dict(doc["recompute"])
                if rc.mode != "None":
                    ac._validate_recompute_config(rc, RecomputeCommConfig(), n)  # pylint: disable=protected-access
            sc = SwapConfig.from_dict(doc["swap"])
            if sc.enable:
                ac._validate_swap_config(sc, n)  # pylint: disable=protected-access
            results.append("ok")
        except Exception as e:  # pylint: disable=broad-except
            results.append("%s: %s" % (type(e).__name__, e))
    with open(sys.argv[1], "w") as f:
        json.dump({"module": ac.__file__, "graph_module": check_rules.__file__, "results": results}, f)


if __name__ == "__main__":
    main()
