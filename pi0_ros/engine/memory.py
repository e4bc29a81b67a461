# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
GPU memory of a Pi0Engine before it is built, and the largest batch bucket a budget allows.

The estimate has four parts:
  weights    the fused weights, counted by building them on PyTorch's meta device (exact)
  buffers    the per-batch device buffers the engine preallocates (exact, the same table
             Pi0Engine allocates from: engine.device_buffer_shapes)
  workspace  the largest set of activations alive at once inside one stage (vision, prefix or
             denoise) at the largest bucket, counted from the stage code's tensors
  fixed      the cuBLAS workspaces, and the frame-resize scratch where Triton is missing
Memory is what PyTorch's allocator hands out (torch.cuda.max_memory_allocated), not the CUDA
context, which every process on the GPU pays once.
"""
from dataclasses import asdict, dataclass, replace
import math

import torch

from pi0_ros.engine import gemm, kernel_configs, kernels
from pi0_ros.engine.config import EngineOptions, ModelDims
from pi0_ros.engine.engine import batch_buckets, device_buffer_shapes
from pi0_ros.engine.errors import EngineError
from pi0_ros.engine.model import build_weights, lerobot_parameter_shapes

GIB = 2 ** 30
# cuBLAS / cuBLASLt workspaces, which PyTorch allocates through its caching allocator, one per
# stream the engine runs on (the caller's stream and the engine's capture stream, and the
# stream of the overlapped first denoising step).
CUBLAS_WORKSPACE_BYTES_PER_STREAM = 64 << 20
# Denoiser split-K and attention partial sums: upper bounds of kernel_configs' splits.
MAX_GEMM_SPLITS = 8
MAX_ATTENTION_SPLITS = 16


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated GPU memory of one engine, in bytes."""

    weights: int
    buffers: int
    workspace: int
    fixed: int

    @property
    def total(self) -> int:
        """Return the sum of the parts."""
        return self.weights + self.buffers + self.workspace + self.fixed

    def as_gib(self) -> dict:
        """Return the parts and the total in GiB (for reports)."""
        parts = {name: value / GIB for name, value in asdict(self).items()}
        parts['total'] = self.total / GIB
        return parts


def _nbytes(shape, dtype: torch.dtype) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def weight_bytes(dims: ModelDims, num_cameras: int, dtype: torch.dtype,
                 prefix_fp8: bool = False, prefix_fp8_layers=()) -> int:
    """Bytes of the fused weights, built on the meta device (no memory used)."""
    shapes = lerobot_parameter_shapes(dims)
    prefix_length = num_cameras * dims.tokens_per_image + dims.tokenizer_max_length
    weights = build_weights(lambda key: torch.empty(shapes[key], device='meta'), dims, dtype,
                            torch.device('meta'), prefix_length, prefix_fp8=prefix_fp8,
                            prefix_fp8_layers=prefix_fp8_layers)
    return sum(t.numel() * t.element_size() for t in weights.tensors())


def buffer_bytes(dims: ModelDims, num_cameras: int, options: EngineOptions,
                 dtype: torch.dtype) -> int:
    """Bytes of the preallocated per-batch device buffers."""
    shapes = device_buffer_shapes(dims, num_cameras, options.max_batch,
                                  options.max_frame_height, options.max_frame_width, dtype)
    return sum(_nbytes(shape, dt) for shape, dt in shapes.values())


def _gemma_layer_peak(rows: int, width: int, mlp: int, heads: int, head_dim: int,
                      dtype: torch.dtype, fp8_mlp: bool = False) -> int:
    """
    Bytes one layer of model._gemma_stack holds beyond the stack's own buffers.

    Its temporaries in order (each released once consumed): fused QKV; attention output and
    its projection; gate/up and GELU(gate) * up (only the latter where the GELU * up GEMM
    runs, never with the FP8 MLP); the down projection. With the skinny GEMM (few rows)
    projections are float32 split-K partial sums instead, and GELU * up is fused.
    """
    half = torch.empty((), dtype=dtype).element_size()
    if rows > kernel_configs.SKINNY_LINEAR_MAX_ROWS:  # cuBLAS: outputs in the compute dtype
        fused = (not fp8_mlp and dtype != torch.float32 and kernels.tma_available()
                 and gemm.gelu_mul_gemm_config(rows, mlp, width) is not None)
        return rows * half * max((heads + 2) * head_dim, heads * head_dim + width,
                                 mlp if fused else 3 * mlp, mlp + width)
    f32, splits = 4, MAX_GEMM_SPLITS
    return rows * max(splits * (heads + 2) * head_dim * f32,
                      heads * head_dim * half + splits * width * f32,
                      mlp * half + splits * width * f32)


