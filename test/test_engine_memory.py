# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The memory planner: exact weight and buffer counts, the workspace model, bucket choice."""
import numpy as np
import pytest
import torch

from pi0_ros.engine import EngineError, EngineOptions, ModelDims, Pi0Engine
from pi0_ros.engine.engine import device_buffer_shapes
from pi0_ros.engine.memory import (buffer_bytes, estimate_memory, GIB, plan_max_batch,
                                   weight_bytes, workspace_bytes)

TINY = ModelDims.tiny()
FULL = ModelDims.full()


def test_weight_bytes_match_a_built_engine():
    options = EngineOptions(device='cpu', max_batch=3, max_frame_height=240,
                            max_frame_width=320)
    engine = Pi0Engine.random(TINY, state_dim=6, action_dim=5, num_cameras=2, options=options)
    built = sum(t.numel() * t.element_size() for t in engine.weights.tensors())
    assert weight_bytes(TINY, 2, torch.float32) == built
    shapes = device_buffer_shapes(TINY, 2, 3, 240, 320, torch.float32)
    held = sum(getattr(engine, name).numel() * getattr(engine, name).element_size()
               for name in shapes)
    assert buffer_bytes(TINY, 2, options, torch.float32) == held
    engine.close()


def test_full_model_weights_and_fp8_prefix_mlp():
    bf16 = weight_bytes(FULL, 3, torch.bfloat16)
    # Pi0 is ~3.1 B parameters in half precision (the last prefix layer keeps only K/V).
    assert 5.7 * GIB < bf16 < 6.0 * GIB
    prefix = weight_bytes(FULL, 3, torch.bfloat16, prefix_fp8=True)
    mlps = FULL.prefix_depth - 1  # the last prefix layer keeps only K/V
    saved = mlps * (3 * FULL.prefix_width * FULL.prefix_mlp_dim  # gate/up and down, 1 byte less
                    - 4 * (2 * FULL.prefix_mlp_dim + FULL.prefix_width))  # float32 scales
    assert bf16 - prefix == saved
    half = weight_bytes(FULL, 3, torch.bfloat16, prefix_fp8=True,
                        prefix_fp8_layers=tuple(range(0, mlps, 2)))
    assert bf16 - half == saved // mlps * len(range(0, mlps, 2))


def test_workspace_is_linear_in_the_batch_and_dominated_by_the_prefix_mlp():
    one = workspace_bytes(FULL, 3, 1, torch.bfloat16)
    assert workspace_bytes(FULL, 3, 4, torch.bfloat16) == 4 * one
    gate_up = (3 * 256 + 48) * 2 * FULL.prefix_mlp_dim * 2
    assert gate_up < one < 3 * gate_up


def test_workspace_without_the_gate_up_product_where_the_gelu_mul_gemm_runs(monkeypatch):
    from pi0_ros.engine import kernel_configs, kernels
    unfused = workspace_bytes(FULL, 3, 8, torch.bfloat16)
    config = {'block_m': 128, 'block_n': 128, 'block_k': 64, 'split_k': 1, 'num_warps': 8,
              'num_stages': 3}
    monkeypatch.setattr(kernel_configs, 'GELU_MUL_GEMM',
                        {(FULL.prefix_mlp_dim, FULL.prefix_width): [(8 * 816, config)]})
    monkeypatch.setattr(kernels, 'tma_available', lambda: False)
    assert workspace_bytes(FULL, 3, 8, torch.bfloat16) == unfused  # no TMA: cuBLAS runs
    monkeypatch.setattr(kernels, 'tma_available', lambda: True)
    fused = workspace_bytes(FULL, 3, 8, torch.bfloat16)
    # The [rows, 2 x mlp] gate/up product is gone; GELU * up plus the down output remain.
    rows = 8 * (3 * 256 + 48)
    assert unfused - fused == rows * 2 * (3 * FULL.prefix_mlp_dim
                                          - (FULL.prefix_mlp_dim + FULL.prefix_width))
    assert workspace_bytes(FULL, 3, 8, torch.bfloat16, prefix_fp8=True) > unfused  # FP8 MLP
    assert workspace_bytes(FULL, 3, 16, torch.bfloat16) == 2 * unfused  # rows not measured


def test_overlapped_first_step_adds_a_denoising_step_and_a_stream_to_the_estimate():
    on = estimate_memory(FULL, 3, EngineOptions(max_batch=2), torch.bfloat16)
    off = estimate_memory(FULL, 3, EngineOptions(max_batch=2, overlap_first_step=False),
                          torch.bfloat16)
    # The prefix stage (the largest) also holds the first step's temporaries (tens of MB).
    assert 0 < on.workspace - off.workspace < 0.2 * off.workspace
    assert on.fixed - off.fixed == 64 << 20  # the step's stream has its own cuBLAS workspace
    assert (on.weights, on.buffers) == (off.weights, off.buffers)


def test_plan_picks_the_largest_fitting_bucket():
    options = EngineOptions(max_batch=1)
    totals = {b: estimate_memory(FULL, 3, EngineOptions(max_batch=b), torch.bfloat16).total
              for b in (1, 2, 4, 8)}
    assert totals[1] < totals[2] < totals[4] < totals[8]
    assert plan_max_batch(totals[4], FULL, 3, options, torch.bfloat16) == 4
    assert plan_max_batch(totals[4] - 1, FULL, 3, options, torch.bfloat16) == 2
    assert plan_max_batch(totals[8] * 10, FULL, 3, options, torch.bfloat16, limit=8) == 8
    with pytest.raises(EngineError, match='does not fit batch 1'):
        plan_max_batch(totals[1] - 1, FULL, 3, options, torch.bfloat16)
    with pytest.raises(ValueError, match='limit must be >= 1'):  # not "does not fit"
        plan_max_batch(totals[8] * 10, FULL, 3, options, torch.bfloat16, limit=0)


def test_estimate_reports_parts_in_gib():
    estimate = estimate_memory(FULL, 3, EngineOptions(max_batch=2), torch.bfloat16)
    parts = estimate.as_gib()
    assert set(parts) == {'weights', 'buffers', 'workspace', 'fixed', 'total'}
    assert np.isclose(parts['total'], sum(v for k, v in parts.items() if k != 'total'))


def test_chosen_buckets_size_the_workspace_by_the_largest():
    chosen = estimate_memory(FULL, 3, EngineOptions(max_batch=6, batch_buckets=(1, 3, 6)),
                             torch.bfloat16)
    default = estimate_memory(FULL, 3, EngineOptions(max_batch=6), torch.bfloat16)
    assert chosen == default  # [1, ..., 6] and [1, 3, 6] both end at 6
    assert chosen.workspace == workspace_bytes(FULL, 3, 6, torch.bfloat16,
                                               overlap_first_step=True)
    planned = plan_max_batch(chosen.total, FULL, 3,
                             EngineOptions(max_batch=6, batch_buckets=(1, 3, 6)), torch.bfloat16)
    assert planned == 4  # the planner's candidates are powers of two
