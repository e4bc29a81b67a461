# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Skinny GEMM for the action expert: few rows (51 tokens per observation) times large weights.

At batch 1 each projection of the expert is a weight stream: [51, K] x [K, N] reads N*K half
floats and does almost no arithmetic, so what matters is keeping enough bytes in flight on every
SM and launching few kernels. One Triton kernel covers the three shapes of work:
  plain     y = x @ W^T, rounded once to the compute dtype
  split-K   the K range split over programs; each writes a float32 partial sum [S, M, N] that
            the next fused kernel (add_rms_norm, rope_qkv) adds up while it reads it (no extra
            reduction kernel), or, for a projection into the float32 residual stream (the
            expert's o and down), adds its share into the stream with atomics, so the norm
            after it reads one tensor (kernel_configs.SKINNY_ATOMIC_MAX_ROWS)
  gelu_mul  W = [gate; up] stacked: y = gelu_tanh(x @ gate^T) * (x @ up^T), two accumulators in
            one program, so the MLP's hidden activations are written once, already activated
A kernel of its own (qkv_rope) fuses the expert's qkv projection with RoPE the same way: two
accumulators per program, the two halves of a head's dims that RoPE pairs.
Launch configurations come from kernel_configs.SKINNY_LINEAR (measured) or a heuristic.
"""
import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812

from pi0_ros.engine import kernel_configs, kernels
from pi0_ros.engine.kernels import triton

if triton is not None:
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    from pi0_ros.engine.kernels import gelu_tanh, pdl_enter, prefetch_l2, rotate_pair

    @triton.jit
    def _skinny_linear_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, n_rows, k_per_split,
                              up_offset, stride_xm, stride_wn, stride_om, stride_os,
                              rows_per_group, stride_xg, stride_og, accumulate_scale,
                              GELU_MUL: tl.constexpr, SILU: tl.constexpr,
                              HAS_BIAS: tl.constexpr, PARTIAL: tl.constexpr,
                              ACCUMULATE: tl.constexpr, ATOMIC: tl.constexpr,
                              FLOAT32: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              BLOCK_K: tl.constexpr, PREFETCH_LINES: tl.constexpr,
                              LINE_ELEMENTS: tl.constexpr, USE_PDL: tl.constexpr):
        block_m, block_n, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        cols = (block_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
        start = split * k_per_split
        if USE_PDL and PREFETCH_LINES > 0:
            # The weights do not depend on the previous kernel: start streaming this program's
            # slab into L2 while that kernel finishes, then wait for its activations.
            lines = start + tl.arange(0, PREFETCH_LINES) * LINE_ELEMENTS
            prefetch_l2(w_ptr + cols[:, None] * stride_wn + lines[None, :])
            if GELU_MUL:
                prefetch_l2(w_ptr + (cols[:, None] + up_offset) * stride_wn + lines[None, :])
        pdl_enter(USE_PDL)
        rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
        depth = start + tl.arange(0, BLOCK_K)
        row_ok = rows[:, None] < n_rows
        # Rows come in groups (observations of a [B, R, K] view with any batch stride).
        group = (rows // rows_per_group).to(tl.int64)
        member = (rows % rows_per_group).to(tl.int64)
        x_ptrs = x_ptr + (group * stride_xg + member * stride_xm)[:, None] + depth[None, :]
        w_ptrs = w_ptr + cols[:, None] * stride_wn + depth[None, :]
        up_ptrs = w_ptrs + up_offset * stride_wn
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        acc_up = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for _ in range(0, k_per_split, BLOCK_K):
            x = tl.load(x_ptrs, mask=row_ok, other=0.0)
            w = tl.load(w_ptrs)
            if FLOAT32:  # three TF32 products: float32 accuracy on the tensor cores
                acc = tl.dot(x, tl.trans(w), acc, input_precision='tf32x3')
            else:
                acc = tl.dot(x, tl.trans(w), acc)
            if GELU_MUL:
                acc_up = tl.dot(x, tl.trans(tl.load(up_ptrs)), acc_up)
                up_ptrs += BLOCK_K
            x_ptrs += BLOCK_K
            w_ptrs += BLOCK_K
        if HAS_BIAS:
            acc += tl.load(bias_ptr + cols)[None, :].to(tl.float32)
        if GELU_MUL:
            acc = gelu_tanh(acc) * acc_up
        if SILU:
            acc = acc * tl.sigmoid(acc)
        out_rows = group * stride_og + member * stride_om
        out_ptrs = out_ptr + split * stride_os + out_rows[:, None] + cols[None, :]
        if ATOMIC:  # out += result, every K split adding its share (float32 out)
            tl.atomic_add(out_ptrs, acc, mask=row_ok, sem='relaxed', scope='gpu')
        elif PARTIAL:
            tl.store(out_ptrs, acc, mask=row_ok)
        elif ACCUMULATE:  # out += scale * result (float32 out)
            previous = tl.load(out_ptrs, mask=row_ok, other=0.0)
            tl.store(out_ptrs, previous + accumulate_scale * acc, mask=row_ok)
        else:
            tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=row_ok)

    @triton.jit
    def _qkv_rope_kernel(x_ptr, w_ptr, cos_ptr, sin_ptr, q_ptr, k_ptr, v_ptr, n_rows, depth, seq,
                         stride_xm, stride_wn, k_stride_b, k_stride_s, v_stride_b, v_stride_s,
                         HEADS: tl.constexpr, HALF: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         PREFETCH_LINES: tl.constexpr, LINE_ELEMENTS: tl.constexpr,
                         USE_PDL: tl.constexpr):
        # One program: BLOCK_N dims of the first half of one head (the Q heads, then K, then
        # V) and the same dims of its second half, which RoPE pairs in the epilogue.
        block_m, block_n = tl.program_id(0), tl.program_id(1)
        blocks_per_half = HALF // BLOCK_N
        head = block_n // blocks_per_half
        dims = (block_n % blocks_per_half) * BLOCK_N + tl.arange(0, BLOCK_N)
        cols = (head * 2 * HALF + dims).to(tl.int64)
        if USE_PDL and PREFETCH_LINES > 0:
            lines = tl.arange(0, PREFETCH_LINES) * LINE_ELEMENTS
            prefetch_l2(w_ptr + cols[:, None] * stride_wn + lines[None, :])
            prefetch_l2(w_ptr + (cols[:, None] + HALF) * stride_wn + lines[None, :])
        pdl_enter(USE_PDL)
        rows = (block_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        row_ok = rows[:, None] < n_rows
        depth_offsets = tl.arange(0, BLOCK_K)
        x_ptrs = x_ptr + rows[:, None] * stride_xm + depth_offsets[None, :]
        first_ptrs = w_ptr + cols[:, None] * stride_wn + depth_offsets[None, :]
        second_ptrs = first_ptrs + HALF * stride_wn
        first = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        second = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for _ in range(0, depth, BLOCK_K):
            x = tl.load(x_ptrs, mask=row_ok, other=0.0)
            first = tl.dot(x, tl.trans(tl.load(first_ptrs)), first)
            second = tl.dot(x, tl.trans(tl.load(second_ptrs)), second)
            x_ptrs += BLOCK_K
            first_ptrs += BLOCK_K
            second_ptrs += BLOCK_K
        if head <= HEADS:  # the Q heads and the K head turn; V does not
            table = rows[:, None] * HALF + dims[None, :]
            first, second = rotate_pair(first, second,
                                        tl.load(cos_ptr + table, mask=row_ok, other=0.0),
                                        tl.load(sin_ptr + table, mask=row_ok, other=0.0))
        if head < HEADS:
            out = q_ptr + rows[:, None] * (HEADS * 2 * HALF) + (head * 2 * HALF + dims)[None, :]
        elif head == HEADS:  # the cache's [batch, position] row of each token
            out = k_ptr + ((rows // seq) * k_stride_b + (rows % seq) * k_stride_s)[:, None] \
                + dims[None, :]
        else:
            out = v_ptr + ((rows // seq) * v_stride_b + (rows % seq) * v_stride_s)[:, None] \
                + dims[None, :]
        tl.store(out, first.to(q_ptr.dtype.element_ty), mask=row_ok)
        tl.store(out + HALF, second.to(q_ptr.dtype.element_ty), mask=row_ok)

    @triton.jit
    def _gelu_mul_gemm_kernel(x_desc, w_desc, out_desc, n_rows, depth, up_offset,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              BLOCK_K: tl.constexpr, USE_PDL: tl.constexpr):
        # Row blocks vary fastest: the programs that run together share their weight tiles.
        pid = tl.program_id(0)
        row_blocks = tl.cdiv(n_rows, BLOCK_M)
        row = (pid % row_blocks) * BLOCK_M
        col = (pid // row_blocks) * BLOCK_N
        pdl_enter(USE_PDL)
        acc_gate = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        acc_up = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for k in range(0, depth, BLOCK_K):
            x = x_desc.load([row, k])
            acc_gate = tl.dot(x, tl.trans(w_desc.load([col, k])), acc_gate)
            acc_up = tl.dot(x, tl.trans(w_desc.load([up_offset + col, k])), acc_up)
        out_desc.store([row, col], (gelu_tanh(acc_gate) * acc_up).to(out_desc.dtype))


@dataclass
class Fp8Weight:
    """A projection's weight [N, K] as float8 e4m3 with one float32 scale per output row."""

    data: torch.Tensor
    scale: torch.Tensor

    @classmethod
    def quantize(cls, weight: torch.Tensor, rows_per_pass: int = 2048) -> 'Fp8Weight':
        """
        Per-output-channel absmax scaling of a float weight [N, K].

        Rows are quantized a block at a time, so the float32 temporaries stay small (a whole
        prefix gate/up weight at once would add ~1 GB to the engine's start-up peak).
        """
        data = torch.empty(weight.shape, dtype=torch.float8_e4m3fn, device=weight.device)
        scale = torch.empty(weight.shape[0], dtype=torch.float32, device=weight.device)
        for start in range(0, weight.shape[0], rows_per_pass):
            stop = start + rows_per_pass
            kernels.quantize_rows(weight[start:stop].float(), data[start:stop],
                                  scale[start:stop])
        return cls(data, scale)

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        """Return the weight as dtype [N, K] (the PyTorch path)."""
        return (self.data.float() * self.scale[:, None]).to(dtype)

    @property
    def shape(self):
        """Shape of the weight, [N, K]."""
        return self.data.shape


@dataclass(frozen=True)
class SkinnyConfig:
    """One launch configuration of the skinny GEMM."""

    block_m: int = 64
    block_n: int = 64
    block_k: int = 128
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 4


def supports(rows: int, weight: torch.Tensor, config: SkinnyConfig, gelu_mul: bool) -> bool:
    """Tell whether a configuration tiles this problem exactly (N and K; rows are masked)."""
    n_out = weight.shape[0] // 2 if gelu_mul else weight.shape[0]
    depth = weight.shape[1]
    return (n_out % config.block_n == 0 and depth % (config.block_k * config.split_k) == 0
            and not (gelu_mul and config.split_k > 1) and rows >= 1)


def heuristic_config(rows: int, n_out: int, depth: int, gelu_mul: bool) -> SkinnyConfig:
    """Pick a configuration: about one wave of programs, each streaming a 64-column slab."""
    block_m = 64 if rows > 16 else 16
    block_n = next(size for size in (64, 32, 16) if n_out % size == 0)
    block_k = next(size for size in (128, 64, 32, 16) if depth % size == 0)
    programs = -(-rows // block_m) * (n_out // block_n)
    split_k = 1
    while (not gelu_mul and programs * split_k * 2 <= 160 and split_k < 8
           and depth % (block_k * split_k * 2) == 0):
        split_k *= 2
    return SkinnyConfig(block_m, block_n, block_k, split_k, 4, 3 if gelu_mul else 4)


def config_for(rows: int, weight: torch.Tensor, gelu_mul: bool):
    """
    Return the measured configuration for this shape and row count, else the heuristic.

    None when the measurements found cuBLAS faster for this many rows.
    """
    n_out = weight.shape[0] // 2 if gelu_mul else weight.shape[0]
    measured = kernel_configs.SKINNY_LINEAR.get((n_out, weight.shape[1], gelu_mul))
    if not measured:
        return heuristic_config(rows, n_out, weight.shape[1], gelu_mul)
    for max_rows, values in measured:
        if rows <= max_rows:
            return None if values is None else SkinnyConfig(**values)
    return None


@contextlib.contextmanager
def preferred_blas(device: torch.device, dtype: torch.dtype):
    """
    Make kernel_configs.BLAS_LIBRARY PyTorch's BLAS library inside (half precision on CUDA).

    PyTorch's choice is process-wide: it is restored on leaving, and the engine holds its lock
    while inside, so only the engine's own GEMMs (and graphs captured there) use it. float32
    and CPU work (and ROCm, where it was never measured) keep PyTorch's default.
    """
    library = kernel_configs.BLAS_LIBRARY
    if (not library or device.type != 'cuda' or dtype == torch.float32
            or torch.version.hip is not None):
        yield
        return
    previous = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library(library)
    try:
        yield
    finally:
        torch.backends.cuda.preferred_blas_library(previous)


def use_skinny(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Tell whether the skinny kernel runs: half precision on CUDA, few rows, tileable shape."""
    return (kernels.use_triton(x) and x.dtype in (torch.float16, torch.bfloat16)
            and x.shape[0] <= kernel_configs.SKINNY_LINEAR_MAX_ROWS
            and weight.shape[1] % 16 == 0 and weight.shape[0] % 32 == 0)


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, *, bias: torch.Tensor = None,
                  gelu_mul: bool = False, silu: bool = False, config: SkinnyConfig = None,
                  out: torch.Tensor = None, accumulate_scale: float = None,
                  atomic_add: bool = False) -> torch.Tensor:
    """
    Compute x [M,K] @ weight [N,K]^T (+ bias) with the Triton kernel (x contiguous in K).

    Returns [M,N] in x.dtype, or float32 partial sums [split_k, M, N] when the configuration
    splits K (add them up: add_rms_norm and rope_qkv take them as they are). With gelu_mul,
    weight is [gate; up] ([2F, K]) and the result is gelu_tanh(gate) * up, [M, F]; silu
    applies x * sigmoid(x) to the result. float32 inputs multiply at float32 accuracy (three
    TF32 products each). x may also be a [B,R,K] view with any batch stride; out, if given
    ([M,N] or [B,R,N], last dim contiguous), receives the result, or with accumulate_scale
    out += accumulate_scale * result (float32). With atomic_add, every program adds its share
    (its K split's partial sum) into out (float32) with atomics, in no fixed order, whatever
    the split: nothing is left for a consumer to add up.
    """
    groups, per_group, depth = x.shape if x.dim() == 3 else (1, *x.shape)
    rows = groups * per_group
    n_out = weight.shape[0] // 2 if gelu_mul else weight.shape[0]
    config = config or config_for(rows, weight, gelu_mul) \
        or heuristic_config(rows, n_out, depth, gelu_mul)
    if not supports(rows, weight, config, gelu_mul) or (
            config.split_k > 1 and (bias is not None or silu
                                    or (out is not None and not atomic_add))):
        raise ValueError(f'skinny_linear: {config} does not tile [{rows},{depth}] x '
                         f'[{weight.shape[0]},{depth}] (gelu_mul={gelu_mul}; bias, silu and '
                         'out need split_k 1)')
    if atomic_add and (out is None or out.dtype != torch.float32 or bias is not None or silu
                       or gelu_mul or accumulate_scale is not None):
        raise ValueError('skinny_linear: atomic_add needs a float32 out and no bias, silu, '
                         'gelu_mul or accumulate_scale')
    partial = config.split_k > 1 and not atomic_add
    if partial:
        out = torch.empty(config.split_k, rows, n_out, dtype=torch.float32, device=x.device)
    elif out is None:
        out = torch.empty(*x.shape[:-1], n_out, dtype=x.dtype, device=x.device)
    if out.shape[-1] != n_out or out.numel() != rows * n_out * (config.split_k if partial else 1) \
            or out.stride(-1) != 1 or x.stride(-1) != 1 \
            or (accumulate_scale is not None and out.dtype != torch.float32):
        raise ValueError(f'skinny_linear: out {tuple(out.shape)} {out.dtype} does not fit '
                         f'{rows} rows x {n_out} (last dims contiguous; accumulation in float32)')
    x3 = x if x.dim() == 3 else x[None]
    out3 = out if partial or out.dim() == 3 else out[None]
    if not partial and tuple(out3.shape[:2]) != (groups, per_group):
        raise ValueError(f'skinny_linear: out {tuple(out.shape)} does not match x '
                         f'{tuple(x.shape)}')
    k_per_split = depth // config.split_k
    pdl = kernels.use_pdl(x)
    grid = (triton.cdiv(rows, config.block_m), n_out // config.block_n, config.split_k)
    _skinny_linear_kernel[grid](
        x, weight, bias if bias is not None else weight, out, rows, k_per_split, n_out,
        x3.stride(1), weight.stride(0),
        n_out if partial else out3.stride(1), rows * n_out if partial else 0, per_group,
        x3.stride(0),
        per_group * n_out if partial else out3.stride(0),
        0.0 if accumulate_scale is None else float(accumulate_scale),
        GELU_MUL=gelu_mul, SILU=silu, HAS_BIAS=bias is not None, PARTIAL=partial,
        ACCUMULATE=accumulate_scale is not None, ATOMIC=atomic_add,
        FLOAT32=x.dtype == torch.float32,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        **_weight_prefetch(rows, weight, k_per_split), USE_PDL=pdl,
        num_warps=config.num_warps, num_stages=config.num_stages, launch_pdl=pdl)
    return out


def _weight_prefetch(rows: int, weight: torch.Tensor, depth: int) -> dict:
    """
    Return the PREFETCH_LINES / LINE_ELEMENTS of a launch over `depth` of each weight row.

    Each program asks for that many 128-byte lines of its weight rows in L2 before its PDL wait:
    in launches of at most kernel_configs.PREFETCH_WEIGHTS_MAX_ROWS rows, a power of two of
    lines (0 = none).
    """
    line_elements = 128 // weight.element_size()
    lines = depth // line_elements
    wanted = (rows <= kernel_configs.PREFETCH_WEIGHTS_MAX_ROWS and lines > 0
              and lines & (lines - 1) == 0)
    return {'PREFETCH_LINES': lines if wanted else 0, 'LINE_ELEMENTS': line_elements}


def qkv_rope(x: torch.Tensor, weight, cos: torch.Tensor, sin: torch.Tensor, q_out,
             k_out: torch.Tensor, v_out: torch.Tensor, heads: int, head_dim: int,
             config: SkinnyConfig = None) -> bool:
    """
    Project x [M,K] by a fused qkv weight and turn Q and K by RoPE in one launch, if it applies.

    Writes what linear() and kernels.rope_qkv write (q_out [M, heads*hd]; k_out/v_out [b, S, hd]
    views into the KV cache; cos/sin [M, hd/2] float32) and returns True; returns False and
    writes nothing where it does not apply: more rows than kernel_configs.QKV_ROPE_MAX_ROWS (0:
    never), no q_out, FP8 weights, or where the skinny kernel does not run. config: the launch
    configuration (split_k 1; default kernel_configs.QKV_ROPE_CONFIG).
    """
    config = config or SkinnyConfig(**kernel_configs.QKV_ROPE_CONFIG)
    rows, depth = x.shape
    half = head_dim // 2
    if not (rows <= kernel_configs.QKV_ROPE_MAX_ROWS and q_out is not None
            and isinstance(weight, torch.Tensor) and use_skinny(x, weight)
            and weight.shape[0] == (heads + 2) * head_dim and half % config.block_n == 0
            and depth % config.block_k == 0 and x.stride(-1) == 1 and weight.stride(-1) == 1
            and q_out.is_contiguous() and k_out.stride(-1) == 1 and v_out.stride(-1) == 1
            and cos.is_contiguous() and sin.is_contiguous()):
        return False
    pdl = kernels.use_pdl(x)
    _qkv_rope_kernel[(triton.cdiv(rows, config.block_m), (heads + 2) * (half // config.block_n))](
        x, weight, cos, sin, q_out, k_out, v_out, rows, depth, k_out.shape[1], x.stride(0),
        weight.stride(0), k_out.stride(0), k_out.stride(1), v_out.stride(0), v_out.stride(1),
        HEADS=heads, HALF=half, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
        BLOCK_K=config.block_k, **_weight_prefetch(rows, weight, depth), USE_PDL=pdl,
        num_warps=config.num_warps, num_stages=config.num_stages, launch_pdl=pdl)
    return True


def action_config(rows: int, n_out: int, depth: int) -> SkinnyConfig:
    """Launch configuration of a float32 action-side projection (few rows, narrow columns)."""
    return SkinnyConfig(block_m=16 if rows <= 16 or n_out <= 64 else 64, block_n=16,
                        block_k=next(size for size in (64, 32, 16) if depth % size == 0),
                        split_k=1, num_warps=4, num_stages=3)


def action_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                  silu: bool = False, out: torch.Tensor = None,
                  accumulate_scale: float = None) -> torch.Tensor:
    """
    Float32 projection of the action side (x [B, R, K] -> [B, R, N]), SiLU optional.

    With out (a [B, R, N] view, last dim contiguous) the result is written there, or with
    accumulate_scale added: out = out + accumulate_scale * result (the Euler update). On CUDA
    with kernel_configs.ACTION_LINEAR_TRITON one skinny-kernel launch with the bias, SiLU and
    the write or update in its epilogue (float32 accuracy: three TF32 products); elsewhere
    PyTorch.
    """
    n_out, depth = weight.shape
    if (kernel_configs.ACTION_LINEAR_TRITON and kernels.use_triton(x) and x.dim() == 3
            and n_out % 16 == 0 and depth % 16 == 0 and x.stride(-1) == 1
            and (out is None or out.stride(-1) == 1)):
        return skinny_linear(x, weight, bias=bias, silu=silu,
                             config=action_config(x.shape[0] * x.shape[1], n_out, depth),
                             out=out, accumulate_scale=accumulate_scale)
    result = F.linear(x, weight, bias)
    if silu:
        result = F.silu(result)
    if out is None:
        return result
    out.copy_(result if accumulate_scale is None else out + accumulate_scale * result)
    return out


def gelu_mul_gemm_config(rows: int, n_out: int, depth: int) -> 'SkinnyConfig | None':
    """
    Return the GELU * up GEMM's measured configuration for this shape and row count.

    n_out is F of a [gate; up] weight [2F, K]. None where cuBLAS + the GELU * up kernel was
    faster or the shape was not measured.
    """
    for max_rows, values in kernel_configs.GELU_MUL_GEMM.get((n_out, depth), ()):
        if rows <= max_rows:
            return None if values is None else SkinnyConfig(**values)
    return None


def _gelu_mul_gemm_tiles(rows: int, n_out: int, depth: int, config: SkinnyConfig) -> bool:
    return (rows >= 1 and n_out % config.block_n == 0 and depth % config.block_k == 0
            and config.split_k == 1)


def use_gelu_mul_gemm(x: torch.Tensor, weight) -> 'SkinnyConfig | None':
    """
    Return the GELU * up GEMM's configuration when it runs for x [M,K] and this weight.

    It runs for a [gate; up] weight in half precision, with TMA (Hopper or newer) and a
    measured configuration; otherwise None.
    """
    if not (isinstance(weight, torch.Tensor) and x.dim() == 2 and kernels.use_tma(x)
            and x.dtype in (torch.float16, torch.bfloat16) and weight.dtype == x.dtype):
        return None
    n_out, depth = weight.shape[0] // 2, weight.shape[1]
    config = gelu_mul_gemm_config(x.shape[0], n_out, depth)
    return config if config and _gelu_mul_gemm_tiles(x.shape[0], n_out, depth, config) else None


def gelu_mul_gemm(x: torch.Tensor, weight: torch.Tensor, config: SkinnyConfig) -> torch.Tensor:
    """
    gelu_tanh(x @ gate^T) * (x @ up^T) for many rows, weight = [gate; up] [2F, K] -> [M, F].

    One Triton GEMM over TMA tiles with two float32 accumulators and the GELU * up in its
    epilogue, rounded once: the [M, 2F] product that cuBLAS + gelu_mul would write and read
    back (the prefix MLP's largest traffic outside the products) never exists. x and weight
    contiguous; Hopper or newer (or Triton's interpreter).
    """
    rows, depth = x.shape
    n_out = weight.shape[0] // 2
    if not (_gelu_mul_gemm_tiles(rows, n_out, depth, config) and x.is_contiguous()
            and weight.is_contiguous()):
        raise ValueError(f'gelu_mul_gemm: {config} does not tile [{rows},{depth}] x '
                         f'[{weight.shape[0]},{weight.shape[1]}] (both contiguous)')
    out = torch.empty(rows, n_out, dtype=x.dtype, device=x.device)
    block_m, block_n, block_k = config.block_m, config.block_n, config.block_k
    pdl = kernels.use_pdl(x)
    _gelu_mul_gemm_kernel[(triton.cdiv(rows, block_m) * (n_out // block_n),)](
        TensorDescriptor.from_tensor(x, [block_m, block_k]),
        TensorDescriptor.from_tensor(weight, [block_n, block_k]),
        TensorDescriptor.from_tensor(out, [block_m, block_n]), rows, depth, n_out,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, USE_PDL=pdl,
        num_warps=config.num_warps, num_stages=config.num_stages, launch_pdl=pdl)
    return out


def fp8_linear(x8: torch.Tensor, x_scale: torch.Tensor, weight: Fp8Weight, dtype: torch.dtype,
               *, gelu_mul: bool = False, fp8_out: bool = False):
    """
    Multiply FP8 rows x8 [M,K] (e4m3, scales x_scale [M]) by an Fp8Weight [N,K], into dtype.

    With gelu_mul the result is gelu_tanh(gate) * up, as in linear(); with fp8_out as well,
    it is returned as FP8 rows and their scales (the next fp8_linear's input). On CUDA one
    torch._scaled_mm with row-wise scales (FP8 tensor cores); elsewhere the same arithmetic
    dequantized to float32 (the reference).
    """
    if x8.is_cuda:
        y = torch._scaled_mm(x8, weight.data.t(), scale_a=x_scale[:, None],
                             scale_b=weight.scale[None, :], out_dtype=dtype)
    else:
        y = ((x8.float() * x_scale[:, None]) @ (weight.data.float()
                                                * weight.scale[:, None]).T).to(dtype)
    return _gelu_mul(y, fp8_out) if gelu_mul else y


def _gelu_mul(gate_up: torch.Tensor, fp8_out: bool = False):
    """gelu_tanh(gate) * up of a [gate | up] product, in its dtype or as FP8 rows + scales."""
    rows, width = gate_up.shape[0], gate_up.shape[1] // 2
    if fp8_out:
        hidden = torch.empty(rows, width, dtype=torch.float8_e4m3fn, device=gate_up.device)
        scale = torch.empty(rows, dtype=torch.float32, device=gate_up.device)
        kernels.gelu_mul(gate_up, hidden, out_scale=scale)
        return hidden, scale
    hidden = torch.empty(rows, width, dtype=gate_up.dtype, device=gate_up.device)
    kernels.gelu_mul(gate_up, hidden)
    return hidden


def linear(x: torch.Tensor, weight: torch.Tensor, *, gelu_mul: bool = False,
           add_into: torch.Tensor = None) -> 'torch.Tensor | None':
    """
    Project x by a Gemma layer's weight, with the fastest measured kernel.

    The skinny kernel where it applies (few rows), the GELU * up GEMM for gate/up where it was
    measured faster (many rows), else PyTorch.

    weight is a tensor [N, K]. The result may be float32 partial sums [S, M, N] (see
    skinny_linear); consumers accept both. add_into (float32 [M, N], the residual stream):
    where the skinny kernel splits K over at most kernel_configs.SKINNY_ATOMIC_MAX_ROWS rows, its
    programs add their sums into it with atomics and None is returned; otherwise the result is
    returned for the caller to add.
    """
    if use_skinny(x, weight):
        config = config_for(x.shape[0], weight, gelu_mul)
        if config is not None and supports(x.shape[0], weight, config, gelu_mul):
            if (add_into is not None and not gelu_mul and config.split_k > 1
                    and x.shape[0] <= kernel_configs.SKINNY_ATOMIC_MAX_ROWS):
                skinny_linear(x, weight, config=config, out=add_into, atomic_add=True)
                return None
            return skinny_linear(x, weight, gelu_mul=gelu_mul, config=config)
    if gelu_mul and (config := use_gelu_mul_gemm(x, weight)) is not None:
        return gelu_mul_gemm(x, weight, config)
    y = F.linear(x, weight)
    return _gelu_mul(y) if gelu_mul else y
