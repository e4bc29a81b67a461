# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Launch configurations of the Triton kernels, as measured on an H200.

benchmarks/tune_kernels.py times the candidates inside CUDA graphs (how the engine runs them)
and prints the table these values come from. A shape that is not listed gets a heuristic.
"""

# Skinny GEMM (the action expert's projections, few rows): (n_out, k, gelu_mul) ->
# [(max_rows, config or None), ...] in increasing max_rows; the first entry that covers the row
# count is used; None (or no entry covering the rows) means cuBLAS was faster. A shape not
# listed gets gemm.heuristic_config. split_k > 1 writes float32 partial sums that the next
# fused kernel adds up.
SKINNY_LINEAR = {}

# Rows above which the action expert's projections go to cuBLAS instead (0 = never Triton).
SKINNY_LINEAR_MAX_ROWS = 512

# Attention over one KV head: 'suffix' (the denoising tokens: few rows, keys split across
# programs, then merged) and 'prefix' (thousands of rows, one pass over the keys).
ATTENTION = {
    'suffix': {'block_m': 16, 'block_n': 64, 'keys_per_split': 256, 'num_warps': 8,
               'num_stages': 2},
    'prefix': {'block_m': 64, 'block_n': 64, 'keys_per_split': 0, 'num_warps': 8,
               'num_stages': 2},
}
