# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The split-key attention kernel against a float32 reference (Triton's interpreter on the CPU)."""
import os
import subprocess
import sys

import pytest
import torch

from pi0_ros.engine import kernels

CHECK = """
import torch
from pi0_ros.engine import kernels
torch.manual_seed(0)
for dtype, tolerance in ((torch.float32, 1e-5), (torch.float16, 2e-3)):
    for batch, prefix, heads in ((1, 70, 8), (2, 130, 4)):
        seq, dim = 9, 64
        length = prefix + seq
        q = torch.randn(batch, seq * heads, dim, dtype=dtype)
        k_cache = torch.randn(batch, length + 5, dim, dtype=dtype)
        v_cache = torch.randn(batch, length + 5, dim, dtype=dtype)
        k, v = k_cache[:, :length], v_cache[:, :length]
        allowed = torch.ones(batch, seq, length, dtype=torch.bool)
        allowed[-1, :, prefix - 11:prefix] = False   # padding of the last observation
        allowed[:, 0, prefix + 1:] = False           # the state token sees itself only
        allowed = allowed.repeat_interleave(heads, dim=1)
        mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, float('-inf'))
        scale = dim ** -0.5
        scores = q.float() @ k.float().transpose(1, 2) * scale + mask.float()
        reference = torch.softmax(scores, -1) @ v.float()
        out = kernels.split_attention(q, k, v, mask, scale, keys_per_split=32)
        error = (out.float() - reference).abs().max().item()
        assert out.dtype == dtype and out.shape == q.shape
        assert error < tolerance, (dtype, batch, error)
print('split attention ok')
"""


@pytest.mark.skipif(kernels.triton is None, reason='Triton is not installed')
def test_split_attention_matches_float32_reference_in_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET='1')
    result = subprocess.run([sys.executable, '-c', CHECK], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'split attention ok' in result.stdout


@pytest.mark.gpu
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_split_attention_on_the_gpu_at_full_size(dtype):
    torch.manual_seed(1)
    batch, prefix, seq, heads, dim = 2, 816, 51, 8, 256
    length = prefix + seq
    q = torch.randn(batch, seq * heads, dim, dtype=dtype, device='cuda')
    k = torch.randn(batch, length, dim, dtype=dtype, device='cuda')
    v = torch.randn(batch, length, dim, dtype=dtype, device='cuda')
    allowed = torch.ones(batch, seq, length, dtype=torch.bool, device='cuda')
    allowed[1, :, 700:prefix] = False
    allowed[:, 0, prefix + 1:] = False
    allowed = allowed.repeat_interleave(heads, dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype, device='cuda').masked_fill_(
        ~allowed, float('-inf'))
    scale = dim ** -0.5
    reference = torch.softmax(q.float() @ k.float().transpose(1, 2) * scale + mask.float(),
                              -1) @ v.float()
    out = kernels.split_attention(q, k, v, mask, scale)
    assert (out.float() - reference).abs().max().item() < 2e-2
