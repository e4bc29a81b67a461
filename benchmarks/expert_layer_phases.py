# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Where the persistent expert-layer kernel spends its time (GPU only; writes JSON).

The action expert at batch 1 (51 rows, full size, 18 layers with their own random weights, so
they stream from HBM as in the engine), each variant timed inside a CUDA graph, in microseconds
per layer:
  stack             the engine's stack of fused kernels (model._gemma_stack)
  persistent        expert_layer.expert_stack with the committed tiles
  ... without X     the same with phase X doing no work (its barrier kept): what X costs
  only X            only phase X does work: X plus the barriers
  barriers only     no phase does work
  phased            one launch per phase (no barriers, PDL between the launches)
  tiles ...         the committed tiles with one entry changed
Usage: python benchmarks/expert_layer_phases.py --json expert_layer_phases.json (or run_h200.sh
EXPERT_LAYER=1)
"""
import argparse
import dataclasses
import json

import torch
from tune_kernels import time_graph  # benchmarks/, next to this script

from pi0_ros.engine import attention, expert_layer, kernel_configs, model
from pi0_ros.engine.config import ModelDims

TILE_VARIANTS = [{'num_warps': 4}, {'num_stages': 4}, {'merge_rows': 1},
                 {'merge_rows': 8}, {'o_split': 1, 'down_split': 1},
                 {'block_n_o': 32, 'o_split': 4, 'down_split': 4},
                 {'block_n_qkv': 32, 'qkv_split': 2}, {'block_n_mlp': 64, 'mlp_split': 2}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--json', default='expert_layer_phases.json')
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--quick', action='store_true',
                        help='only the stack, the kernel and its barriers (with and without '
                             'the weight prefetch)')
    args = parser.parse_args()
    kernel_configs.EXPERT_LAYER_MAX_ROWS = 128
    dims = ModelDims.full()
    width, heads, dim, mlp = (dims.expert_width, dims.expert_heads, dims.head_dim,
                              dims.expert_mlp_dim)
    batch, prefix, seq, depth = args.batch, 816, dims.chunk_size + 1, dims.expert_depth
    generator = torch.Generator(device='cuda').manual_seed(0)
    layers = model.random_expert_layers(dims, depth, generator)
    key_mask = torch.ones(batch, prefix, dtype=torch.bool, device='cuda')
    bias = attention.key_bias(key_mask, extra_keys=seq)
    positions = (prefix + torch.arange(seq, device='cuda')).repeat(batch)
    cos, sin = model.rope_tables(dims, prefix + seq, 'cuda')
    cos, sin = cos[positions].contiguous(), sin[positions].contiguous()
    cache_k = torch.randn(depth, batch, 1, prefix + seq, dim, device='cuda',
                          generator=generator).to(torch.bfloat16)
    cache_v = torch.randn_like(cache_k)
    x0 = torch.randn(batch, seq, width, device='cuda', generator=generator)
    x = x0.clone()
    sync = expert_layer.sync_buffer(depth, x.device)
    committed = expert_layer.config()
    all_work = (1 << len(expert_layer.PHASES)) - 1

    def per_layer_us(body) -> float:
        def call():
            x.copy_(x0)  # the same residual stream every time
            body()
        return time_graph([call], repeats=10, trials=7) / depth

    def persistent(cfg=committed, work=all_work, phased=False):
        def body():
            sync.zero_()
            expert_layer.expert_stack(layers, x, dims.rms_norm_eps, heads, dim, cos, sin,
                                      cache_k, cache_v, prefix, bias, sync, 0, cfg=cfg,
                                      phased=phased, work=work)
        return body

    results = {}
    report = {'device': torch.cuda.get_device_name(), 'batch': batch, 'layers': depth,
              'committed_tiles': dataclasses.asdict(committed), 'us_per_layer': results}

    def record(name, body):
        results[name] = per_layer_us(body)
        print(f'{name:40s} {results[name]:8.2f} us per layer', flush=True)
        with open(args.json, 'w') as handle:  # after each variant: a cut-short run keeps them
            json.dump(dict(report, error_flag=int(sync[0].item())), handle, indent=1)

    def stack():
        model._gemma_stack(layers, dims, x, heads, cos, sin, cache_k, cache_v, prefix, bias,
                           state_keys=prefix + 1)

    no_prefetch = dataclasses.replace(committed, prefetch=False)
    record('stack', stack)
    record('persistent', persistent())
    # The barriers alone, with the weight prefetch (the layer's weights still stream into L2)
    # and without it (the barriers and the launch only).
    record('barriers only', persistent(work=1))
    record('barriers only, no prefetch', persistent(cfg=no_prefetch, work=1))
    record('persistent, no prefetch', persistent(cfg=no_prefetch))
    for index in (1, 4, 6):  # qkv, o, down without the other phases' weight stream
        record(f'only {expert_layer.PHASES[index]}, no prefetch',
               persistent(cfg=no_prefetch, work=1 | (1 << index)))
    if args.quick:
        return
    record('phased', persistent(phased=True))
    for index, phase in enumerate(expert_layer.PHASES[1:], start=1):
        record(f'without {phase}', persistent(work=all_work & ~(1 << index)))
        record(f'only {phase}', persistent(work=1 | (1 << index)))
    for change in TILE_VARIANTS:
        name = 'tiles ' + ' '.join(f'{key}={value}' for key, value in change.items())
        try:
            record(name, persistent(cfg=dataclasses.replace(committed, **change)))
        except Exception as error:  # noqa: BLE001 - a tile that does not compile is reported
            results[name] = f'{type(error).__name__}: {str(error)[:200]}'
            print(name, results[name], flush=True)


if __name__ == '__main__':
    main()
