# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
One action-expert layer per launch: a persistent Triton kernel for the denoiser at batch 1.

At 51 rows the expert's layer is nine dependent kernels of a few microseconds each, more
latency than bytes (benchmarks/README.md). This kernel tries the other shape: one launch of
one program per SM runs the whole layer as phases, separated by grid-wide barriers (a counter
in memory that every program increments and then waits on):

  stats     (first layer of a step) row sums of squares of the residual stream, its half copy
  qkv       Q/K/V from the half residual; the RMS normalization as a row factor in the
            epilogue (its scale is folded into the weights), RoPE on Q and K (each program
            computes a column and its rotation partner, 128 apart), K/V into the cache
  attention Q over the prefix cache + the suffix keys, split over keys (attention.attend_block)
  merge     the splits into the attended rows (attention.merge_rows)
  o         the output projection added into the residual stream, whose tile's squares go
            into the row sums of the next normalization
  gate/up   GELU(gate) * up with the post-attention normalization as a row factor
  down      as o; its row sums feed the next layer's qkv phase
Each projection is tiled over its output columns and split over K; the program that finishes a
tile last (a counter per tile) adds up the tile's float32 partial sums and runs the epilogue.
Every program asks for all its weight tiles in L2 when it starts, so the layer's weights
stream from HBM while the phases wait on each other.

A barrier that does not complete (programs not co-resident: another kernel sharing the GPU)
gives up after a bounded wait and raises a flag; the denoiser then writes NaN into the chunk,
which the engine rejects. With phase >= 0 the kernel runs one phase per launch, without
barriers: how the CPU tests run it under Triton's interpreter (which runs programs one by one).

