"""models.py owns the test workload: one 12-layer decoder stack (RMSNorm, single-head causal attention with
RoPE, SiLU-gated MLP), written once for torch and once for MindSpore with the same weights. RoPE cos/sin and
the causal mask are computed once per step and passed to every layer as keyword arguments, as MindFormers
passes rotary_cos_sin. Each layer returns (hidden, v): v is saved inside the layer and also leaves it (a
key/value-cache style output), so the output rule is exercised.

The fan-out variant (fanout=True, same weights) is a model on which torch's module backward hooks change
the gradients: layer i >= FAN_SKIP also takes layer i-FAN_SKIP's hidden output as the keyword input `skip`
(so that output feeds two later layers, positionally and as a keyword), every odd layer has an ordinary
skip connection around it (h = layer(h) + h) and returns a nested dict {"hidden": h, "extra": (v,)}
(even layers the (hidden, v) tuple), and the stack's input is a constant, so layer 0's positional input
takes no gradient."""

import numpy as np

LAYERS = 12
SWAP = list(range(11))  # layers 0-10, as in hyper-parallel issue 294
FAN_SKIP = 3  # fan-out variant: layer i also gets layer i-3's hidden output as keyword input
BATCH, SEQ, DIM, FFN = 2, 32, 64, 128
EPS = 1e-6


def weights(seed=0):
    rng = np.random.default_rng(seed)
    ws = []
    for _ in range(LAYERS):
        w = {n: (rng.standard_normal(s) * 0.08).astype(np.float32) for n, s in
             (("wq", (DIM, DIM)), ("wk", (DIM, DIM)), ("wv", (DIM, DIM)), ("wo", (DIM, DIM)),
              ("wg", (DIM, FFN)), ("wu", (DIM, FFN)), ("wd", (FFN, DIM)))}
        w["n1"] = np.ones(DIM, np.float32)
        w["n2"] = np.ones(DIM, np.float32)
        ws.append(w)
    emb = (rng.standard_normal((BATCH, SEQ, DIM)) * 0.5).astype(np.float32)
    target = (rng.standard_normal((BATCH, SEQ, DIM)) * 0.5).astype(np.float32)
    return ws, emb, target


def rope_np():
    inv = 1.0 / (10000 ** (np.arange(0, DIM, 2, dtype=np.float64) / DIM))
    ang = np.outer(np.arange(SEQ, dtype=np.float64), inv)
    ang = np.concatenate([ang, ang], axis=-1)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def mask_np():
    return np.triu(np.full((SEQ, SEQ), -1e9, np.float32), k=1)


def step_loss(model, tensor, fanout):
    """One step's forward through the stack, written once for both frameworks' models (tensor makes a
    framework tensor from a NumPy array)."""
    cos, sin = (tensor(a) for a in rope_np())
    # computed once per step (not from numpy memory): storages the framework allocated itself
    cos, sin, mask = cos * 1.0, sin * 1.0, tensor(mask_np()) * 1.0
    if fanout:
        h, outs = model.inp * 1.0, []
        for i, layer in enumerate(model.layers):
            kw = {"skip": outs[i - FAN_SKIP]} if i >= FAN_SKIP else {}
            out = layer(h, cos=cos, sin=sin, mask=mask, **kw)
            y = out["hidden"] if isinstance(out, dict) else out[0]
            outs.append(y)
            h = (y + h) * 0.5 if i % 2 else y
        return ((h - model.target) ** 2).mean()
    h = model.emb * 1.0
    for layer in model.layers:
        h, _ = layer(h, cos=cos, sin=sin, mask=mask)
    return ((h - model.target) ** 2).mean()


def torch_model(seed=0, fanout=False):
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self, w, nested=False):
            super().__init__()
            self.nested = nested
            for n, a in w.items():
                setattr(self, n, nn.Parameter(torch.tensor(a)))

        def norm(self, x, w):
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * w

        def rot(self, x, cos, sin):
            half = DIM // 2
            x1, x2 = x[..., :half], x[..., half:]
            return x * cos + torch.cat([-x2, x1], dim=-1) * sin

        def forward(self, h, *, cos, sin, mask, skip=None):
            if skip is not None:
                h = h + skip * 0.25
            x = self.norm(h, self.n1)
            q = self.rot(x @ self.wq, cos, sin)
            k = self.rot(x @ self.wk, cos, sin)
            v = x @ self.wv
            s = (q @ k.transpose(-1, -2)) * (DIM ** -0.5) + mask
            a = torch.softmax(s, dim=-1) @ v
            h = h + a @ self.wo
            x = self.norm(h, self.n2)
            g = x @ self.wg
            m = (g * torch.sigmoid(g)) * (x @ self.wu)
            if self.nested:
                return {"hidden": h + m @ self.wd, "extra": (v,)}
            return h + m @ self.wd, v

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            ws, emb, target = weights(seed)
            self.layers = nn.ModuleList([Layer(w, fanout and i % 2 == 1) for i, w in enumerate(ws)])
            if fanout:
                self.register_buffer("inp", torch.tensor(emb))
            else:
                self.emb = nn.Parameter(torch.tensor(emb))
            self.register_buffer("target", torch.tensor(target))

        def forward(self):
            return step_loss(self, torch.tensor, fanout)

    return Model()


def ms_model(seed=0, fanout=False):
    import mindspore as ms
    from mindspore import nn, ops

    class Layer(nn.Cell):
        def __init__(self, w, nested=False):
            super().__init__()
            self.nested = nested
            for n, a in w.items():
                setattr(self, n, ms.Parameter(ms.Tensor(a), name=n))

        def norm(self, x, w):
            return x * ops.rsqrt((x * x).mean(-1, keep_dims=True) + EPS) * w

        def rot(self, x, cos, sin):
            half = DIM // 2
            x1, x2 = x[..., :half], x[..., half:]
            return x * cos + ops.cat([-x2, x1], axis=-1) * sin

        def construct(self, h, *, cos, sin, mask, skip=None):
            if skip is not None:
                h = h + skip * 0.25
            x = self.norm(h, self.n1)
            q = self.rot(ops.matmul(x, self.wq), cos, sin)
            k = self.rot(ops.matmul(x, self.wk), cos, sin)
            v = ops.matmul(x, self.wv)
            s = ops.matmul(q, k.swapaxes(-1, -2)) * (DIM ** -0.5) + mask
            a = ops.matmul(ops.softmax(s, axis=-1), v)
            h = h + ops.matmul(a, self.wo)
            x = self.norm(h, self.n2)
            g = ops.matmul(x, self.wg)
            m = (g * ops.sigmoid(g)) * ops.matmul(x, self.wu)
            if self.nested:
                return {"hidden": h + ops.matmul(m, self.wd), "extra": (v,)}
            return h + ops.matmul(m, self.wd), v

    class Model(nn.Cell):
        def __init__(self):
            super().__init__()
            ws, emb, target = weights(seed)
            self.layers = nn.CellList([Layer(w, fanout and i % 2 == 1) for i, w in enumerate(ws)])
            if fanout:
                self.inp = ms.Tensor(emb)
            else:
                self.emb = ms.Parameter(ms.Tensor(emb), name="emb")
            self.target = ms.Tensor(target)

        def construct(self):
            return step_loss(self, ms.Tensor, fanout)

    return Model()
