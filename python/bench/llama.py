"""llama.py owns the companion benchmark's workload: a Llama-shaped decoder (the layout of transformers'
LlamaForCausalLM: token embedding, 12 decoder layers of RMSNorm -> attention with RoPE -> residual ->
RMSNorm -> SiLU-gated MLP -> residual, final RMSNorm, LM head, cross-entropy), hidden size 64, written
once for torch and once for MindSpore with the same weights. As in transformers, the rotary cos/sin are
computed once per step and passed to every layer as the keyword argument position_embeddings=(cos, sin),
next to attention_mask and position_ids. The operations follow transformers' eager code (RMSNorm in
float32, rotate_half, softmax in float32, projections as linear layers without bias), so a layer saves
about as many tensors for backward as transformers' does: 38 per layer, 418 for layers 0-10."""

import os

import numpy as np

# The shapes, by name (SWAPAGENT_BENCH_SHAPE, read at import): "llama" is the bench described above; "wide"
# a decoder whose layers do realistic work on a CPU (hidden 1024, FFN 2816, 64 tokens), 4 layers of which 0-2
# are wrapped, so that a step's time is mostly the layers' own and a companion's cost per saved tensor shows
# as the share of a real step it is.
SHAPES = {  # layers, hidden, heads, ffn, vocab, batch, seq, wrapped
    "llama": (12, 64, 4, 128, 256, 2, 32, 11),
    "wide": (4, 1024, 16, 2816, 512, 1, 64, 3),
}
SHAPE = os.environ.get("SWAPAGENT_BENCH_SHAPE", "llama")
if SHAPE not in SHAPES:
    raise SystemExit("llama.py: SWAPAGENT_BENCH_SHAPE=%s: want one of %s" % (SHAPE, ", ".join(SHAPES)))
LAYERS, HIDDEN, HEADS, FFN, VOCAB, BATCH, SEQ, _WRAPPED = SHAPES[SHAPE]
HEAD_DIM = HIDDEN // HEADS
EPS = 1e-6
THETA = 10000.0
SWAP = list(range(_WRAPPED))  # llama: layers 0-10, as in the measurement


def describe():
    """The shape in words, for the bench's headings."""
    return "%s: %d layers, hidden %d, FFN %d, %d x %d tokens, layers 0-%d wrapped" % (
        SHAPE, LAYERS, HIDDEN, FFN, BATCH, SEQ, len(SWAP) - 1)


def weights(seed=0):
    rng = np.random.default_rng(seed)

    def w(*shape):  # a linear layer's weight, (out, in) as torch.nn.Linear stores it
        return (rng.standard_normal(shape) * 0.08).astype(np.float32)
    layers = []
    for _ in range(LAYERS):
        layers.append({"q": w(HIDDEN, HIDDEN), "k": w(HIDDEN, HIDDEN), "v": w(HIDDEN, HIDDEN),
                       "o": w(HIDDEN, HIDDEN), "gate": w(FFN, HIDDEN), "up": w(FFN, HIDDEN),
                       "down": w(HIDDEN, FFN), "ln1": np.ones(HIDDEN, np.float32),
                       "ln2": np.ones(HIDDEN, np.float32)})
    top = {"embed": w(VOCAB, HIDDEN), "norm": np.ones(HIDDEN, np.float32), "head": w(VOCAB, HIDDEN)}
    ids = rng.integers(0, VOCAB, (BATCH, SEQ + 1))
    return layers, top, ids[:, :-1].astype(np.int64), ids[:, 1:].astype(np.int64)


def inv_freq():
    return (1.0 / (THETA ** (np.arange(0, HEAD_DIM, 2, dtype=np.float32) / HEAD_DIM))).astype(np.float32)


def causal_mask():
    return np.triu(np.full((SEQ, SEQ), np.finfo(np.float32).min, np.float32), k=1)[None, None]


