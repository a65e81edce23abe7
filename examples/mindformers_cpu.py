"""mindformers_cpu.py: MindFormers 2.1.0's PyNative DeepSeek-V3 on MindSpore 2.10's CPU backend, for the
examples and the companions' real-model tests (python/tests/test_real_models.py).

MindFormers 2.1.0 targets Ascend with MindSpore 2.11 and hyper-parallel 1.0. Three things stand between it
and a CPU run, all handled here, in one place:
- `import mindformers` imports `hyper_parallel`, which is not on the package index. The PyNative DeepSeek-V3
  path only uses it for `isinstance(x, DTensor)` checks (and a few names imported by modules it does not
  run), so an import-only stub serves: every `hyper_parallel.*` module exists and every name in it is a
  fresh empty class, of which no tensor is an instance.
- MindSpore 2.10's CPU backend has no kernel for many operators MindFormers uses (about 35 over its
  configurations). `install()` replaces each one this model reaches, at the entry point the model calls,
  with a composition of operators that do have CPU kernels (or, for index computations that take no
  gradient, with NumPy), so forward and backward both run and autograd differentiates the compositions.
  Each replacement's comment names the operator it stands in for and where the model uses it.
- Parameters are created empty (MindFormers' delayed initialisation): `tiny_deepseek_v3()` calls
  `model.init_states()` under `_no_grad()`, as MindFormers' trainer does. bf16 MatMul and Softmax have no
  CPU kernel either: the tiny model computes in float32.

Call `install()` before anything imports mindformers (`tiny_deepseek_v3()` does).
"""

import contextlib
import importlib.abc
import importlib.machinery
import io
import os
import sys
import tempfile
import types

import numpy as np

LAYERS = 12          # 1 dense + 11 MoE
SWAP = list(range(11))  # layers 0-10 swapped, as in hyper-parallel issue 294
SEQ, BATCH, VOCAB = 32, 2, 128
PAD = 0  # padding token: masked out of attention and loss; batch() never draws it


# ---- hyper_parallel: an import-only stub ---------------------------------------------------------

class _Placeholder:
    """Every name imported from the stub: a class no object is an instance of."""

    def __init__(self, *args, **kwargs):
        pass


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        cls = type(name, (_Placeholder,), {"__module__": self.__name__})
        setattr(self, name, cls)
        return cls


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers every import of hyper_parallel and its submodules with a _StubModule."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "hyper_parallel" or fullname.startswith("hyper_parallel."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _StubModule(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        pass


def install_hyper_parallel_stub():
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.append(_StubFinder())  # after the real finders: a real hyper_parallel wins


# ---- CPU stand-ins ---------------------------------------------------------------------------------

_installed = False


class _init:  # pylint: disable=invalid-name
    rng = np.random.default_rng(0)  # draws the weights (Tensor.normal_); tiny_deepseek_v3 reseeds it


