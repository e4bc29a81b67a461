# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Fused elementwise kernels of the Gemma layers (Triton on CUDA, PyTorch elsewhere).

The Gemma stacks are launch-bound at batch 1 (the action expert runs 18 layers x 10 steps
over 51 tokens), so each layer's elementwise work is fused into three kernels:
  add_rms_norm   x += residual (float32 stream), out = x * rsqrt(mean(x^2) + eps)
                 (add_layer_norm: the same with the mean removed, for SigLIP)
  rope_qkv       split fused QKV, rotate Q and K (rotate-half RoPE), write K/V into the cache
  gelu_mul       gelu_tanh(gate) * up
add_rms_norm and rope_qkv also take the skinny GEMM's float32 split-K partial sums [P, M, N]
and add them up as they read them (gemm.py). Every kernel computes in float32 and rounds once on
store. The PyTorch versions are the reference the CPU path uses (and that the GPU tests compare
against). On Hopper the kernels launch as programmatic dependents (use_pdl, pdl_enter): each
waits for the previous kernel's memory before touching any, then lets the next one launch (the
short kernels named in kernel_configs.PDL_LAUNCH_FIRST let it launch first, then wait).
"""
import functools
import os

import torch
import torch.nn.functional as F  # noqa: N812

from pi0_ros.engine import kernel_configs

try:
    import triton
    import triton.language as tl
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - CPU-only installs
    triton = None


FP8_MAX = 448.0  # largest finite float8_e4m3fn

# Tests only: run the Triton kernels on CPU tensors through Triton's interpreter.
INTERPRET_ON_CPU = (triton is not None and os.environ.get('TRITON_INTERPRET') == '1'
                    and os.environ.get('PI0_ROS_TRITON_ON_CPU') == '1')


def use_triton(tensor: torch.Tensor) -> bool:
    """Tell whether the Triton kernels run: CUDA tensors with Triton installed."""
    return triton is not None and (tensor.is_cuda or INTERPRET_ON_CPU)


@functools.lru_cache(maxsize=None)
def _hopper_or_newer(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


def use_pdl(tensor: torch.Tensor) -> bool:
    """Tell whether kernels on this tensor's device launch as programmatic dependents."""
    return (kernel_configs.PDL and triton is not None and tensor.is_cuda
            and _hopper_or_newer(tensor.device.index or 0))


def use_tma(tensor: torch.Tensor) -> bool:
    """Tell whether Triton kernels on this tensor can use TMA tensor descriptors (Hopper+)."""
    if triton is None:
        return False
    if tensor.is_cuda:
        return _hopper_or_newer(tensor.device.index or 0)
    return INTERPRET_ON_CPU


def launch_first(kernel: str) -> bool:
    """Tell whether a short kernel ('norm', 'rope', 'merge') lets the next one launch first."""
    return kernel in (kernel_configs.PDL_LAUNCH_FIRST or '').split(',')


def tma_available() -> bool:
    """Tell whether this process's default CUDA device runs the TMA kernels (the planner)."""
    return triton is not None and torch.cuda.is_available() and _hopper_or_newer(
        torch.cuda.current_device())