Measured on the H200 (benchmarks/ledger.json, exp-persistent-expert-layer): correct, and slower
than the stack of fused kernels (51.6 vs 36.9 us per layer at batch 1): each phase is still a chain
of dependent memory round trips, and a grid barrier (~0.9 us) costs no less than a PDL kernel
boundary (0.75 us). So kernel_configs.EXPERT_LAYER_MAX_ROWS keeps it off.
"""
from dataclasses import dataclass

import torch

from pi0_ros.engine import kernel_configs, kernels
from pi0_ros.engine.attention import LOG2E
from pi0_ros.engine.kernels import triton

PHASES = ('stats', 'qkv', 'attention', 'merge', 'o', 'gate_up', 'down')

if triton is not None:
    import triton.language as tl

    from pi0_ros.engine.attention import attend_block, merge_rows
    from pi0_ros.engine.kernels import gelu_tanh, pdl_enter, prefetch_l2

    MAX_POLLS = tl.constexpr(1 << 22)  # ~1 s of polling: far beyond any phase

    @triton.jit
    def _grid_sync(counter_ptr, error_ptr, expected):
        # All of this program's stores first, then arrive; wait until every program arrived.
        tl.debug_barrier()
        seen = tl.atomic_add(counter_ptr, 1, sem='acq_rel', scope='gpu') + 1
        polls = seen * 0
        while (seen < expected) & (polls < MAX_POLLS):
            seen = tl.atomic_add(counter_ptr, 0, sem='acquire', scope='gpu')
            polls += 1
        if seen < expected:
            tl.atomic_xchg(error_ptr, 1)
        tl.debug_barrier()

    @triton.jit
    def _phase_barrier(counter_ptr, error_ptr, barriers, programs, PHASE: tl.constexpr):
        # Between the phases of a whole layer (PHASE < 0); a single phase runs alone.
        if PHASE < 0:
            barriers += 1
            _grid_sync(counter_ptr, error_ptr, barriers * programs)
        return barriers

    @triton.jit
    def _prefetch_slab(w_ptr, stride_w, col0, k0, pair_offset, BLOCK_N: tl.constexpr,
                       LINES: tl.constexpr, LINE: tl.constexpr, PAIRED: tl.constexpr):
        # One address per 128-byte line of the slab [col0:col0+BLOCK_N, k0:k0+LINES*LINE].
        cols = (col0 + tl.arange(0, BLOCK_N)).to(tl.int64)
        lines = k0 + tl.arange(0, LINES) * LINE
        prefetch_l2(w_ptr + cols[:, None] * stride_w + lines[None, :])
        if PAIRED:
            prefetch_l2(w_ptr + (cols[:, None] + pair_offset) * stride_w + lines[None, :])

    @triton.jit
    def _rows_times_slab(a_ptr, stride_a, n_rows, w_ptr, stride_w, col0, k0, k_len,
                         pair_offset, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, PAIRED: tl.constexpr):
        # a[rows, k0:k0+k_len] @ w[cols, k0:k0+k_len]^T (and the columns pair_offset further).
        rows = tl.arange(0, BLOCK_M)
        row_ok = rows[:, None] < n_rows
        cols = (col0 + tl.arange(0, BLOCK_N)).to(tl.int64)
        depth = k0 + tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + rows[:, None] * stride_a + depth[None, :]
        w_ptrs = w_ptr + cols[:, None] * stride_w + depth[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        acc_pair = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for _ in range(0, k_len, BLOCK_K):
            a = tl.load(a_ptrs, mask=row_ok, other=0.0, cache_modifier='.cg')
            acc = tl.dot(a, tl.trans(tl.load(w_ptrs)), acc)
            if PAIRED:
                acc_pair = tl.dot(a, tl.trans(tl.load(w_ptrs + pair_offset * stride_w)),
                                  acc_pair)
            a_ptrs += BLOCK_K
            w_ptrs += BLOCK_K
        return acc, acc_pair

    @triton.jit
    def _row_factor(sumsq_ptr, n_rows, eps, WIDTH: tl.constexpr, BLOCK_M: tl.constexpr):
        # rsqrt(mean(x^2) + eps) of each row from its sum of squares.
        rows = tl.arange(0, BLOCK_M)
        sumsq = tl.load(sumsq_ptr + rows, mask=rows < n_rows, other=0.0, cache_modifier='.cg')
        return tl.rsqrt(sumsq / WIDTH + eps)

    @triton.jit
    def _sum_splits(acc, acc_pair, part_ptr, part_stride, count_ptr, split, offsets,
                    pair_offset, row_ok, SPLIT: tl.constexpr, PAIRED: tl.constexpr):
        # With SPLIT > 1 every split of a tile stores its partial sums and counts itself in; the
        # one that counts last gets the tile's sums (last = True; it resets the counter).
        last = split >= 0
        if SPLIT > 1:
            tl.store(part_ptr + split * part_stride + offsets, acc, mask=row_ok)
            if PAIRED:
                tl.store(part_ptr + split * part_stride + offsets + pair_offset, acc_pair,
                         mask=row_ok)
            tl.debug_barrier()
            last = tl.atomic_add(count_ptr, 1, sem='acq_rel', scope='gpu') == SPLIT - 1
            if last:
                acc = tl.zeros(acc.shape, tl.float32)
                acc_pair = tl.zeros(acc_pair.shape, tl.float32)
                for part in tl.static_range(SPLIT):
                    acc += tl.load(part_ptr + part * part_stride + offsets, mask=row_ok,
                                   other=0.0, cache_modifier='.cg')
                    if PAIRED:
                        acc_pair += tl.load(part_ptr + part * part_stride + offsets
                                            + pair_offset, mask=row_ok, other=0.0,
                                            cache_modifier='.cg')
                tl.atomic_xchg(count_ptr, 0)  # ready for the next launch
        return last, acc, acc_pair

    @triton.jit
    def _add_into_residual(acc, x_ptr, xh_ptr, sumsq_ptr, rows, offsets, n_rows):
        # x[:, tile] += the product; its half copy and the squares into the row sums follow.
        row_ok = rows[:, None] < n_rows
        x = tl.load(x_ptr + offsets, mask=row_ok, other=0.0, cache_modifier='.cg') + acc
        tl.store(x_ptr + offsets, x, mask=row_ok)
        tl.store(xh_ptr + offsets, x.to(xh_ptr.dtype.element_ty), mask=row_ok)
        tl.atomic_add(sumsq_ptr + rows, tl.sum(x * x, 1), mask=rows < n_rows, sem='relaxed',
                      scope='gpu')

    @triton.jit
    def _project_into_residual(a_ptr, w_ptr, depth, item, x_ptr, xh_ptr, sumsq_ptr, part_ptr,
                               count_ptr, rows, n_rows, WIDTH: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               BLOCK_K: tl.constexpr, SPLIT: tl.constexpr):
        # Item = (column tile, K split) of a [rows, depth] x [WIDTH, depth]^T projection whose
        # result goes into the residual stream (o and down).
        tile = item // SPLIT
        split = item % SPLIT
        acc, _ = _rows_times_slab(a_ptr, depth, n_rows, w_ptr, depth, tile * BLOCK_N,
                                  split * (depth // SPLIT), depth // SPLIT, 0, BLOCK_M, BLOCK_N,
                                  BLOCK_K, False)
        offsets = rows[:, None] * WIDTH + tile * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        last, acc, _ = _sum_splits(acc, acc, part_ptr, n_rows * WIDTH, count_ptr + tile, split,
                                   offsets, 0, rows[:, None] < n_rows, SPLIT, False)
        if last:
            _add_into_residual(acc, x_ptr, xh_ptr, sumsq_ptr, rows, offsets, n_rows)

    @triton.jit
    def _expert_layer_kernel(
            x_ptr, xh_ptr, sumsq_ptr, qkv_w, o_w, gate_up_w, down_w, cos_ptr, sin_ptr, q_ptr,
            k_ptr, v_ptr, stride_kb, stride_vb, bias_ptr, stride_bias_b, part_o_ptr,
            part_m_ptr, part_l_ptr, attended_ptr, hidden_ptr, part_ptr, count_ptr,
            barrier_ptr, error_ptr, n_rows, seq, start, n_keys, keys_per_split, scale_log2,
            eps, WIDTH: tl.constexpr, HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
            MLP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N_QKV: tl.constexpr,
            QKV_SPLIT: tl.constexpr, BLOCK_N_O: tl.constexpr, O_SPLIT: tl.constexpr,
            BLOCK_N_MLP: tl.constexpr, MLP_SPLIT: tl.constexpr, DOWN_SPLIT: tl.constexpr,
            BLOCK_K: tl.constexpr, ATT_BLOCK_M: tl.constexpr, ATT_BLOCK_N: tl.constexpr,
            N_SPLITS: tl.constexpr, MERGE_ROWS: tl.constexpr, BLOCK_WIDTH: tl.constexpr,
            FIRST: tl.constexpr, PHASE: tl.constexpr, WORK: tl.constexpr, PREFETCH: tl.constexpr,
            LINE: tl.constexpr, USE_PDL: tl.constexpr):
        pid = tl.program_id(0)
        programs = tl.num_programs(0)
        HALF: tl.constexpr = HEAD_DIM // 2
        ATTENDED: tl.constexpr = HEADS * HEAD_DIM
        QKV_N: tl.constexpr = (HEADS + 2) * HEAD_DIM
        QKV_TILES: tl.constexpr = (HEADS + 2) * (HALF // BLOCK_N_QKV)
        O_TILES: tl.constexpr = WIDTH // BLOCK_N_O
        MLP_TILES: tl.constexpr = MLP // BLOCK_N_MLP
        # Tile counters of the split-K phases, one region each.
        qkv_counts = count_ptr
        o_counts = count_ptr + QKV_TILES
        mlp_counts = o_counts + O_TILES
        down_counts = mlp_counts + MLP_TILES
        sumsq_a = sumsq_ptr            # before qkv (written by down / stats)
        sumsq_b = sumsq_ptr + BLOCK_M  # before gate/up (written by o)
        batches = n_rows // seq
        n_queries = seq * HEADS
        rows = tl.arange(0, BLOCK_M)
        row_ok = rows[:, None] < n_rows
        if PREFETCH:
            # This program's weight tiles of every phase, asked for in L2 before anything waits.
            for item in range(pid, QKV_TILES * QKV_SPLIT, programs):
                tile = item // QKV_SPLIT
                col0 = (tile // (HALF // BLOCK_N_QKV)) * HEAD_DIM \
                    + (tile % (HALF // BLOCK_N_QKV)) * BLOCK_N_QKV
                _prefetch_slab(qkv_w, WIDTH, col0, (item % QKV_SPLIT) * (WIDTH // QKV_SPLIT),
                               HALF, BLOCK_N_QKV, WIDTH // QKV_SPLIT // LINE, LINE, True)
            for item in range(pid, O_TILES * O_SPLIT, programs):
                _prefetch_slab(o_w, ATTENDED, (item // O_SPLIT) * BLOCK_N_O,
                               (item % O_SPLIT) * (ATTENDED // O_SPLIT), 0, BLOCK_N_O,
                               ATTENDED // O_SPLIT // LINE, LINE, False)
            for item in range(pid, MLP_TILES * MLP_SPLIT, programs):
                _prefetch_slab(gate_up_w, WIDTH, (item // MLP_SPLIT) * BLOCK_N_MLP,
                               (item % MLP_SPLIT) * (WIDTH // MLP_SPLIT), MLP, BLOCK_N_MLP,
                               WIDTH // MLP_SPLIT // LINE, LINE, True)
            for item in range(pid, O_TILES * DOWN_SPLIT, programs):
                _prefetch_slab(down_w, MLP, (item // DOWN_SPLIT) * BLOCK_N_O,
                               (item % DOWN_SPLIT) * (MLP // DOWN_SPLIT), 0, BLOCK_N_O,
                               MLP // DOWN_SPLIT // LINE, LINE, False)
        pdl_enter(USE_PDL)
        # WORK: the phases that do their work (bit k: phase k); all but in the phase ablation
        # of benchmarks/expert_layer_phases.py, which leaves some out and keeps the barriers.
        barriers = 0
        if FIRST and (PHASE < 0 or PHASE == 0):
            if (WORK >> 0) & 1:
                # stats: each row's sum of squares and half copy of the residual stream.
                columns = tl.arange(0, BLOCK_WIDTH)
                for row in range(pid, n_rows, programs):
                    x = tl.load(x_ptr + row * WIDTH + columns, mask=columns < WIDTH, other=0.0)
                    tl.store(xh_ptr + row * WIDTH + columns, x.to(xh_ptr.dtype.element_ty),
                             mask=columns < WIDTH)
                    tl.store(sumsq_a + row, tl.sum(x * x, 0))
            barriers = _phase_barrier(barrier_ptr, error_ptr, barriers, programs, PHASE)
        if PHASE < 0 or PHASE == 1:
            if (WORK >> 1) & 1:
                # qkv: normalized rows x [Q | K | V], RoPE, K/V into the cache. A tile is
                # BLOCK_N_QKV columns of a head and their rotation partners HALF further.
                if pid == 0:
                    tl.store(sumsq_b + rows, tl.zeros((BLOCK_M,), tl.float32))
                factor = _row_factor(sumsq_a, n_rows, eps, WIDTH, BLOCK_M)[:, None]
                batch = (rows // seq)[:, None]
                position = (rows % seq)[:, None]
                depth = WIDTH // QKV_SPLIT
                for item in range(pid, QKV_TILES * QKV_SPLIT, programs):
                    tile = item // QKV_SPLIT
                    split = item % QKV_SPLIT
                    part = tile // (HALF // BLOCK_N_QKV)
                    j0 = (tile % (HALF // BLOCK_N_QKV)) * BLOCK_N_QKV
                    j = j0 + tl.arange(0, BLOCK_N_QKV)[None, :]
                    first, second = _rows_times_slab(xh_ptr, WIDTH, n_rows, qkv_w, WIDTH,
                                                     part * HEAD_DIM + j0, split * depth,
                                                     depth, HALF, BLOCK_M, BLOCK_N_QKV,
                                                     BLOCK_K, True)
                    last, first, second = _sum_splits(
                        first, second, part_ptr, n_rows * QKV_N, qkv_counts + tile, split,
                        rows[:, None] * QKV_N + part * HEAD_DIM + j, HALF, row_ok, QKV_SPLIT,
                        True)
                    if last:
                        first *= factor
                        second *= factor
                        if part <= HEADS:  # Q heads and K: rotate-half RoPE
                            cos = tl.load(cos_ptr + rows[:, None] * HALF + j, mask=row_ok,
                                          other=0.0)
                            sin = tl.load(sin_ptr + rows[:, None] * HALF + j, mask=row_ok,
                                          other=0.0)
                            first, second = (first * cos - second * sin,
                                             second * cos + first * sin)
                        if part < HEADS:
                            out = q_ptr + rows[:, None] * ATTENDED + part * HEAD_DIM + j
                        elif part == HEADS:
                            out = k_ptr + batch * stride_kb + (start + position) * HEAD_DIM + j
                        else:
                            out = v_ptr + batch * stride_vb + (start + position) * HEAD_DIM + j
                        tl.store(out, first.to(out.dtype.element_ty), mask=row_ok)
                        tl.store(out + HALF, second.to(out.dtype.element_ty), mask=row_ok)
            barriers = _phase_barrier(barrier_ptr, error_ptr, barriers, programs, PHASE)
        if PHASE < 0 or PHASE == 2:
            if (WORK >> 2) & 1:
                # attention: query rows (token * HEADS + head) over key splits.
                row_blocks = tl.cdiv(n_queries, ATT_BLOCK_M)
                for item in range(pid, batches * row_blocks * N_SPLITS, programs):
                    attend_block(q_ptr, k_ptr, v_ptr, bias_ptr, attended_ptr, part_o_ptr,
                                 part_m_ptr, part_l_ptr, item % row_blocks,
                                 (item // row_blocks) % N_SPLITS,
                                 item // (row_blocks * N_SPLITS), N_SPLITS, n_queries, n_keys,
                                 keys_per_split, scale_log2, HEADS, start + 1,
                                 n_queries * HEAD_DIM, HEAD_DIM, stride_kb, HEAD_DIM,
                                 stride_vb, HEAD_DIM, stride_bias_b, n_queries * HEAD_DIM,
                                 HEAD_DIM, HEAD_DIM, ATT_BLOCK_M, ATT_BLOCK_N, N_SPLITS > 1,
                                 '.cg')
            barriers = _phase_barrier(barrier_ptr, error_ptr, barriers, programs, PHASE)
        if N_SPLITS > 1 and (PHASE < 0 or PHASE == 3):
            if (WORK >> 3) & 1:
                # merge: MERGE_ROWS query rows per item, all their splits' loads in flight.
                row_blocks = tl.cdiv(n_queries, MERGE_ROWS)
                for item in range(pid, batches * row_blocks, programs):
                    merge_rows(part_o_ptr, part_m_ptr, part_l_ptr, attended_ptr,
                               (item % row_blocks) * MERGE_ROWS, item // row_blocks,
                               n_queries, n_queries * HEAD_DIM, HEAD_DIM, N_SPLITS, HEAD_DIM,
                               MERGE_ROWS, '.cg')
            barriers = _phase_barrier(barrier_ptr, error_ptr, barriers, programs, PHASE)
        if PHASE < 0 or PHASE == 4:
            if (WORK >> 4) & 1:
                # o: attended rows x W_o, into the residual stream; row sums for gate/up.
                for item in range(pid, O_TILES * O_SPLIT, programs):
                    _project_into_residual(attended_ptr, o_w, ATTENDED, item, x_ptr, xh_ptr,
                                           sumsq_b, part_ptr, o_counts, rows, n_rows, WIDTH,
                                           BLOCK_M, BLOCK_N_O, BLOCK_K, O_SPLIT)
            barriers = _phase_barrier(barrier_ptr, error_ptr, barriers, programs, PHASE)
        if PHASE < 0 or PHASE == 5:
            if (WORK >> 5) & 1:
                # gate/up: GELU(gate) * up of the normalized rows.
                if pid == 0:
                    tl.store(sumsq_a + rows, tl.zeros((BLOCK_M,), tl.float32))
                factor = _row_factor(sumsq_b, n_rows, eps, WIDTH, BLOCK_M)[:, None]
                depth = WIDTH // MLP_SPLIT
                for item in range(pid, MLP_TILES * MLP_SPLIT, programs):
                    tile = item // MLP_SPLIT
                    split = item % MLP_SPLIT
                    gate, up = _rows_times_slab(xh_ptr, WIDTH, n_rows, gate_up_w, WIDTH,
                                                tile * BLOCK_N_MLP, split * depth, depth, MLP,
                                                BLOCK_M, BLOCK_N_MLP, BLOCK_K, True)
                    cols = tile * BLOCK_N_MLP + tl.arange(0, BLOCK_N_MLP)[None, :]
                    last, gate, up = _sum_splits(gate, up, part_ptr, n_rows * 2 * MLP,
                                                 mlp_counts + tile, split,
                                                 rows[:, None] * 2 * MLP + cols, MLP, row_ok,
                                                 MLP_SPLIT, True)
                    if last:
                        hidden = gelu_tanh(gate * factor) * (up * factor)
                        tl.store(hidden_ptr + rows[:, None] * MLP + cols,
                                 hidden.to(hidden_ptr.dtype.element_ty), mask=row_ok)
            barriers = _phase_barrier(barrier_ptr, error_ptr, barriers, programs, PHASE)
        if PHASE < 0 or PHASE == 6:
            if (WORK >> 6) & 1:
                # down: hidden x W_down, into the residual stream; row sums for the next qkv.
                for item in range(pid, O_TILES * DOWN_SPLIT, programs):
                    _project_into_residual(hidden_ptr, down_w, MLP, item, x_ptr, xh_ptr,
                                           sumsq_a, part_ptr, down_counts, rows, n_rows, WIDTH,
                                           BLOCK_M, BLOCK_N_O, BLOCK_K, DOWN_SPLIT)


@dataclass(frozen=True)
class ExpertLayerConfig:
    """Tiles of the expert-layer kernel (kernel_configs.EXPERT_LAYER)."""

    block_n_qkv: int = 16
    qkv_split: int = 1
    block_n_o: int = 16
    o_split: int = 2
    block_n_mlp: int = 32
    mlp_split: int = 1
    down_split: int = 2
    block_k: int = 128
    att_block_m: int = 32
    att_block_n: int = 64
    keys_per_split: int = 128
    merge_rows: int = 4
    prefetch: bool = True
    num_warps: int = 8
    num_stages: int = 3


def config() -> ExpertLayerConfig:
    """Return the configuration in kernel_configs.EXPERT_LAYER."""
    return ExpertLayerConfig(**kernel_configs.EXPERT_LAYER)


def supported(layers: list, rows: int, width: int, heads: int, head_dim: int, mlp: int,
              dtype: torch.dtype, device: torch.device, cfg: ExpertLayerConfig = None) -> bool:
    """Tell whether the expert-layer kernel runs for this stack and row count."""
    cfg = cfg or config()
    half = head_dim // 2
    sizes = (head_dim, cfg.block_n_qkv, cfg.block_n_o, cfg.block_n_mlp, cfg.block_k,
             cfg.merge_rows)
    on_device = (device.type == 'cuda' and triton is not None) or kernels.INTERPRET_ON_CPU
    return (on_device and all(n & (n - 1) == 0 for n in sizes)
            and dtype in (torch.float16, torch.bfloat16)
            and 0 < rows <= kernel_configs.EXPERT_LAYER_MAX_ROWS
            and half % cfg.block_n_qkv == 0 and width % cfg.block_n_o == 0
            and mlp % cfg.block_n_mlp == 0
            and all(depth % (split * cfg.block_k) == 0 for depth, split in _split_depths(
                cfg, width, heads * head_dim, mlp))
            and all(isinstance(w, torch.Tensor) and w.dtype == dtype
                    for layer in layers
                    for w in (layer.qkv_w, layer.out_w, layer.gate_up_w, layer.down_w)))


def _split_depths(cfg: ExpertLayerConfig, width: int, attended: int, mlp: int) -> tuple:
    """(K, split) of the four projections: qkv, o, gate/up, down."""
    return ((width, cfg.qkv_split), (attended, cfg.o_split), (width, cfg.mlp_split),
            (mlp, cfg.down_split))


def sync_buffer(launches: int, device: torch.device) -> torch.Tensor:
    """Zeroed int32 [1 + launches]: the error flag, then one barrier counter per launch."""
    return torch.zeros(1 + launches, dtype=torch.int32, device=device)


def num_programs(device: torch.device) -> int:
    """Return the grid: one program per SM (all must be resident at once for the barriers)."""
    if device.type != 'cuda':
        return 3  # the interpreter: a few programs, each taking several items
    return torch.cuda.get_device_properties(device).multi_processor_count


@dataclass
class Workspace:
    """Scratch of expert_stack for one shape: allocate once, use for every Euler step."""

    xh: torch.Tensor        # the residual stream in the compute dtype [rows, W]
    sumsq: torch.Tensor     # row sums of squares, two sets [2 * block_m]
    queries: torch.Tensor   # rotated queries [rows, heads * head_dim]
    attended: torch.Tensor  # attention output [rows, heads * head_dim]
    hidden: torch.Tensor    # GELU(gate) * up [rows, mlp]
    part_o: torch.Tensor    # attention split partials: o [b, splits, queries, head_dim],
    part_m: torch.Tensor    # running max and sum [b, splits, queries]
    part_l: torch.Tensor
    part: torch.Tensor      # split-K partial sums of the projections (float32)
    counts: torch.Tensor    # per-tile counters (zeroed; each launch leaves them zeroed)


def workspace(layers: list, x: torch.Tensor, heads: int, head_dim: int, start: int,
              cfg: ExpertLayerConfig = None) -> Workspace:
    """Allocate expert_stack's scratch for the residual stream x [b, S, W] and start keys."""
    cfg = cfg or config()
    b, seq, width = x.shape
    rows = b * seq
    mlp = layers[0].down_w.shape[1]
    dtype = layers[0].qkv_w.dtype
    n_splits = triton.cdiv(start + seq, min(cfg.keys_per_split, start + seq))
    n_queries = seq * heads
    device = x.device
    queries = torch.empty(rows, heads * head_dim, dtype=dtype, device=device)
    part_m = torch.empty(b, n_splits, n_queries, dtype=torch.float32, device=device)
    return Workspace(
        xh=torch.empty(rows, width, dtype=dtype, device=device),
        sumsq=torch.empty(2 * max(16, triton.next_power_of_2(rows)), dtype=torch.float32,
                          device=device),
        queries=queries, attended=torch.empty_like(queries),
        hidden=torch.empty(rows, mlp, dtype=dtype, device=device),
        part_o=torch.empty(b, n_splits, n_queries, head_dim, dtype=torch.float32,
                           device=device),
        part_m=part_m, part_l=torch.empty_like(part_m),
        part=torch.empty(max(cfg.qkv_split * (heads + 2) * head_dim, cfg.o_split * width,
                             cfg.mlp_split * 2 * mlp, cfg.down_split * width) * rows,
                         dtype=torch.float32, device=device),
        counts=torch.zeros((heads + 2) * (head_dim // 2 // cfg.block_n_qkv)
                           + 2 * (width // cfg.block_n_o) + mlp // cfg.block_n_mlp,
                           dtype=torch.int32, device=device))


def expert_stack(layers: list, x: torch.Tensor, eps: float, heads: int, head_dim: int,
                 cos: torch.Tensor, sin: torch.Tensor, cache_k: torch.Tensor,
                 cache_v: torch.Tensor, start: int, bias: torch.Tensor, sync: torch.Tensor,
                 first_launch: int, cfg: ExpertLayerConfig = None, phased: bool = None,
                 work: int = (1 << len(PHASES)) - 1, scratch: Workspace = None,
                 before_layer=None) -> None:
    """
    Run the expert layers over the residual stream x [b, S, W] float32 (in place).

    Writes each layer's suffix K/V into cache_k/v[layer, :b, 0, start:start+S] and attends
    over positions 0..start+S with the additive key bias [b, start+S]; the state token (first
    of each observation) sees only keys up to start. sync holds the error flag and barrier
    counters (sync_buffer); this call uses counters first_launch.. (one per layer). scratch
    (workspace(), same shapes and cfg) is allocated here when not given. phased runs one
    launch per phase (the interpreter's way; by default on the CPU only). work (a bit per
    phase) leaves phases out, for timing only. before_layer(index) is called before each
    layer's launch is queued.
    """
    cfg = cfg or config()
    scratch = scratch or workspace(layers, x, heads, head_dim, start, cfg)
    b, seq, width = x.shape
    rows = b * seq
    layer0 = layers[0]
    mlp = layer0.down_w.shape[1]
    n_keys = start + seq
    keys_per_split = min(cfg.keys_per_split, n_keys)
    n_splits = scratch.part_o.shape[1]
    block_m = scratch.sumsq.numel() // 2
    phased = (not x.is_cuda) if phased is None else phased
    device = x.device
    programs = num_programs(device)
    pdl = kernels.use_pdl(x) and not phased
    line = 128 // layer0.qkv_w.element_size()
    # Prefetch in whole 128-byte lines, a power of two of them per weight row slab.
    prefetch = cfg.prefetch and x.is_cuda and all(
        (depth // split) % line == 0 and (depth // split // line) & (depth // split // line - 1)
        == 0 for depth, split in _split_depths(cfg, width, heads * head_dim, mlp))
    for index, layer in enumerate(layers):
        if before_layer is not None:
            before_layer(index)
        keys = cache_k[index, :, 0]
        values = cache_v[index, :, 0]
        for phase in (range(len(PHASES)) if phased else (-1,)):
            if phase == 0 and index > 0:
                continue
            _expert_layer_kernel[(programs,)](
                x, scratch.xh, scratch.sumsq, layer.qkv_w, layer.out_w, layer.gate_up_w,
                layer.down_w, cos, sin, scratch.queries, keys, values, keys.stride(0),
                values.stride(0), bias, bias.stride(0), scratch.part_o, scratch.part_m,
                scratch.part_l, scratch.attended, scratch.hidden, scratch.part, scratch.counts,
                sync[1 + first_launch + index:], sync, rows, seq, start, n_keys,
                keys_per_split, head_dim ** -0.5 * LOG2E, eps, WIDTH=width, HEADS=heads,
                HEAD_DIM=head_dim, MLP=mlp, BLOCK_M=block_m, BLOCK_N_QKV=cfg.block_n_qkv,
                QKV_SPLIT=cfg.qkv_split, BLOCK_N_O=cfg.block_n_o, O_SPLIT=cfg.o_split,
                BLOCK_N_MLP=cfg.block_n_mlp, MLP_SPLIT=cfg.mlp_split,
                DOWN_SPLIT=cfg.down_split, BLOCK_K=cfg.block_k, ATT_BLOCK_M=cfg.att_block_m,
                ATT_BLOCK_N=min(cfg.att_block_n, triton.next_power_of_2(keys_per_split)),
                N_SPLITS=n_splits, MERGE_ROWS=cfg.merge_rows,
                BLOCK_WIDTH=triton.next_power_of_2(width), FIRST=index == 0, PHASE=phase,
                WORK=work, PREFETCH=prefetch, LINE=line, USE_PDL=pdl, num_warps=cfg.num_warps,
                num_stages=cfg.num_stages, launch_pdl=pdl)


def poison_on_error(sync: torch.Tensor, out: torch.Tensor) -> None:
    """Fill out with NaN if any barrier gave up (the chunk is then rejected, never used)."""
    out.masked_fill_(sync[:1].bool().view(*([1] * out.dim())), float('nan'))
