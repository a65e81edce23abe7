#!/usr/bin/env python3
"""Llama under the torch companion: transformers' LlamaForCausalLM (tiny: 12 layers, hidden 64, 4 heads,
eager attention, float32) trains on CPU with decoder layers 0-10 swapped, then prints the agent's swap
stats and the bytes that swap took off the device.

    .venv/bin/python examples/llama_torch.py         # not preloaded: the companion loads the agent itself
    SWAPAGENT_MIN_BYTES=1024 build/bin/swapagent run --policy safe --out /tmp/llama-out -- \
        .venv/bin/python examples/llama_torch.py     # preloaded, with a trace and swapagent's summary

The tiny model's activations (32 KB at most) are all below the agent's default threshold for
swapping (SWAPAGENT_MIN_BYTES, 64 KiB), and the agent reads its environment when it starts: not preloaded,
the script runs itself again with SWAPAGENT_MIN_BYTES=1024 when the variable is unset; preloaded, set it
on the command line.

LlamaModel computes the RoPE (cos, sin) once per step and passes it to every decoder layer as the keyword
position_embeddings=(cos, sin); every layer saves both for backward. The agent keeps those storages on the
device (keep reason `input`) and moves the layers' internal activations to host memory between forward
and backward. With `--policy outputs-only` (the behaviour before hyper-parallel's fix) it releases them
too, and the next layer's region_enter reports the fault (argument, owner, the group that released it)
before torch fails on the emptied storage.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))  # this tree's companions
sys.path.insert(0, HERE)

from swapstats import mb, min_bytes_1024, print_stats  # noqa: E402

LAYERS, SWAP = 12, list(range(11))
BATCH, SEQ, VOCAB = 2, 32, 128


def tiny_llama(seed=0):
    """LlamaForCausalLM, 12 layers, hidden 64, 4 heads of 16, MLP 128, vocabulary 128, eager attention,
    float32, no KV cache, weights from torch's generator seeded with seed. Layers: model.model.layers."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=SEQ,
                         attn_implementation="eager", use_cache=False)
    return LlamaForCausalLM(config).to(torch.float32)


def batch(seed=0):
    """input_ids, int64 [BATCH, SEQ]: the labels too (the model shifts them)."""
    import torch
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    opt = ap.parse_args()
    min_bytes_1024()

    import torch
    import swapagent.torch as sa
    torch.set_num_threads(1)
    model = tiny_llama()
    ids = batch()
    h = sa.layer_swap(model.model.layers, swap=SWAP, include_cpu=True)  # CPU tensors count as device ones
    optim = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(opt.steps):
        t = time.time()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        print("step %d: loss %.6f, %.2f s, offloaded so far %s" % (
            step + 1, loss.item(), time.time() - t, mb(sa.stats()["offloaded_bytes"])), flush=True)
    print_stats(sa.stats(), opt.steps)
    h.remove()


if __name__ == "__main__":
    main()