def torch_model(seed=0):
    import torch
    from torch import nn
    import torch.nn.functional as F

    def linear(a):
        lin = nn.Linear(a.shape[1], a.shape[0], bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.tensor(a))
        return lin

    class RMSNorm(nn.Module):
        def __init__(self, a):
            super().__init__()
            self.weight = nn.Parameter(torch.tensor(a))

        def forward(self, x):
            dtype = x.dtype
            x = x.to(torch.float32)
            var = x.pow(2).mean(-1, keepdim=True)
            x = x * torch.rsqrt(var + EPS)
            return self.weight * x.to(dtype)

    def rotate_half(x):
        x1, x2 = x[..., :HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        return torch.cat((-x2, x1), dim=-1)

    class Attention(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj, self.o_proj = (linear(w[n]) for n in "qkvo")

        def forward(self, h, position_embeddings, attention_mask):
            b, s, _ = h.shape
            shape = (b, s, HEADS, HEAD_DIM)
            q = self.q_proj(h).view(shape).transpose(1, 2)
            k = self.k_proj(h).view(shape).transpose(1, 2)
            v = self.v_proj(h).view(shape).transpose(1, 2)
            cos, sin = position_embeddings
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            a = torch.matmul(q, k.transpose(2, 3)) * HEAD_DIM ** -0.5 + attention_mask
            a = F.softmax(a, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(a, v).transpose(1, 2).contiguous().reshape(b, s, HIDDEN)
            return self.o_proj(out)

    class MLP(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.gate_proj, self.up_proj, self.down_proj = linear(w["gate"]), linear(w["up"]), linear(w["down"])

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class DecoderLayer(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.self_attn, self.mlp = Attention(w), MLP(w)
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(w["ln1"]), RMSNorm(w["ln2"])

        def forward(self, hidden_states, attention_mask=None, position_ids=None, position_embeddings=None):
            residual = hidden_states
            h = self.self_attn(self.input_layernorm(hidden_states), position_embeddings, attention_mask)
            h = residual + h
            residual = h
            return residual + self.mlp(self.post_attention_layernorm(h))

    class Rotary(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("inv_freq", torch.tensor(inv_freq()), persistent=False)

        @torch.no_grad()
        def forward(self, x, position_ids):
            f = self.inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1)
            freqs = (f @ position_ids[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            ws, top, ids, labels = weights(seed)
            self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
            with torch.no_grad():
                self.embed_tokens.weight.copy_(torch.tensor(top["embed"]))
            self.layers = nn.ModuleList([DecoderLayer(w) for w in ws])
            self.norm = RMSNorm(top["norm"])
            self.lm_head = linear(top["head"])
            self.rotary_emb = Rotary()
            self.register_buffer("ids", torch.tensor(ids), persistent=False)
            self.register_buffer("labels", torch.tensor(labels), persistent=False)
            self.register_buffer("mask", torch.tensor(causal_mask()), persistent=False)

        def forward(self):
            h = self.embed_tokens(self.ids)
            position_ids = torch.arange(SEQ).unsqueeze(0)
            position_embeddings = self.rotary_emb(h, position_ids)
            mask = self.mask * 1.0  # computed once per step, as transformers' causal mask
            for layer in self.layers:
                h = layer(h, attention_mask=mask, position_ids=position_ids,
                          position_embeddings=position_embeddings)
            logits = self.lm_head(self.norm(h))
            return F.cross_entropy(logits.reshape(-1, VOCAB), self.labels.reshape(-1))

    return Llama()


def ms_model(seed=0):
    import mindspore as ms
    from mindspore import mint, nn, ops

    def param(a, name):
        return ms.Parameter(ms.Tensor(a), name=name)

    class Linear(nn.Cell):
        def __init__(self, a, name):
            super().__init__()
            self.weight = param(a, name)

        def construct(self, x):
            return mint.nn.functional.linear(x, self.weight)

    class RMSNorm(nn.Cell):
        def __init__(self, a, name):
            super().__init__()
            self.weight = param(a, name)

        def construct(self, x):
            dtype = x.dtype
            x = x.astype(ms.float32)
            var = x.pow(2).mean(-1, keep_dims=True)
            x = x * ops.rsqrt(var + EPS)
            return self.weight * x.astype(dtype)

    def rotate_half(x):
        x1, x2 = x[..., :HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        return ops.cat((-x2, x1), axis=-1)

    class Attention(nn.Cell):
        def __init__(self, w, p):
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj, self.o_proj = (Linear(w[n], p + n) for n in "qkvo")

        def construct(self, h, position_embeddings, attention_mask):
            b, s, _ = h.shape
            shape = (b, s, HEADS, HEAD_DIM)
            q = self.q_proj(h).view(shape).swapaxes(1, 2)
            k = self.k_proj(h).view(shape).swapaxes(1, 2)
            v = self.v_proj(h).view(shape).swapaxes(1, 2)
            cos, sin = position_embeddings
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            a = ops.matmul(q, k.swapaxes(2, 3)) * HEAD_DIM ** -0.5 + attention_mask
            a = ops.softmax(a.astype(ms.float32), axis=-1).astype(q.dtype)
            out = ops.matmul(a, v).swapaxes(1, 2).reshape(b, s, HIDDEN)
            return self.o_proj(out)

    class MLP(nn.Cell):
        def __init__(self, w, p):
            super().__init__()
            self.gate_proj, self.up_proj = Linear(w["gate"], p + "gate"), Linear(w["up"], p + "up")
            self.down_proj = Linear(w["down"], p + "down")

        def construct(self, x):
            return self.down_proj(ops.silu(self.gate_proj(x)) * self.up_proj(x))

    class DecoderLayer(nn.Cell):
        def __init__(self, w, i):
            super().__init__()
            p = "l%d." % i
            self.self_attn, self.mlp = Attention(w, p), MLP(w, p)
            self.input_layernorm = RMSNorm(w["ln1"], p + "ln1")
            self.post_attention_layernorm = RMSNorm(w["ln2"], p + "ln2")

        def construct(self, hidden_states, attention_mask=None, position_ids=None, position_embeddings=None):
            residual = hidden_states
            h = self.self_attn(self.input_layernorm(hidden_states), position_embeddings, attention_mask)
            h = residual + h
            residual = h
            return residual + self.mlp(self.post_attention_layernorm(h))

    class Llama(nn.Cell):
        def __init__(self):
            super().__init__()
            ws, top, ids, labels = weights(seed)
            self.embed = param(top["embed"], "embed")
            self.layers = nn.CellList([DecoderLayer(w, i) for i, w in enumerate(ws)])
            self.norm = RMSNorm(top["norm"], "norm")
            self.lm_head = Linear(top["head"], "head")
            self.inv_freq = ms.Tensor(inv_freq())
            self.ids, self.labels = ms.Tensor(ids), ms.Tensor(labels.reshape(-1))
            self.mask0 = ms.Tensor(causal_mask())

        def construct(self):
            h = ops.gather(self.embed, self.ids, 0)
            position_ids = ops.arange(SEQ).reshape(1, SEQ)
            f = self.inv_freq.reshape(1, -1, 1).broadcast_to((1, HEAD_DIM // 2, 1))
            freqs = ops.matmul(f, position_ids.reshape(1, 1, SEQ).astype(ms.float32)).swapaxes(1, 2)
            emb = ops.cat((freqs, freqs), axis=-1)
            position_embeddings = (ops.stop_gradient(emb.cos()), ops.stop_gradient(emb.sin()))
            mask = self.mask0 * 1.0
            for layer in self.layers:
                h = layer(h, attention_mask=mask, position_ids=position_ids,
                          position_embeddings=position_embeddings)
            logits = self.lm_head(self.norm(h))
            return ops.cross_entropy(logits.reshape(-1, VOCAB), self.labels)

    return Llama()
