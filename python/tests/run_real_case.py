"""run_real_case.py: run_case.py's training run (same arguments, same result.json) on a real model instead of
models.py's stack: --framework mindspore runs MindFormers 2.1.0's PyNative DeepSeek-V3 (examples/
mindformers_cpu.py: 12 layers, 1 dense + 11 MoE, hidden 64, MLA, seq 32, batch 2, float32), --framework
torch transformers' LlamaForCausalLM (examples/llama_torch.py: 12 layers, hidden 64, eager attention,
float32). Layers 0-10 are swapped (models.SWAP); --model is ignored.

It reuses run_case.py whole: its main loop, its framework harnesses (training step, SGD, hook counts) and
its Recorder; only the model and the Probe differ. The Probe maps each layer's RoPE arguments (DeepSeek:
the keyword rotary_cos_sin=(cos, sin) and the positional attention mask; Llama: the keyword
position_embeddings=(cos, sin) and the keyword attention_mask) to run_case's roles cos, sin and mask, so
result.json names the RoPE saves as run_case's does, and prints "rope cos=0x.. sin=0x.." at the first
forward (before the agent can fault on them).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")
sys.path.insert(0, HERE)
sys.path.insert(0, EXAMPLES)
import run_case  # noqa: E402


class RealProbe(run_case.Probe):
    """run_case.Probe for the real models: the RoPE pair and the mask wherever the model passes them, the
    layer's hidden output as "h" (no second output: "v" is 0, which no save has)."""

    rope_arg = None  # the keyword carrying (cos, sin)

    def pre(self, i):
        def hook(_m, args, kwargs):
            cos, sin = kwargs[self.rope_arg]
            mask = kwargs.get("attention_mask")
            if mask is None and len(args) > 1:
                mask = args[1]
            tensors = [a for a in args if hasattr(a, "untyped_storage")]
            self.inputs[i] = {"pos": [self.ptr(a) for a in tensors], "cos": self.ptr(cos),
                              "sin": self.ptr(sin), "mask": self.ptr(mask) if mask is not None else 0}
            if i == 0 and self.capture_weak:
                print("rope cos=%#x sin=%#x mask=%#x" % (self.inputs[i]["cos"], self.inputs[i]["sin"],
                                                         self.inputs[i]["mask"]), flush=True)
        return hook

    def post(self, i):
        def hook(_m, _args, out):
            h = out[0] if isinstance(out, (tuple, list)) else out
            self.outputs[i] = {"h": self.ptr(h), "v": 0}
        return hook


class Llama:
    """LlamaForCausalLM and its batch, as run_case's torch harness drives a model: model() is the loss,
    .layers the decoder layers, .parameters() all parameters."""

    def __init__(self):
        import llama_torch
        self.inner = llama_torch.tiny_llama()
        self.ids = llama_torch.batch()
        self.layers = self.inner.model.layers

    def parameters(self):
        return self.inner.parameters()

    def __call__(self):
        return self.inner(input_ids=self.ids, labels=self.ids).loss


class DeepSeekV3:
    """The tiny DeepSeek-V3 and its batch, as run_case's MindSpore harness drives a model: model() is the
    loss, .layers the decoder layers, .trainable_params() the parameters."""

    def __init__(self):
        import mindformers_cpu
        self.mfc = mindformers_cpu
        self.inner = mindformers_cpu.tiny_deepseek_v3()
        self.ids, self.labels = mindformers_cpu.batch()
        self.layers = mindformers_cpu.decoder_layers(self.inner)

    def trainable_params(self):
        return self.inner.trainable_params()

    def __call__(self):
        return self.mfc.loss(self.inner, self.ids, self.labels)


class Torch(run_case.Torch):
    def model(self, fanout=False):
        RealProbe.rope_arg = "position_embeddings"
        return Llama()


class MindSpore(run_case.MindSpore):
    def model(self, fanout=False):
        RealProbe.rope_arg = "rotary_cos_sin"
        return DeepSeekV3()


if __name__ == "__main__":
    if "--framework" in sys.argv and sys.argv[sys.argv.index("--framework") + 1:][:1] == ["mindspore"]:
        # `import mindformers` imports tensorboardX, which imports torch when it can (only to accept torch
        # tensors too): 3 s of CPU (more on a loaded machine) the MindSpore runs do not need.
        sys.modules["torch"] = None
    run_case.Torch, run_case.MindSpore, run_case.Probe = Torch, MindSpore, RealProbe
    run_case.main()
