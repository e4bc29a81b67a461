# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The expert's layers on CUDA thread-block clusters (cluster_expert): compile, gate, results."""
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from pi0_ros.engine import attention, cluster_expert, kernel_configs, model
from pi0_ros.engine.config import ModelDims


def _nvrtc_available() -> bool:
    try:
        from torch.cuda._utils import _get_gpu_rtc_library
        _get_gpu_rtc_library()
    except (ImportError, OSError, RuntimeError):
        return False
    return True


@pytest.mark.skipif(not _nvrtc_available(), reason='NVRTC is not available')
def test_every_projection_of_the_full_size_expert_compiles_with_nvrtc():
    # NVRTC needs no GPU: the CUDA text and the four variants of the full-size expert
    # (Hopper target) compile to distinct machine code.
    dims = ModelDims.full()
    variants = cluster_expert.layer_variants(dims.expert_width, dims.expert_heads,
                                             dims.head_dim, dims.expert_mlp_dim)
    cubins = {name: cluster_expert.compile_to_cubin(variant)
              for name, variant in variants.items()}
    assert set(cubins) == {'qkv', 'o', 'gate_up', 'down'}
    assert all(cubin.startswith(b'\x7fELF') for cubin in cubins.values())
    assert len(set(cubins.values())) == 4
    assert all(variant.shared_bytes <= 227 * 1024 for variant in variants.values())


def test_cluster_kernels_run_only_where_switched_on_and_supported(monkeypatch):
    dims = ModelDims.full()
    generator = torch.Generator().manual_seed(0)
    layers = model.random_expert_layers(dims, 1, generator)
    shape = (dims.expert_width, dims.expert_heads, dims.head_dim, dims.expert_mlp_dim)
    cuda = torch.device('cuda')
    monkeypatch.setattr(kernel_configs, 'CLUSTER_EXPERT', False)
    assert not cluster_expert.supported(layers, 51, *shape, torch.bfloat16, cuda)
    monkeypatch.setattr(kernel_configs, 'CLUSTER_EXPERT', True)
    assert not cluster_expert.supported(layers, 51, *shape, torch.bfloat16,
                                        torch.device('cpu'))
    assert not cluster_expert.supported(layers, 102, *shape, torch.bfloat16, cuda)
    assert not cluster_expert.supported(layers, 51, *shape, torch.float16, cuda)
    if torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0):
        assert cluster_expert.supported(layers, 51, *shape, torch.bfloat16, cuda)


@pytest.mark.gpu
def test_cluster_expert_matches_the_stack_of_fused_kernels_at_full_size(monkeypatch):
    # Three full-size expert layers at batch 1 against model._gemma_stack: the residual stream
    # and the suffix K/V rows agree, the prefix part of the cache is untouched, and two runs
    # give the same bits (the cluster adds its partials in a fixed order).
    monkeypatch.setattr(kernel_configs, 'CLUSTER_EXPERT', True)
    dims = ModelDims.full()
    width, heads, dim, mlp = (dims.expert_width, dims.expert_heads, dims.head_dim,
                              dims.expert_mlp_dim)
    prefix, seq, depth = 816, dims.chunk_size + 1, 3
    generator = torch.Generator(device='cuda').manual_seed(7)
    layers = model.random_expert_layers(dims, depth, generator)
    assert cluster_expert.supported(layers, seq, width, heads, dim, mlp, torch.bfloat16,
                                    torch.device('cuda'))
    key_mask = torch.ones(1, prefix, dtype=torch.bool, device='cuda')
    key_mask[0, 760:] = False
    bias = attention.key_bias(key_mask, extra_keys=seq)
    positions = key_mask.sum(1) + torch.arange(seq, device='cuda')
    cos, sin = model.rope_tables(dims, prefix + seq, 'cuda')
    cos, sin = cos[positions].contiguous(), sin[positions].contiguous()
    cache = torch.randn(2, depth, 1, 1, prefix + seq, dim, device='cuda',
                        generator=generator).to(torch.bfloat16)
    x0 = torch.randn(1, seq, width, device='cuda', generator=generator) * 3.0
    results = {}
    for name in ('reference', 'clusters', 'clusters again'):
        x, keys, values = x0.clone(), cache[0].clone(), cache[1].clone()
        normed = torch.empty_like(x)
        if name == 'reference':
            model._gemma_stack(layers, dims, x, heads, cos, sin, keys, values, prefix, bias,
                               state_keys=prefix + 1, final_out=normed)
        else:
            cluster_expert.expert_stack(layers, x, dims.rms_norm_eps, heads, dim, cos, sin,
                                        keys, values, prefix, bias, prefix + 1, normed)
        torch.cuda.synchronize()
        results[name] = (normed, x, keys[:, :, 0, prefix:], values[:, :, 0, prefix:])
        assert torch.equal(keys[:, :, 0, :prefix], cache[0][:, :, 0, :prefix])
        assert torch.equal(values[:, :, 0, :prefix], cache[1][:, :, 0, :prefix])
    for actual, expected, what in zip(results['clusters'], results['reference'],
                                      ('normed', 'residual', 'keys', 'values')):
        actual, expected = actual.float(), expected.float()
        error = (actual - expected).abs().max().item() / expected.abs().max().item()
        cosine = F.cosine_similarity(actual.flatten().double(), expected.flatten().double(),
                                     dim=0).item()
        assert error < 2e-2 and cosine > 0.9999, (what, error, cosine)
    for first, again in zip(results['clusters'], results['clusters again']):
        assert torch.equal(first, again)
