"""mf_job.py: MindFormers 2.1.0's PyNative DeepSeek-V3 (examples/mindformers_cpu.py's tiny one: 12 layers)
trained with the YAML `swap:` section's path: MindFormers' own apply_ac -> apply_swap with layers 0-10 and
prefetch 1, which wraps each layer with hyper-parallel's swap_wrapper and wires SwapManager's prefetch
(the hyper-parallel stand-in under standin/ answers those imports). It knows nothing of swapagent.

    python mf_job.py --mode noswap|swap [--no-workaround] [--steps N] --out DIR

MindFormers 2.1.0 hides issue 294 with its own workaround: a swap policy that returns MUST_SAVE for
tensors on the decoder block's construct inputs. --no-workaround turns it off (every saved tensor
MUST_SWAP), as the report's older MindFormers had it. It appends "step layer cos_bytes" to DIR/probe.txt at
every decoder layer's entry (flushed) and writes DIR/result.json: the losses and every gradient's bytes."""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))
import mindformers_cpu as mfc  # noqa: E402

SWAP_LAYERS = ["0-10"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["noswap", "swap"], required=True)
    ap.add_argument("--no-workaround", action="store_true")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    sys.modules["torch"] = None  # tensorboardX would import it, for nothing here
    import mindspore as ms
    model = mfc.tiny_deepseek_v3()
    decoder = model.model.decoder
    probe = open(os.path.join(a.out, "probe.txt"), "a")
    step = [0]

    def watch(i):
        def pre(_cell, _args, kwargs):
            cos = kwargs["rotary_cos_sin"][0]
            probe.write("%d %d %d\n" % (step[0], i, cos.untyped_storage().nbytes()))
            probe.flush()
        return pre
    for i, layer in enumerate(mfc.decoder_layers(model)):
        layer.register_forward_pre_hook(watch(i), with_kwargs=True)
    if a.mode == "swap":
        from mindformers.pynative.config.config import RecomputeCommConfig, RecomputeConfig, SwapConfig
        from mindformers.pynative.distributed import activation_checkpoint as ac
        if a.no_workaround:
            policy = ac.CheckpointPolicy.MUST_SWAP
            ac._SwapPolicy.__call__ = lambda self, tensor: policy  # pylint: disable=protected-access
        swap = SwapConfig(enable=True, default_prefetch=1, layer_swap=[{"layers": list(SWAP_LAYERS)}])
        ac.apply_ac(decoder, RecomputeConfig(), RecomputeCommConfig(), swap, 1)
    ids, labels = mfc.batch()
    params = model.trainable_params()
    grad_fn = ms.value_and_grad(lambda: mfc.loss(model, ids, labels), None, params)
    losses, grads = [], None
    for i in range(a.steps):
        step[0] = i
        loss, gs = grad_fn()
        losses.append(repr(float(loss.asnumpy())))
        grads = [g.asnumpy().tobytes().hex() for g in gs]
        print("step %d/%d: loss %s" % (i + 1, a.steps, losses[-1]), flush=True)
    with open(os.path.join(a.out, "result.json"), "w") as f:
        json.dump({"losses": losses, "grads": grads}, f)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
