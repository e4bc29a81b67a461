# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The floor under the denoiser's ~1,600 dependent kernels (GPU only; writes JSON).

Two measurements, each inside a CUDA graph as the engine runs its stages:
  chain       a chain of dependent minimal Triton kernels (each reads and writes one block of
              the same buffer), with and without programmatic dependent launch, on 1 and on
              132 programs: the time one more kernel in the chain costs when it does nothing
  projections the action expert's four projections at batch 1 (51 rows, committed launch
              configurations) for 18 layers, each layer with its own weights (streamed from
              HBM, as in the engine) and all layers with the same weights (L2-warm): what the
              GEMMs cost beyond the launch floor, and what keeping weights in L2 could save
A persistent kernel per layer or per step removes launches, not bytes: these numbers bound it.
Usage: python benchmarks/launch_floor.py --json launch_floor.json
"""
import argparse
import json

import torch
import triton
import triton.language as tl
from tune_kernels import time_graph  # benchmarks/, next to this script

from pi0_ros.engine import gemm, kernel_configs, kernels
from pi0_ros.engine.kernels import pdl_enter


@triton.jit
def _step_kernel(ptr, USE_PDL: tl.constexpr, BLOCK: tl.constexpr):
    pdl_enter(USE_PDL)
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(ptr + offsets, tl.load(ptr + offsets) + 1.0)


def graph_us(body, calls: int) -> float:
    """Median microseconds per launch of `body` (which makes `calls` launches) as a CUDA graph."""
    return time_graph([body], repeats=1, trials=7) / calls


def chain(programs: int, pdl: bool, length: int = 1000) -> float:
    block = 128
    buffer = torch.zeros(programs * block, device='cuda')

    def body():
        for _ in range(length):
            _step_kernel[(programs,)](buffer, USE_PDL=pdl, BLOCK=block, num_warps=4,
                                      launch_pdl=pdl)
    return graph_us(body, length)


def projections(shared_weights: bool, layers: int = 18, rows: int = 51) -> float:
    """Microseconds per layer of the expert's four skinny projections, chained."""
    dtype = torch.bfloat16
    shapes = {'qkv': (2560, 1024), 'o': (1024, 2048), 'gate_up': (8192, 1024),
              'down': (1024, 4096)}
    count = 1 if shared_weights else layers
    weights = [{name: torch.randn(n, k, dtype=dtype, device='cuda') * 0.03
                for name, (n, k) in shapes.items()} for _ in range(count)]
    inputs = {name: torch.randn(rows, k, dtype=dtype, device='cuda')
              for name, (_, k) in shapes.items()}

    def body():
        for layer in range(layers):
            w = weights[layer % count]
            gemm.linear(inputs['qkv'], w['qkv'])
            gemm.linear(inputs['o'], w['o'])
            gemm.linear(inputs['gate_up'], w['gate_up'], gelu_mul=True)
            gemm.linear(inputs['down'], w['down'])
    return graph_us(body, layers)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--json', default='launch_floor.json')
    args = parser.parse_args(argv)
    pdl_possible = kernels.use_pdl(torch.empty(1, device='cuda'))
    report = {'device': torch.cuda.get_device_name(), 'chain_us_per_kernel': {},
              'prefetch_weights_max_rows': kernel_configs.PREFETCH_WEIGHTS_MAX_ROWS}
    for programs in (1, 132):
        for pdl in ((False, True) if pdl_possible else (False,)):
            key = f'{programs} programs, {"PDL" if pdl else "no PDL"}'
            report['chain_us_per_kernel'][key] = chain(programs, pdl)
            print(f'chain, {key}: {report["chain_us_per_kernel"][key]:.2f} us per kernel',
                  flush=True)
    report['projections_us_per_layer'] = {'own weights (HBM)': projections(False),
                                          'same weights (L2-warm)': projections(True)}
    for key, value in report['projections_us_per_layer'].items():
        print(f'expert projections at 51 rows, {key}: {value:.2f} us per layer', flush=True)
    with open(args.json, 'w') as stream:
        json.dump(report, stream, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