if triton is not None:
    @triton.jit
    def pdl_enter(USE_PDL: tl.constexpr, LAUNCH_FIRST: tl.constexpr = False):  # noqa: N803
        """
        Wait for the previous kernel's memory, then let the next kernel launch (PDL).

        LAUNCH_FIRST lets the next kernel launch before this one waits (for short kernels: the
        next one's work ahead of its own wait, e.g. its weight prefetch, starts sooner; it
        still waits for this kernel to finish).
        """
        if USE_PDL:
            if LAUNCH_FIRST:
                gdc_launch_dependents()
                gdc_wait()
            else:
                gdc_wait()
                gdc_launch_dependents()

    @triton.jit
    def prefetch_l2(ptrs):
        """Ask for these addresses' cache lines in L2 (no registers, nothing waits on it)."""
        tl.inline_asm_elementwise('prefetch.global.L2 [$1]; // dummy $0', '=r,l', [ptrs],
                                  dtype=tl.int32, is_pure=False, pack=1)

    @triton.jit
    def gelu_tanh(x):
        """Return GELU (tanh approximation) of float32 x, the tanh taken through a sigmoid."""
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * inner) - 1.0))

    @triton.jit
    def _load_parts(ptr, offsets, mask, part_stride, PARTS: tl.constexpr):
        total = tl.load(ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        for part in tl.static_range(1, PARTS):
            total += tl.load(ptr + part * part_stride + offsets, mask=mask, other=0.0)
        return total

    @triton.jit
    def _add_norm_kernel(x_ptr, residual_ptr, out_ptr, scale_ptr, n_cols, part_stride, eps,
                         PARTS: tl.constexpr, CENTER: tl.constexpr, QUANTIZE: tl.constexpr,
                         BLOCK: tl.constexpr, USE_PDL: tl.constexpr,
                         LAUNCH_FIRST: tl.constexpr):
        pdl_enter(USE_PDL, LAUNCH_FIRST)
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        inside = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=inside, other=0.0).to(tl.float32)
        if PARTS > 0:
            x += _load_parts(residual_ptr + row * n_cols, cols, inside, part_stride, PARTS)
            tl.store(x_ptr + row * n_cols + cols, x, mask=inside)
        if CENTER:
            x = tl.where(inside, x - tl.sum(x, axis=0) / n_cols, 0.0)
        y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        if QUANTIZE:  # FP8 row: y / scale with scale = max|y| / FP8_MAX (448)
            scale = tl.maximum(tl.max(tl.abs(y), axis=0), 1e-12) / 448.0
            tl.store(scale_ptr + row, scale)
            y = tl.minimum(tl.maximum(y / scale, -448.0), 448.0)
        tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=inside)

    @triton.jit
    def rotate_pair(x1, x2, cos, sin):
        """Turn the two halves of heads' dims by RoPE (HF's rotate_half convention)."""
        return x1 * cos - x2 * sin, x2 * cos + x1 * sin

    @triton.jit
    def _rope_qkv_kernel(qkv_ptr, cos_ptr, sin_ptr, q_ptr, k_ptr, v_ptr, seq, part_stride,
                         k_stride_b, k_stride_s, v_stride_b, v_stride_s,
                         HEADS: tl.constexpr, HEADS_P2: tl.constexpr, HALF: tl.constexpr,
                         HALF_P2: tl.constexpr, PARTS: tl.constexpr, USE_PDL: tl.constexpr,
                         LAUNCH_FIRST: tl.constexpr):
        pdl_enter(USE_PDL, LAUNCH_FIRST)
        row = tl.program_id(0).to(tl.int64)
        batch = row // seq
        pos = row % seq
        head_dim = 2 * HALF
        width = (HEADS + 2) * head_dim
        j = tl.arange(0, HALF_P2)
        j_in = j < HALF
        cos = tl.load(cos_ptr + row * HALF + j, mask=j_in, other=0.0)
        sin = tl.load(sin_ptr + row * HALF + j, mask=j_in, other=0.0)
        base = qkv_ptr + row * width
        if HEADS > 0:
            h = tl.arange(0, HEADS_P2)[:, None]
            inside = (h < HEADS) & j_in[None, :]
            offsets = h * head_dim + j[None, :]
            x1 = _load_parts(base, offsets, inside, part_stride, PARTS)
            x2 = _load_parts(base, offsets + HALF, inside, part_stride, PARTS)
            o1, o2 = rotate_pair(x1, x2, cos[None, :], sin[None, :])
            q_row = q_ptr + row * (HEADS * head_dim)
            tl.store(q_row + offsets, o1.to(q_ptr.dtype.element_ty), mask=inside)
            tl.store(q_row + offsets + HALF, o2.to(q_ptr.dtype.element_ty), mask=inside)
        k_base = base + HEADS * head_dim
        k1 = _load_parts(k_base, j, j_in, part_stride, PARTS)
        k2 = _load_parts(k_base, HALF + j, j_in, part_stride, PARTS)
        r1, r2 = rotate_pair(k1, k2, cos, sin)
        k_row = k_ptr + batch * k_stride_b + pos * k_stride_s
        tl.store(k_row + j, r1.to(k_ptr.dtype.element_ty), mask=j_in)
        tl.store(k_row + HALF + j, r2.to(k_ptr.dtype.element_ty), mask=j_in)
        v_base = k_base + head_dim
        v_row = v_ptr + batch * v_stride_b + pos * v_stride_s
        v1 = _load_parts(v_base, j, j_in, part_stride, PARTS)
        v2 = _load_parts(v_base, HALF + j, j_in, part_stride, PARTS)
        tl.store(v_row + j, v1.to(v_ptr.dtype.element_ty), mask=j_in)
        tl.store(v_row + HALF + j, v2.to(v_ptr.dtype.element_ty), mask=j_in)

    @triton.jit
    def _gelu_times_up(row_ptr, cols, inside, n_cols):
        # float32 gelu_tanh(gate) * up of one [gate | up] row's columns.
        gate = tl.load(row_ptr + cols, mask=inside, other=0.0).to(tl.float32)
        up = tl.load(row_ptr + n_cols + cols, mask=inside, other=0.0).to(tl.float32)
        return gelu_tanh(gate) * up

    @triton.jit
    def _gelu_mul_kernel(gate_up_ptr, out_ptr, n_cols, BLOCK: tl.constexpr,
                         USE_PDL: tl.constexpr):
        pdl_enter(USE_PDL)
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = cols < n_cols
        y = _gelu_times_up(gate_up_ptr + row * 2 * n_cols, cols, inside, n_cols)
        tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=inside)

    @triton.jit
    def _gelu_mul_quantize_kernel(gate_up_ptr, out_ptr, scale_ptr, n_cols, BLOCK: tl.constexpr,
                                  USE_PDL: tl.constexpr):
        # One row per program, two passes: the row's max |gelu(gate) * up|, then the FP8 row.
        pdl_enter(USE_PDL)
        row = tl.program_id(0).to(tl.int64)
        base = gate_up_ptr + row * 2 * n_cols
        amax = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            inside = cols < n_cols
            amax = tl.maximum(amax, tl.abs(_gelu_times_up(base, cols, inside, n_cols)))
        scale = tl.maximum(tl.max(amax, axis=0), 1e-12) / 448.0
        tl.store(scale_ptr + row, scale)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            inside = cols < n_cols
            y = _gelu_times_up(base, cols, inside, n_cols) / scale
            y = tl.minimum(tl.maximum(y, -448.0), 448.0)
            tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=inside)


