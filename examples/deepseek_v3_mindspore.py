#!/usr/bin/env python3
"""DeepSeek-V3 under the MindSpore companion: MindFormers 2.1.0's PyNative DeepSeek-V3 (tiny: 12 layers,
1 dense + 11 MoE with 4 routed experts top-2 and 1 shared, hidden 64, MLA, float32) trains on MindSpore's
CPU backend with decoder layers 0-10 swapped, then prints the agent's swap stats and the bytes that swap
took off the device.

    .venv/bin/python examples/deepseek_v3_mindspore.py   # not preloaded: the companion loads the agent itself
    SWAPAGENT_MIN_BYTES=1024 build/bin/swapagent run --policy safe --out /tmp/dsv3-out -- \\
        .venv/bin/python examples/deepseek_v3_mindspore.py   # preloaded, with a trace and swapagent's summary

This is the model of hyper-parallel issue 294: MindFormers' GPTModel computes the RoPE cos/sin once per
step (compute_rotary_cos_sin) and its TransformerBlock passes them to every decoder layer as the keyword
rotary_cos_sin=(cos, sin); every layer saves both for backward. The agent keeps those storages on the
device (keep reason `input`) and moves the layers' internal activations to host memory between forward and
backward. With `--policy outputs-only` (the behaviour before the fix) it releases them too, and the next
layer's region_enter reports the fault before the process dies on the emptied storage.

MindFormers 2.1.0 targets Ascend: examples/mindformers_cpu.py stands in for the operators MindSpore's CPU
backend lacks and for the hyper_parallel package (see there). The tiny model's activations are nearly all
below the agent's default swap threshold (SWAPAGENT_MIN_BYTES, 64 KiB), and the agent reads its
environment when it starts: not preloaded, the script runs itself again with SWAPAGENT_MIN_BYTES=1024
when the variable is unset; preloaded, set it on the command line.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))  # this tree's companions
sys.path.insert(0, HERE)

from swapstats import mb, min_bytes_1024, print_stats  # noqa: E402
import mindformers_cpu as mfc  # noqa: E402

LR = 0.05


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    opt = ap.parse_args()
    min_bytes_1024()
    os.environ.setdefault("GLOG_v", "3")  # MindSpore's own warnings (deprecated interfaces MindFormers uses)

    import mindspore as ms
    import swapagent.mindspore as sa
    model = mfc.tiny_deepseek_v3()
    input_ids, labels = mfc.batch()
    h = sa.layer_swap(mfc.decoder_layers(model), swap=mfc.SWAP, include_cpu=True)  # CPU tensors as device ones
    params = model.trainable_params()
    step_fn = ms.value_and_grad(lambda: mfc.loss(model, input_ids, labels), None, params)
    for step in range(opt.steps):
        t = time.time()
        loss, grads = step_fn()
        for p, g in zip(params, grads):  # plain SGD
            p.set_data(p - LR * g)
        print("step %d: loss %.6f, %.2f s, offloaded so far %s" % (
            step + 1, float(loss.asnumpy()), time.time() - t, mb(sa.stats()["offloaded_bytes"])), flush=True)
    print_stats(sa.stats(), opt.steps)
    h.remove()


if __name__ == "__main__":
    main()
