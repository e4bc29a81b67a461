# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Skinny GEMM whose weight slab is on chip before the previous kernel ends (Hopper, Gluon).

At batch 1 the action expert's projections are short dependent steps: [51, K] x [K, N]. The
Triton skinny kernel (gemm.py) asks for its weight slab in L2 before its PDL wait, then streams
weight tiles and activation tiles together from L2 after it. Here each program has the TMA unit
copy its whole weight slab [BLOCK_N, K / split] into shared memory first, then waits for the
previous kernel (griddepcontrol.wait), then copies the activations and multiplies them with
warpgroup MMA as each K tile lands: the weights leave the dependent path, only the
activations' round trip through L2 stays on it. Same outputs as gemm.skinny_linear: the
product in the compute dtype, float32 split-K partial sums [S, M, N] (added up by the next fused
kernel), or gelu_tanh(gate) * up. Written in Gluon (Triton's explicit-layout dialect) because
Triton's own language cannot place loads ahead of the wait.
"""
from dataclasses import dataclass

import torch

from pi0_ros.engine import kernels

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:  # pragma: no cover - Triton without Gluon, CPU-only installs
    gluon = None

BLOCK_M = 64  # one warpgroup MMA tile of rows; rows past the input are zero-filled by TMA


@dataclass(frozen=True)
class PreloadConfig:
    """Launch configuration: columns per program, K tile, K splits, activation stages."""

    block_n: int = 32
    block_k: int = 64
    split_k: int = 1
    x_stages: int = 4


def available(x: torch.Tensor) -> bool:
    """Tell whether the kernel can run on x: Gluon, a Hopper GPU, half precision."""
    return (gluon is not None and x.is_cuda and x.dtype in (torch.float16, torch.bfloat16)
            and torch.cuda.get_device_capability(x.device)[0] == 9)


def supports(rows: int, weight: torch.Tensor, config: PreloadConfig, gelu_mul: bool) -> bool:
    """Tell whether a configuration tiles this problem and its slab fits in shared memory."""
    n_out = weight.shape[0] // 2 if gelu_mul else weight.shape[0]
    depth = weight.shape[1]
    if (rows > BLOCK_M or n_out % config.block_n or depth % (config.block_k * config.split_k)
            or (gelu_mul and config.split_k > 1)):
        return False
    tiles = depth // (config.block_k * config.split_k)
    weight_bytes = tiles * config.block_n * config.block_k * 2 * (2 if gelu_mul else 1)
    x_bytes = min(config.x_stages, tiles) * BLOCK_M * config.block_k * 2
    return weight_bytes + x_bytes <= 200 * 1024


if gluon is not None:
    @gluon.jit
    def _pdl_wait_then_release(USE_PDL: gl.constexpr):  # noqa: N803
        if USE_PDL:
            gl.inline_asm_elementwise('griddepcontrol.wait; // dummy $0', '=r', [],
                                      dtype=gl.int32, is_pure=False, pack=1)
            gl.inline_asm_elementwise('griddepcontrol.launch_dependents; // dummy $0', '=r', [],
                                      dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _preloaded_linear_kernel(x_desc, w_desc, out_ptr, n_rows, k_per_split, up_offset,
                                 stride_om, stride_os, GELU_MUL: gl.constexpr,
                                 PARTIAL: gl.constexpr, NUM_K: gl.constexpr,
                                 X_STAGES: gl.constexpr, USE_PDL: gl.constexpr,
                                 num_warps: gl.constexpr):
        block_m: gl.constexpr = x_desc.block_type.shape[0]
        block_k: gl.constexpr = x_desc.block_type.shape[1]
        block_n: gl.constexpr = w_desc.block_type.shape[0]
        halves: gl.constexpr = 2 if GELU_MUL else 1
        col = gl.program_id(0) * block_n
        split = gl.program_id(1)
        k_start = split * k_per_split

        w_smem = gl.allocate_shared_memory(w_desc.dtype, [NUM_K * halves, block_n, block_k],
                                           w_desc.layout)
        x_smem = gl.allocate_shared_memory(x_desc.dtype, [X_STAGES, block_m, block_k],
                                           x_desc.layout)
        w_ready = gl.allocate_shared_memory(gl.int64, [NUM_K, 1], mbarrier.MBarrierLayout())
        x_ready = gl.allocate_shared_memory(gl.int64, [X_STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NUM_K):
            mbarrier.init(w_ready.index(i), count=1)
        for i in gl.static_range(X_STAGES):
            mbarrier.init(x_ready.index(i), count=1)
        fence_async_shared()

        # The weights do not depend on the previous kernel: the whole slab is requested now.
        for i in gl.static_range(NUM_K):
            mbarrier.expect(w_ready.index(i), halves * w_desc.block_type.nbytes)
            for half in gl.static_range(halves):
                tma.async_copy_global_to_shared(w_desc, [col + half * up_offset,
                                                         k_start + i * block_k],
                                                w_ready.index(i), w_smem.index(i * halves + half))
        _pdl_wait_then_release(USE_PDL)
        for i in gl.static_range(X_STAGES):
            mbarrier.expect(x_ready.index(i), x_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(x_desc, [0, k_start + i * block_k], x_ready.index(i),
                                            x_smem.index(i))

        mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, block_n, 16])
        acc = gl.zeros((block_m, block_n), gl.float32, mma_layout)
        acc_up = gl.zeros((block_m, block_n), gl.float32, mma_layout)
        for i in gl.static_range(NUM_K):
            stage = i % X_STAGES
            mbarrier.wait(x_ready.index(stage), (i // X_STAGES) & 1)
            mbarrier.wait(w_ready.index(i), 0)
            acc = warpgroup_mma(x_smem.index(stage), w_smem.index(i * halves).permute((1, 0)),
                                acc, is_async=True)
            if GELU_MUL:
                acc_up = warpgroup_mma(x_smem.index(stage),
                                       w_smem.index(i * halves + 1).permute((1, 0)), acc_up,
                                       is_async=True)
            if i + X_STAGES < NUM_K:  # refill this stage once its products are done
                acc, acc_up = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc_up))
                mbarrier.expect(x_ready.index(stage), x_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(x_desc, [0, k_start + (i + X_STAGES) * block_k],
                                                x_ready.index(stage), x_smem.index(stage))
        acc, acc_up = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc_up))
        for i in gl.static_range(NUM_K):
            mbarrier.invalidate(w_ready.index(i))
        for i in gl.static_range(X_STAGES):
            mbarrier.invalidate(x_ready.index(i))

        if GELU_MUL:  # gelu_tanh(gate) * up, the tanh through a sigmoid as kernels.gelu_tanh
            inner = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
            acc = 0.5 * acc * (2.0 / (1.0 + gl.exp(-2.0 * inner))) * acc_up
        rows = gl.arange(0, block_m, layout=gl.SliceLayout(1, mma_layout))
        cols = col + gl.arange(0, block_n, layout=gl.SliceLayout(0, mma_layout))
        offsets = split * stride_os + rows[:, None] * stride_om + cols[None, :]
        row_ok = (rows[:, None] < n_rows) & (cols[None, :] >= 0)
        if PARTIAL:
            gl.store(out_ptr + offsets, acc, mask=row_ok)
        else:
            gl.store(out_ptr + offsets, acc.to(out_ptr.dtype.element_ty), mask=row_ok)


def _gl_dtype(dtype: torch.dtype):
    return gl.bfloat16 if dtype == torch.bfloat16 else gl.float16


def preloaded_linear(x: torch.Tensor, weight: torch.Tensor, config: PreloadConfig, *,
                     gelu_mul: bool = False) -> torch.Tensor:
    """
    Compute x [M, K] @ weight [N, K]^T with the weight slab preloaded (M <= 64, Hopper).

    Returns [M, N] in x.dtype, float32 partial sums [split_k, M, N] when the configuration
    splits K, or with gelu_mul (weight = [gate; up], [2F, K]) gelu_tanh(gate) * up, [M, F].
    """
    rows, depth = x.shape
    n_out = weight.shape[0] // 2 if gelu_mul else weight.shape[0]
    if (x.stride(-1) != 1 or not weight.is_contiguous() or weight.dtype != x.dtype
            or weight.shape[1] != depth or not supports(rows, weight, config, gelu_mul)):
        raise ValueError(f'preloaded_linear: {config} does not fit [{rows},{depth}] x '
                         f'{tuple(weight.shape)} (gelu_mul={gelu_mul})')
    partial = config.split_k > 1
    out = (torch.empty(config.split_k, rows, n_out, dtype=torch.float32, device=x.device)
           if partial else torch.empty(rows, n_out, dtype=x.dtype, device=x.device))
    dtype = _gl_dtype(x.dtype)
    x_layout = gl.NVMMASharedLayout.get_default_for([BLOCK_M, config.block_k], dtype)
    w_layout = gl.NVMMASharedLayout.get_default_for([config.block_n, config.block_k], dtype)
    x_desc = TensorDescriptor(x, [rows, depth], [x.stride(0), 1], [BLOCK_M, config.block_k],
                              x_layout)
    w_desc = TensorDescriptor(weight, list(weight.shape), [weight.stride(0), 1],
                              [config.block_n, config.block_k], w_layout)
    k_per_split = depth // config.split_k
    num_k = k_per_split // config.block_k
    pdl = kernels.use_pdl(x)
    _preloaded_linear_kernel[(n_out // config.block_n, config.split_k)](
        x_desc, w_desc, out, rows, k_per_split, n_out, n_out, rows * n_out,
        GELU_MUL=gelu_mul, PARTIAL=partial, NUM_K=num_k, X_STAGES=min(config.x_stages, num_k),
        USE_PDL=pdl, num_warps=4, launch_pdl=pdl)
    return out