def install():
    """Install the hyper_parallel stub and the CPU stand-ins (idempotent). Before `import mindformers`:
    modules that do `from mindspore.ops import rms_norm` bind the name at their import."""
    global _installed
    if _installed:
        return
    _installed = True
    install_hyper_parallel_stub()
    # MindFormers' logger writes under $LOCAL_DEFAULT_PATH/log (default ./output/log): not the caller's cwd.
    os.environ.setdefault("LOCAL_DEFAULT_PATH",
                          os.path.join(tempfile.gettempdir(), "mindformers-cpu-%d" % os.getuid()))

    import mindspore as ms
    from mindspore import Tensor, mint, ops

    def assign(t, a):
        v = Tensor(np.ascontiguousarray(a), dtype=t.dtype)
        if isinstance(t, ms.Parameter):
            t.set_data(v)
        else:
            t.copy_(v)
        return t

    # Tensor.normal_ (InplaceNormal): the initialiser of every weight. NumPy draws, one seeded generator.
    def normal_(self, mean=0.0, std=1.0, *, generator=None):
        return assign(self, _init.rng.normal(mean, std, self.shape))

    # Tensor.zero_ (InplaceZero): the MoE layers' expert_bias and tokens_per_expert.
    def zero_(self):
        return assign(self, np.zeros(self.shape))

    # Tensor.fill_ (InplaceFillScalar / InplaceFillTensor): the RMSNorm weights.
    def fill_(self, value):
        v = value.asnumpy() if isinstance(value, Tensor) else value
        return assign(self, np.full(self.shape, v))

    ms.Tensor.normal_ = normal_
    ms.Tensor.zero_ = zero_
    ms.Tensor.fill_ = fill_

    def default_dtype(value):
        if isinstance(value, bool):
            return ms.bool_
        if isinstance(value, int):
            return ms.int64
        return ms.float32

    # mint.full (FillScalar): the padding token of the causal mask -> ops.fill (Fill).
    def full(size, fill_value, *, dtype=None):
        if isinstance(fill_value, Tensor):
            fill_value = fill_value.item()
        return ops.fill(dtype or default_dtype(fill_value), tuple(size), fill_value)

    # mint.tril (TrilExt): the causal mask's lower triangle -> ops.tril (Tril).
    def tril(input, diagonal=0):  # pylint: disable=redefined-builtin
        return ops.tril(input, diagonal)

    # ops.rms_norm (RmsNorm): every RMSNorm -> x * rsqrt(mean(x^2) + eps) * gamma, returns (y, rstd) as
    # RmsNorm does; differentiable through Mul, ReduceMean, Rsqrt.
    def rms_norm(x, gamma, epsilon=1e-6):
        rstd = ops.rsqrt(ops.mean(x * x, -1, True) + epsilon)
        return x * rstd * gamma, rstd

    # mint.index_select (IndexSelect): the token embedding lookup -> ops.gather (Gather), differentiable.
    def index_select(input, dim, index):  # pylint: disable=redefined-builtin
        return ops.gather(input, index, dim)

    mint.full = full
    mint.tril = tril
    ops.rms_norm = rms_norm
    mint.index_select = index_select

    def owned(a, dtype=None):
        # A tensor made from NumPy memory keeps a stale data_ptr() after resize_(0) (MindSpore does not own
        # that memory, docs/companions.md): an operator's copy is owned like any activation.
        return ops.deepcopy(Tensor(np.ascontiguousarray(a), dtype=dtype))

    # mint.arange (Arange): RoPE positions, router statistics -> ops.arange (Range).
    def arange(start=0, end=None, step=1, *, dtype=None):
        if end is None:
            start, end = 0, start
        out = ops.arange(start, end, step)
        return out if dtype is None else ops.cast(out, dtype)

    # mint.outer (Outer): RoPE frequencies -> column times row (Mul with broadcasting).
    def outer(input, vec2):  # pylint: disable=redefined-builtin
        return ops.reshape(input, (-1, 1)) * ops.reshape(vec2, (1, -1))

    # mint.zeros_like (ZerosLikeExt): the cross-entropy backward -> ops.zeros_like (ZerosLike), then a
    # Cast for another dtype.
    def zeros_like(input, *, dtype=None):  # pylint: disable=redefined-builtin
        out = ops.zeros_like(input)
        return out if dtype is None or dtype == out.dtype else ops.cast(out, dtype)

    # mint.scatter_add (ScatterAddExt): the cross-entropy backward -> ops.tensor_scatter_elements(add).
    def scatter_add(input, dim, index, src):  # pylint: disable=redefined-builtin
        return ops.tensor_scatter_elements(input, index, src, dim, "add")

    # mint.topk (TopkExt): router expert choice -> ops.topk (TopK), values differentiable.
    def topk(input, k, dim=-1, largest=True, sorted=True):  # pylint: disable=redefined-builtin
        values, indices = ops.topk(input, k, dim, largest, sorted)
        return values, ops.cast(indices, ms.int64)

    # mint.argsort (ArgSort): routed copies in expert order -> NumPy's stable argsort (an index
    # computation, no gradient).
    def argsort(input, dim=-1, descending=False, stable=False):  # pylint: disable=redefined-builtin,unused-argument
        a = input.asnumpy()
        idx = np.argsort(-a if descending else a, axis=dim, kind="stable")
        return owned(idx.astype(np.int64))

    # mint.cumsum (CumsumExt): tokens per expert, cumulated -> ops.cumsum (CumSum).
    def cumsum(input, dim, dtype=None):  # pylint: disable=redefined-builtin
        return ops.cumsum(input if dtype is None else ops.cast(input, dtype), dim)

    # mint.histc (HistcExt): tokens per expert -> NumPy histogram (a count, no gradient), input's dtype.
    def histc(input, bins=100, min=0, max=0):  # pylint: disable=redefined-builtin
        a = input.asnumpy().astype(np.float64).reshape(-1)
        lo, hi = (float(min), float(max)) if max > min else (a.min(), a.max())
        counts, _ = np.histogram(a, bins=bins, range=(lo, hi))
        return owned(counts, input.dtype)

    # mint.floor_divide (FloorDivScalar / FloorDiv): token of each routed copy -> ops.floor_div (FloorDiv).
    def floor_divide(input, other):  # pylint: disable=redefined-builtin
        return ops.floor_div(input, other)

    mint.arange = arange
    mint.outer = outer
    mint.zeros_like = zeros_like
    mint.scatter_add = scatter_add
    mint.topk = topk
    mint.argsort = argsort
    mint.cumsum = cumsum
    mint.histc = histc
    mint.floor_divide = floor_divide


# ---- primitives MindFormers modules import by name: replaced in those modules by patch_modules() ------

class GroupedMatmul:
    """GroupedMatmul (split_item=3, group_type=0): the routed experts; on CPU the primitive returns an empty
    tuple. Stand-in: the rows of each expert (group_list holds the cumulated row counts) times that
    expert's weight (StridedSlice, MatMul, Concat): differentiable, each row computed once."""

    def __init__(self, split_item=3, group_type=0):
        if (split_item, group_type) != (3, 0):
            raise NotImplementedError("GroupedMatmul stand-in: split_item=3, group_type=0 only")

    def __call__(self, x, weight, bias=None, scale=None, offset=None, antiquant_scale=None,
                 antiquant_offset=None, group_list=None, *args):
        from mindspore import ops
        x, w = x[0], weight[0]
        ends = [int(e) for e in group_list.asnumpy().reshape(-1)]
        if ends[-1] != x.shape[0]:
            raise NotImplementedError("GroupedMatmul stand-in: every row belongs to an expert")
        parts, start = [], 0
        for e, end in enumerate(ends):
            if end > start:
                parts.append(ops.matmul(x[start:end], w[e]))
            start = end
        return [ops.cat(parts, 0) if len(parts) > 1 else parts[0]]


