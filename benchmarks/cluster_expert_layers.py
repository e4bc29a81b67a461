# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The action expert's layers at batch 1: the stack of fused kernels against cluster_expert.

Full size, 18 layers with their own random weights (so they stream from HBM as in the engine),
each variant timed inside a CUDA graph, in microseconds per layer; the check compares the
residual stream after the 18 layers (GPU only; writes JSON).
Usage: python benchmarks/cluster_expert_layers.py --json cluster_expert_layers.json
"""
import argparse
import json

import torch
import torch.nn.functional as F  # noqa: N812
from tune_kernels import time_graph  # benchmarks/, next to this script

from pi0_ros.engine import attention, cluster_expert, kernel_configs, model
from pi0_ros.engine.config import ModelDims


TILE_VARIANTS = [{'qkv_cluster': 8}, {'o_cluster': 4}, {'gate_up_cluster': 8},
                 {'gate_up_block_n': 256}, {'down_block_n': 64, 'down_warps': 4},
                 {'down_cluster': 4, 'down_block_n': 32, 'down_warps': 2}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--json', default='cluster_expert_layers.json')
    args = parser.parse_args()
    kernel_configs.CLUSTER_EXPERT = True
    dims = ModelDims.full()
    width, heads, dim = dims.expert_width, dims.expert_heads, dims.head_dim
    prefix, seq, depth = 816, dims.chunk_size + 1, dims.expert_depth
    generator = torch.Generator(device='cuda').manual_seed(0)
    layers = model.random_expert_layers(dims, depth, generator)
    key_mask = torch.ones(1, prefix, dtype=torch.bool, device='cuda')
    bias = attention.key_bias(key_mask, extra_keys=seq)
    positions = prefix + torch.arange(seq, device='cuda')
    cos, sin = model.rope_tables(dims, prefix + seq, 'cuda')
    cos, sin = cos[positions].contiguous(), sin[positions].contiguous()
    cache_k = torch.randn(depth, 1, 1, prefix + seq, dim, device='cuda',
                          generator=generator).to(torch.bfloat16)
    cache_v = torch.randn_like(cache_k)
    x0 = torch.randn(1, seq, width, device='cuda', generator=generator)
    x = x0.clone()
    normed = torch.empty_like(x)

    def stack():
        model._gemma_stack(layers, dims, x, heads, cos, sin, cache_k, cache_v, prefix, bias,
                           state_keys=prefix + 1, final_out=normed)

    def clusters():
        cluster_expert.expert_stack(layers, x, dims.rms_norm_eps, heads, dim, cos, sin,
                                    cache_k, cache_v, prefix, bias, prefix + 1, normed)

    outputs = {}
    for name, body in (('stack', stack), ('clusters', clusters)):
        x.copy_(x0)
        body()
        torch.cuda.synchronize()
        outputs[name] = normed.clone()
    cosine = F.cosine_similarity(outputs['stack'].flatten().double(),
                                 outputs['clusters'].flatten().double(), dim=0).item()
    report = {'device': torch.cuda.get_device_name(), 'layers': depth,
              'tiles': kernel_configs.CLUSTER_EXPERT_TILES,
              'cosine_after_18_layers': cosine, 'us_per_layer': {}}
    print(f'cosine of the normalized output after {depth} layers: {cosine:.6f}', flush=True)

    def record(name, body):
        def call():
            x.copy_(x0)  # the same residual stream every time
            body()
        report['us_per_layer'][name] = time_graph([call], repeats=10, trials=7) / depth
        print(f'{name:30s} {report["us_per_layer"][name]:8.2f} us per layer', flush=True)
        with open(args.json, 'w') as handle:
            json.dump(report, handle, indent=1)

    def variant(**options):
        def body():
            cluster_expert.expert_stack(layers, x, dims.rms_norm_eps, heads, dim, cos, sin,
                                        cache_k, cache_v, prefix, bias, prefix + 1, normed,
                                        **options)
        return body

    record('stack', stack)
    record('clusters', clusters)
    record('clusters, no tensor-core products', variant(ablate=1))
    record('clusters, no cluster reduction', variant(ablate=2))
    record('clusters, neither', variant(ablate=3))
    for name in ('qkv', 'attention', 'o', 'gate_up', 'down'):
        record(f'clusters, only {name}', variant(only=name))
    record('clusters, only qkv, no products, no reduction', variant(only='qkv', ablate=3))
    record('clusters, only down, no products, no reduction', variant(only='down', ablate=3))
    committed = dict(kernel_configs.CLUSTER_EXPERT_TILES)
    for change in TILE_VARIANTS:
        kernel_configs.CLUSTER_EXPERT_TILES = dict(committed, **change)
        name = 'clusters, tiles ' + ' '.join(f'{key}={value}' for key, value in change.items())
        try:
            record(name, clusters)
        except Exception as error:  # noqa: BLE001 - a tile that does not compile is reported
            report['us_per_layer'][name] = f'{type(error).__name__}: {str(error)[:300]}'
            print(name, report['us_per_layer'][name], flush=True)
    kernel_configs.CLUSTER_EXPERT_TILES = committed
    kernel_configs.PDL = False
    record('clusters without PDL', clusters)
    record('stack without PDL', stack)
    kernel_configs.PDL = True


if __name__ == '__main__':
    main()