def sum_parts(values: torch.Tensor) -> torch.Tensor:
    """[M,N] as it is; float32 partial sums [P,M,N] added up."""
    return values.sum(0) if values.dim() == 3 else values


def _launch_norm(x, residual, out, eps, center: bool, out_scale=None) -> None:
    block = triton.next_power_of_2(x.shape[1])
    parts = 0 if residual is None else (residual.shape[0] if residual.dim() == 3 else 1)
    part_stride = residual[0].numel() if parts > 1 else 0
    _add_norm_kernel[(x.shape[0],)](
        x, residual if residual is not None else x, out,
        out_scale if out_scale is not None else x, x.shape[1], part_stride, eps,
        PARTS=parts, CENTER=center, QUANTIZE=out_scale is not None, BLOCK=block,
        USE_PDL=use_pdl(x), LAUNCH_FIRST=launch_first('norm'),
        num_warps=4 if block <= 2048 else 8, launch_pdl=use_pdl(x))


def quantize_rows(y: torch.Tensor, out: torch.Tensor, out_scale: torch.Tensor) -> None:
    """Write float y [M,N] as FP8 e4m3 rows y / scale into out, scale = max|row| / FP8_MAX."""
    scale = y.abs().amax(-1).clamp(min=1e-12) / FP8_MAX
    out_scale.copy_(scale)
    out.copy_((y / scale[:, None]).clamp(-FP8_MAX, FP8_MAX))


def add_rms_norm(x: torch.Tensor, residual, out: torch.Tensor, eps: float,
                 out_scale: torch.Tensor = None) -> None:
    """
    Add residual into x [M,N] float32 (if given), write RMS-normalized x into out.

    residual is [M,N] or float32 partial sums [P,M,N] (added up here), contiguous. With
    out_scale (float32 [M]), out is float8_e4m3fn and receives each normalized row divided by
    its scale max|row| / FP8_MAX (the row-wise activation scaling of an FP8 GEMM).
    """
    if use_triton(x):
        _launch_norm(x, residual, out, eps, center=False, out_scale=out_scale)
        return
    if residual is not None:
        x.add_(sum_parts(residual))
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if out_scale is None:
        out.copy_(y)
    else:
        quantize_rows(y, out, out_scale)