class FlashAttentionScore:
    """FlashAttentionScore (Ascend's fused attention), BNSD layout, no dropout: softmax(q k^T * scale +
    mask * -1e9) v with MatMul, Softmax, Add (a mask value of 1 hides the entry, as the kernel reads it).
    Returns the primitive's 4-tuple; only the attention output is computed."""

    def __init__(self, head_num=1, keep_prob=1.0, scale_value=1.0, pre_tokens=2147483647, next_tokens=0,
                 inner_precise=0, input_layout="BNSD", sparse_mode=0):
        if input_layout != "BNSD" or keep_prob != 1.0 or sparse_mode != 0:
            raise NotImplementedError("FlashAttentionScore stand-in: BNSD, keep_prob 1, sparse_mode 0 only")
        self.scale = scale_value

    def __call__(self, query, key, value, real_shift=None, drop_mask=None, padding_mask=None, attn_mask=None,
                 prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None):
        import mindspore as ms
        from mindspore import ops
        if real_shift is not None or prefix is not None or actual_seq_qlen is not None:
            raise NotImplementedError("FlashAttentionScore stand-in: no alibi, prefix or TND lengths")
        scores = ops.matmul(query, ops.swapaxes(key, -1, -2)) * self.scale
        if attn_mask is not None:
            scores = scores + ops.cast(attn_mask, ms.float32) * -1e9
        return None, None, None, ops.matmul(ops.softmax(scores, -1), value)


def patch_modules():
    """After `import mindformers`: the primitive classes its modules imported by name."""
    import mindformers.pynative.layers.flash_attention as fa
    import mindformers.pynative.transformers.moe.experts as experts
    fa.FlashAttentionScore = FlashAttentionScore
    experts.GroupedMatmul = GroupedMatmul


# ---- the tiny DeepSeek-V3 ------------------------------------------------------------------------------

def tiny_deepseek_v3(seed=0):
    """MindFormers' PyNativeDeepseekV3ForCausalLM on CPU: 12 layers (1 dense + 11 MoE with 4 routed experts,
    top-2, and 1 shared expert), hidden 64, MLA (q rank 48, kv rank 32, rope dim 16), 2 heads, vocabulary
    128, sequence 32, float32, initialised (init_states under _no_grad, weights from a NumPy generator
    seeded with seed) and in training mode (it returns (loss,)). Its layers: decoder_layers(model)."""
    install()
    import logging
    import mindspore as ms
    from mindspore.graph.api import _no_grad
    ms.set_device("CPU")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    # Synchronous launches: MindSpore's launch pipeline spins against the main thread on few cores.
    ms.runtime.launch_blocking()
    from mindformers.models.deepseek3.configuration_deepseek_v3 import DeepseekV3Config
    from mindformers.models.deepseek3.modeling_deepseek_v3_pynative import PyNativeDeepseekV3ForCausalLM
    from mindformers.tools.logger import get_logger
    patch_modules()
    get_logger().setLevel(logging.ERROR)  # MindFormers logs every config key at INFO and WARNING
    with contextlib.redirect_stdout(io.StringIO()):  # the config conversion prints a table
        config = DeepseekV3Config(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=LAYERS, first_k_dense_replace=1, num_nextn_predict_layers=0,
            num_attention_heads=2, num_key_value_heads=2, q_lora_rank=48, kv_lora_rank=32,
            qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
            n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=None, topk_group=None,
            moe_grouped_gemm=True, seq_length=SEQ, max_position_embeddings=SEQ, pad_token_id=PAD,
            compute_dtype="float32", params_dtype="float32", layernorm_compute_dtype="float32",
            rotary_dtype="float32")
        model = PyNativeDeepseekV3ForCausalLM(config)
    _init.rng = np.random.default_rng(seed)
    with _no_grad():
        model.init_states()
    model.set_train(True)
    return model


def decoder_layers(model):
    """The decoder layers (an nn.CellList subclass), each called with rotary_cos_sin=(cos, sin)."""
    return model.model.decoder.layers


def batch(seed=0):
    """(input_ids, labels): int32 [BATCH, SEQ] token ids (no padding), labels the next token."""
    import mindspore as ms
    rng = np.random.default_rng(seed)
    ids = rng.integers(PAD + 1, VOCAB, (BATCH, SEQ + 1)).astype(np.int32)
    return ms.Tensor(ids[:, :-1]), ms.Tensor(ids[:, 1:])


def loss(model, input_ids, labels):
    """The model's mean token cross-entropy, a scalar tensor."""
    return model(input_ids=input_ids, labels=labels)[0].reshape(())
