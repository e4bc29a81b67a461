# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""benchmarks/tune_kernels.py's table of best tiles: what it keeps, and that engine_ab reads it."""
import importlib.util
import json
from pathlib import Path

import pytest

from pi0_ros.engine import kernel_configs

SCRIPT = Path(__file__).resolve().parents[1] / 'benchmarks' / 'tune_kernels.py'


@pytest.fixture
def tune_kernels():
    spec = importlib.util.spec_from_file_location('tune_kernels', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def qkv_rope_result(rows, unfused_us, best_us, block_n):
    config = dict(kernel_configs.QKV_ROPE_CONFIG, block_n=block_n)
    return {'name': 'qkv_rope', 'rows': rows, 'unfused_us': unfused_us,
            'best': {'config': config, 'us': best_us, 'rel_error': 1e-3}}


@pytest.mark.parametrize('fused_us, taken', [(9.0, True), (11.0, False)])
def test_the_fused_qkv_rope_tile_is_kept_only_where_it_beat_the_unfused_path(
        tune_kernels, tmp_path, monkeypatch, fused_us, taken):
    monkeypatch.setattr(kernel_configs, 'QKV_ROPE_CONFIG', dict(kernel_configs.QKV_ROPE_CONFIG))
    committed = dict(kernel_configs.QKV_ROPE_CONFIG)
    # At 102 rows the fused kernel always wins here: the table takes batch 1's 51 rows only.
    configs = tune_kernels.best_configs([], [], [], [qkv_rope_result(51, 10.0, fused_us, 32),
                                                     qkv_rope_result(102, 20.0, 5.0, 64)])
    path = tmp_path / 'tuning.json'
    path.write_text(json.dumps({'best': tune_kernels.json_best(configs)}))
    tune_kernels.apply(tune_kernels.load_best(str(path)))
    expected = dict(committed, block_n=32) if taken else committed
    assert kernel_configs.QKV_ROPE_CONFIG == expected