def workspace_bytes(dims: ModelDims, num_cameras: int, batch: int, dtype: torch.dtype,
                    prefix_fp8: bool = False, overlap_first_step: bool = False) -> int:
    """
    Largest set of temporaries one stage holds at once for `batch` observations.

    With overlap_first_step the prefix stage holds a denoising step's temporaries as well.
    """
    d = dims
    half = torch.empty((), dtype=dtype).element_size()
    f32 = 4
    # Vision (model.vision_forward): every camera image of the batch at once. The float32
    # residual stream and the normalized copy live throughout; per layer QKV, the attention
    # output and its token-major copy, then fc1 + GELU (one cuBLASLt call) and fc2.
    tokens = batch * num_cameras * d.tokens_per_image
    w, m = d.vision_width, d.vision_mlp_dim
    # the patches and their embedding (half), + positions (float32)
    embed = tokens * (3 * d.patch_size ** 2 * half + w * (half + f32))
    layer = tokens * half * (w + max(5 * w, m + w))  # the last fc2 output + the largest step
    vision = tokens * w * (f32 + half) + max(embed, layer, tokens * d.prefix_width * half)
    # Prefix (model.prefix_forward): float32 stream, normalized copy, queries, RoPE tables.
    length = num_cameras * d.tokens_per_image + d.tokenizer_max_length
    hd = d.head_dim
    rows = batch * length
    prefix = (rows * (d.prefix_width * (f32 + half) + d.prefix_heads * hd * half + hd * f32)
              + batch * length * f32
              + (rows * (d.prefix_width + f32) if prefix_fp8 else 0)  # FP8 rows + row scales
              + _gemma_layer_peak(rows, d.prefix_width, d.prefix_mlp_dim, d.prefix_heads, hd,
                                  dtype, fp8_mlp=prefix_fp8))
    # Denoise (model.denoise_forward): the same per layer over the suffix, plus the Euler
    # state, the expert's float32 output and attention's split partial sums.
    rows = batch * (d.chunk_size + 1)
    attention_partials = MAX_ATTENTION_SPLITS * rows * d.expert_heads * (hd + 2) * f32
    denoise = (rows * (d.expert_width * (3 * f32 + half) + d.expert_heads * hd * half
                       + hd * f32 + 4 * d.max_action_dim * f32)
               + batch * (length + d.chunk_size + 1) * f32 + attention_partials
               + _gemma_layer_peak(rows, d.expert_width, d.expert_mlp_dim, d.expert_heads, hd,
                                   dtype))
    return max(vision, prefix + (denoise if overlap_first_step else 0), denoise)


def fixed_bytes(options: EngineOptions, dims: ModelDims) -> int:
    """Return the bytes of the cuBLAS workspaces and frame-resize scratch (batch-independent)."""
    size = dims.image_size
    # Only the PyTorch resize has scratch (preprocess.FrameResizer); the Triton kernel has none.
    resize = (0 if kernels.triton is not None else
              2 * options.max_frame_height * size * 3 * (1 + 4) + 2 * size * size * 3 * 4)
    streams = 3 if options.overlap_first_step else 2
    return resize + streams * CUBLAS_WORKSPACE_BYTES_PER_STREAM


def estimate_memory(dims: ModelDims, num_cameras: int, options: EngineOptions,
                    dtype: torch.dtype) -> MemoryEstimate:
    """Estimate the GPU memory of an engine built with these options (largest bucket used)."""
    largest = batch_buckets(options.max_batch, options.batch_buckets)[-1]
    return MemoryEstimate(
        weights=weight_bytes(dims, num_cameras, dtype, options.prefix_fp8,
                             options.prefix_fp8_layers),
        buffers=buffer_bytes(dims, num_cameras, options, dtype),
        workspace=workspace_bytes(dims, num_cameras, largest, dtype, options.prefix_fp8,
                                  options.overlap_first_step),
        fixed=fixed_bytes(options, dims))


def plan_max_batch(budget_bytes: int, dims: ModelDims, num_cameras: int,
                   options: EngineOptions, dtype: torch.dtype, limit: int = 64) -> int:
    """
    Return the largest max_batch (a power of two up to limit) whose estimate fits the budget.

    Raises EngineError when even batch 1 does not fit (the message gives the estimate), and
    ValueError for a limit below 1.
    """
    if limit < 1:
        raise ValueError(f'limit must be >= 1, got {limit}')
    best = None
    size = 1
    while size <= limit:
        candidate = replace(options, max_batch=size, batch_buckets=())
        estimate = estimate_memory(dims, num_cameras, candidate, dtype)
        if estimate.total > budget_bytes:
            break
        best = size
        size *= 2
    if best is None:
        needed = estimate_memory(dims, num_cameras,
                                 replace(options, max_batch=1, batch_buckets=()), dtype)
        raise EngineError(f'a memory budget of {budget_bytes / GIB:.2f} GiB does not fit batch 1 '
                          f'(estimated {needed.total / GIB:.2f} GiB)')
    return best


__all__ = ['MemoryEstimate', 'estimate_memory', 'plan_max_batch', 'weight_bytes',
           'buffer_bytes', 'workspace_bytes', 'fixed_bytes']