def add_layer_norm(x: torch.Tensor, residual, out: torch.Tensor, eps: float) -> None:
    """Like add_rms_norm, with LayerNorm (mean removed; affine folded elsewhere)."""
    if use_triton(x):
        _launch_norm(x, residual, out, eps, center=True)
        return
    if residual is not None:
        x.add_(sum_parts(residual))
    out.copy_(F.layer_norm(x, (x.shape[1],), eps=eps))


def rope_qkv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, q_out, k_out: torch.Tensor,
             v_out: torch.Tensor, heads: int, head_dim: int) -> None:
    """
    Split fused qkv [b*S, (heads+2)*hd] (Q heads, one K head, one V head).

    qkv may also be float32 partial sums [P, b*S, (heads+2)*hd] (added up here).
    cos/sin [b*S, hd/2] float32 per row; q_out [b*S, heads*hd] (None if heads == 0);
    k_out/v_out [b, S, hd] views into the KV cache (last dim contiguous).
    """
    batch, seq = k_out.shape[0], k_out.shape[1]
    half = head_dim // 2
    if use_triton(qkv):
        parts = qkv.shape[0] if qkv.dim() == 3 else 1
        _rope_qkv_kernel[(batch * seq,)](
            qkv, cos, sin, q_out if q_out is not None else qkv, k_out, v_out, seq,
            qkv[0].numel() if parts > 1 else 0, k_out.stride(0), k_out.stride(1),
            v_out.stride(0), v_out.stride(1),
            HEADS=heads, HEADS_P2=max(triton.next_power_of_2(max(heads, 1)), 1), HALF=half,
            HALF_P2=triton.next_power_of_2(half), PARTS=parts, USE_PDL=use_pdl(qkv),
            LAUNCH_FIRST=launch_first('rope'),
            num_warps=4, launch_pdl=use_pdl(qkv))
        return
    qkv = sum_parts(qkv).float()
    cos, sin = cos[:, None, :], sin[:, None, :]

    def rotate(x):
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    if heads:
        q_out.view(-1, heads, head_dim).copy_(rotate(qkv[:, :heads * head_dim]
                                                     .view(-1, heads, head_dim)))
    k = rotate(qkv[:, None, heads * head_dim:(heads + 1) * head_dim])
    k_out.copy_(k.view(batch, seq, head_dim))
    v_out.copy_(qkv[:, (heads + 1) * head_dim:].view(batch, seq, head_dim))


def gelu_mul(gate_up: torch.Tensor, out: torch.Tensor, out_scale: torch.Tensor = None) -> None:
    """
    Write gelu_tanh(gate_up[:, :F]) * gate_up[:, F:] into out [M,F].

    With out_scale (float32 [M]), out is float8_e4m3fn and receives each row divided by its
    scale max|row| / FP8_MAX, computed in float32 (as add_rms_norm's FP8 rows).
    """
    n_cols = out.shape[1]
    if out_scale is not None:
        if use_triton(gate_up):
            _gelu_mul_quantize_kernel[(gate_up.shape[0],)](
                gate_up, out, out_scale, n_cols, BLOCK=1024, USE_PDL=use_pdl(out),
                num_warps=4, launch_pdl=use_pdl(out))
            return
        gate, up = gate_up[:, :n_cols].float(), gate_up[:, n_cols:].float()
        quantize_rows(F.gelu(gate, approximate='tanh') * up, out, out_scale)
        return
    if use_triton(gate_up):
        block = kernel_configs.GELU_MUL_BLOCK
        _gelu_mul_kernel[(gate_up.shape[0], triton.cdiv(n_cols, block))](
            gate_up, out, n_cols, BLOCK=block, USE_PDL=use_pdl(out),
            num_warps=kernel_configs.GELU_MUL_WARPS, launch_pdl=use_pdl(out))
        return
    gate, up = gate_up[:, :n_cols], gate_up[:, n_cols:]
    if gate_up.dtype == torch.float16:
        out.copy_(F.gelu(gate.float(), approximate='tanh') * up.float())
    else:
        out.copy_(F.gelu(gate, approximate='tanh') * up)
