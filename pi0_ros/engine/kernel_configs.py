# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Launch configurations of the Triton kernels, as measured on an H200.

benchmarks/tune_kernels.py times the candidates inside CUDA graphs (how the engine runs them)
and prints the table these values come from. A shape that is not listed gets a heuristic.
"""

# Use programmatic dependent launch between the Triton kernels on Hopper and newer GPUs: the
# next kernel is launched while the current one finishes and waits (griddepcontrol.wait)
# before it touches memory, hiding the launch gap between the denoiser's ~1,800 kernels.
PDL = True

# With PDL: the short kernels named here ('norm', 'rope', 'merge', comma-separated; '' or None
# = none) let the next kernel launch before they wait for the previous one, so that the next
# kernel's work ahead of its own wait (the skinny GEMM's weight prefetch, the attention's K/V
# prefetch) starts one kernel sooner. H200 (session 13, engine_ab, same process): the add +
# RMSNorm kernels: denoise 5.854 -> 5.439 ms at batch 1 (p50 14.92 -> 14.52), 13.41 -> 13.47 at
# batch 8 (p50 69.47 both); RoPE and the attention's merge as well: 5.438 -> 5.490 at batch 1.
PDL_LAUNCH_FIRST = 'norm'

# With PDL: each skinny-GEMM program asks for its weight slab in L2 before it waits for the
# previous kernel (the weights do not depend on it), in launches of at most this many rows
# (0 = never). H200 (session 5, same call): on every launch, denoise 7.10 -> 6.82 ms at batch 1
# but 15.22 -> 15.43 ms at batch 8 (408-row launches), so batch 1's 51 rows only.
PREFETCH_WEIGHTS_MAX_ROWS = 64

# With PDL: the split-key (suffix) attention's first row block of each split asks for that
# split's keys and values in L2 before it waits for the previous kernel (the RoPE kernel), at
# batches up to this (0 = never): the prefix's cache rows (most likely evicted by the weights
# streamed since the last step; not measured directly) come from HBM while RoPE runs. H200
# (session 12, engine_ab, one call, two processes): denoise 6.100 -> 6.045 ms at batch 1
# (6.113 -> 6.045 with the cameras encoded ahead), 13.56 -> 13.46 ms at batch 8.
SUFFIX_KV_PREFETCH_MAX_BATCH = 8

# CUDA priority of the stream that runs the first denoising step under the prefix
# (EngineOptions.overlap_first_step): -1 = high, so its short kernels go before queued prefix
# blocks; 0 = the prefix's (default) priority. Read when the engine is built. H200 (session
# 14, engine_ab, same process): 0 instead of -1: prefix stage 5.578 -> 5.457 ms at batch 1
# (p50 13.99 -> 13.86), denoise unchanged, batch 8 p50 68.59 -> 68.60; reversed 5.496 against
# 5.611 (p50 14.24 / 14.37). The prefix's graph captured at high priority instead (its blocks
# first): prefix 5.498 -> 5.459 at batch 1, batch 8 p50 69.26 -> 69.38: not kept.
FIRST_STEP_STREAM_PRIORITY = 0

# PyTorch's BLAS library for the engine's half-precision cuBLAS GEMMs (the prefix and vision
# projections), set only while the engine captures or runs its stages (gemm.preferred_blas);
# None = PyTorch's default (cuBLAS). H200 (engine_ab, same process): cuBLASLt at batch 1
# 15.43 -> 15.25 and 15.39 -> 15.25 ms in session 8, 15.00 -> 14.96 in session 9 (prefix -0.05
# to -0.13 ms), batch 8 within noise (prefix -0.12 ms in session 9), no more memory.
BLAS_LIBRARY = 'cublaslt'

# The action side's float32 projections (action-time MLP, output head) as one skinny-kernel
# launch each (float32 accuracy from three TF32 products; bias, SiLU, the write into the
# residual stream and the Euler update in the epilogue) instead of cuBLAS + elementwise
# kernels. H200 (session 4): denoise 7.63 -> 7.11 ms at batch 1, 16.47 -> 16.07 at batch 8.
ACTION_LINEAR_TRITON = True


def _skinny(block_m, block_n, block_k, split_k, num_warps, num_stages) -> dict:
    return {'block_m': block_m, 'block_n': block_n, 'block_k': block_k, 'split_k': split_k,
            'num_warps': num_warps, 'num_stages': num_stages}


# With EngineOptions.prefix_fp8: the prefix MLP's down projection in FP8 as well (its input, the
# GELU * up product, quantized to FP8 rows by the same kernel that computes it), not only gate/up.
# Read when the weights are built. Not yet measured on a GPU.
FP8_PREFIX_DOWN = True


# Skinny GEMM (the action expert's projections, few rows): (n_out, k, gelu_mul) ->
# [(max_rows, config or None), ...] in increasing max_rows; the first entry that covers the row
# count is used; None (or no entry covering the rows) means cuBLAS was faster. A shape not
# listed gets gemm.heuristic_config. split_k > 1 writes float32 partial sums that the next
# fused kernel adds up.
# H200, bf16, run 10 (benchmarks/records/2026-12-03-kernel-tuning-h200/kernel_tuning.json); rows
# = 51 x batch. o at 51 rows from session 7's tuning with the weight prefetch (call2_gemm51.json;
# the other three kept their configurations): denoise 6.90 -> 6.87 ms at batch 1 in
# benchmarks/engine_ab.py (call3_ab_gemm_again.json; benchmarks/ledger.json record
# exp-frames-ahead-first-step-overlap). qkv at 51 rows split 2 instead of 4 since session 11
# (fewer partial sums for the RoPE kernel to add up; the tuner times the GEMM alone): denoise
# 6.20 -> 6.09 ms in two engine_ab processes (call6_*, call7_*), 6.18 -> 6.11 ms with the two
# swapped (call9_*; record exp-cluster-expert-split-counts).
SKINNY_LINEAR = {
    (2560, 1024, False): [(51, _skinny(64, 32, 64, 2, 4, 3)),                     # qkv
                          (102, _skinny(128, 64, 64, 2, 8, 4)), (408, None)],
    (1024, 2048, False): [(51, _skinny(64, 32, 64, 8, 4, 4)),                     # o
                          (102, _skinny(64, 64, 128, 4, 4, 4)),
                          (204, _skinny(128, 64, 64, 4, 8, 4)), (408, None)],
    (4096, 1024, True): [(51, _skinny(64, 32, 128, 1, 4, 4)),                     # gate_up
                         (102, _skinny(64, 64, 64, 1, 4, 4)), (408, None)],
    (1024, 4096, False): [(51, _skinny(64, 64, 128, 8, 4, 4)),                    # down
                          (102, _skinny(128, 64, 64, 8, 8, 4)),
                          (204, _skinny(128, 64, 128, 4, 8, 4)),
                          (408, _skinny(128, 64, 128, 2, 8, 4))],
}

# Split-K projections into the residual stream (the expert's o and down) of at most this many
# rows add their partial sums into the float32 stream with atomics, so the next add + RMSNorm
# reads one tensor instead of split_k partials. The atomics add in no fixed order, so repeated
# calls may differ in the last bits; 0 = never (the norm kernel adds the partials up in a fixed
# order: bit-reproducible). H200 (session 13, engine_ab, same process): denoise 6.050 -> 5.832
# ms at batch 1 (p50 14.78 -> 14.60), 7.71 -> 7.09 at batch 2, 9.72 -> 8.97 at batch 4,
# 13.865 -> 13.466 at batch 8 (p50 68.57 -> 68.09).
SKINNY_ATOMIC_MAX_ROWS = 512

# The expert's qkv projection and RoPE as one launch (gemm.qkv_rope: each program computes the
# two halves of a head's dims that RoPE pairs and writes q and the cache's k and v, instead of the
# skinny GEMM's partial sums and kernels.rope_qkv), at most this many rows (0 = never), with
# this launch configuration. H100 (2026-12-07, record qkv-rope-h100): at 51 rows (batch 1's
# denoising) 5.14 us against 5.76 for the skinny GEMM + rope_qkv (tune_kernels --only qkv_rope,
# best tile below); engine_ab at batch 1, same process, two runs: denoise 6.20 -> 5.89 and
# 6.19 -> 5.88 ms, p50 14.90 -> 14.52 and 15.03 -> 14.67 ms, cosine 1.000000. Batch 2 (102
# rows) is left to the skinny GEMM: not measured in the engine there.
QKV_ROPE_MAX_ROWS = 64
QKV_ROPE_CONFIG = _skinny(64, 16, 64, 1, 4, 4)

# Rows above which the action expert's projections go to cuBLAS instead (0 = never Triton).
SKINNY_LINEAR_MAX_ROWS = 512

# The GELU * up pass over a [rows, 2F] gate/up product (kernels.gelu_mul, where cuBLAS computed
# gate/up: the prefix MLP, the expert at large batches): columns per program and warps. H200
# (session 8, engine_ab at batch 8): 2048 x 4 warps and 4096 x 8 within noise of these.
GELU_MUL_BLOCK = 1024
GELU_MUL_WARPS = 4

# GELU * up GEMM (gemm.gelu_mul_gemm: many rows, TMA tiles, the GELU * up in the epilogue, so
# the [rows, 2F] gate/up product is never written): (F, k) -> [(max_rows, config or None), ...]
# as SKINNY_LINEAR; None, or rows beyond the last entry, = cuBLAS + the GELU * up kernel.
# H200 (session 5, call2_gelu_mul_tuning.json; benchmarks/ledger.json record
# exp-fp8-layers-prefetch-gelu-gemm): slower than cuBLAS + the GELU * up kernel at every size
# measured (prefix 816-13056 rows: 184 vs 163 us at 816, 1469 vs 1438 us at 6528; the expert's
# gate/up at 408 and 816 rows), so empty.
GELU_MUL_GEMM = {}


def _attention(block_m, block_n, keys_per_split, num_warps, num_stages, merge_rows=1) -> dict:
    return {'block_m': block_m, 'block_n': block_n, 'keys_per_split': keys_per_split,
            'num_warps': num_warps, 'num_stages': num_stages, 'merge_rows': merge_rows}


# Attention over one KV head: 'suffix' (the denoising tokens: few rows, keys split across
# programs, then merged) and 'prefix' (thousands of rows, one pass over the keys), each as
# [(max_batch, config), ...] in increasing max_batch: the first entry that covers the batch is
# used, the last one beyond it. keys_per_split 0 = no split. With more observations in a batch
# there are more programs per key, so fewer, longer splits pay (fewer float32 partials to merge).
# H200, bf16, run 10 (benchmarks/records/2026-12-03-kernel-tuning-h200/kernel_tuning.json);
# batch 8 from session 4's tuning with 8 warps among the candidates (19.9 vs 21.9 us;
# attention_tuning.json, benchmarks/ledger.json record exp-buckets-upload-ablation).
ATTENTION = {
    'suffix': [(1, _attention(32, 64, 128, 4, 2)), (2, _attention(64, 64, 128, 4, 2)),
               (4, _attention(64, 64, 256, 4, 2)), (8, _attention(128, 64, 256, 8, 2)),
               (16, _attention(64, 32, 0, 4, 3))],
    'prefix': [(1, _attention(64, 64, 0, 4, 2)), (16, _attention(128, 64, 0, 8, 2))],
    # SigLIP's 16 heads of 72 dims (padded to 128) over 256 tokens, by image count (more
    # images than the last entry: PyTorch's SDPA). H200 (session 14, engine_ab at batch 1, 3
    # images): vision 2.088 -> 2.075 ms with these tiles; 128 rows x 8 warps 2.093 -> 2.079,
    # 32 rows 2.098 -> 2.188, 128-key blocks 2.092 -> 2.141.
    'vision': [(3, _attention(64, 64, 0, 4, 2))],
}

# SigLIP's attention as one Triton launch (attention.self_attention: reads the fused qkv
# product in place, writes the heads side by side) instead of PyTorch's SDPA (cuDNN, with a
# memset node before each launch in the graphs), where ATTENTION['vision'] covers the image
# count. H200 (session 14, engine_ab): vision 2.095 -> 2.066 ms at batch 1 (3 cameras), one
# camera 1.327 -> 1.266 (encoded ahead: 1.736 -> 1.687 ms per camera); at batch 8 (24
# images) 12.11 -> 12.60, so SDPA there.
VISION_ATTENTION_TRITON = True


def attention_config(shape: str, batch: int, covered_only: bool = False) -> 'dict | None':
    """
    Return the ATTENTION launch configuration of one shape for a batch size.

    Beyond the last entry: that entry's, or None with covered_only.
    """
    table = ATTENTION[shape]
    return next((config for max_batch, config in table if batch <= max_batch),
                None if covered_only else table[-1][1])
