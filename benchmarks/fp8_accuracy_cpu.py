# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Accuracy of the engine's precision options on Pi0's full-size model, on the CPU.

Builds the full-size engine with the same random weights (seed 0) in float32 (the reference:
it matches LeRobot's float32 policy to a relative 6.7e-7 on the H200, benchmarks/RESULTS.md) and
in bf16 with each FP8 option, runs one observation with fixed frames, state and noise, and reports
each chunk's cosine and relative max error against the reference. FP8 products run emulated on
the CPU (e4m3 operands with row / channel scales, multiplied in float32: the arithmetic of
torch._scaled_mm up to the summation order), so the accuracy holds for the GPU path; the speed
does not. With --group-size G it also emulates a scaling the engine does not implement yet:
the prefix MLP's FP8 operands scaled per G consecutive elements along K (activations per row and
group, weights per output channel and group, as block-scaled FP8 GEMMs do), to see whether finer
scales would keep the accuracy. Usage:
    python benchmarks/fp8_accuracy_cpu.py --json fp8_accuracy_cpu.json [--group-size 128]
"""
import argparse
import gc
import json
import time

import numpy as np
import torch

from pi0_ros.tools.bench import random_frames
from pi0_ros.engine import EngineOptions, gemm, kernel_configs, kernels, ModelDims, Pi0Engine

VARIANTS = {
    'fp32': ({'precision': 'fp32'}, True),
    'bf16': ({'precision': 'bf16'}, True),
    'bf16 + fp8 prefix gate/up': ({'precision': 'bf16', 'prefix_fp8': True}, False),
    'bf16 + fp8 prefix gate/up + down': ({'precision': 'bf16', 'prefix_fp8': True}, True),
    # The FP8 prefix MLP in some of the 17 prefix layers with an MLP (gate/up and down).
    'bf16 + fp8 prefix MLP, layers 0-8': (
        {'precision': 'bf16', 'prefix_fp8': True, 'prefix_fp8_layers': tuple(range(9))}, True),
    'bf16 + fp8 prefix MLP, layers 8-16': (
        {'precision': 'bf16', 'prefix_fp8': True, 'prefix_fp8_layers': tuple(range(8, 17))},
        True),
    'bf16 + fp8 prefix MLP, even layers': (
        {'precision': 'bf16', 'prefix_fp8': True, 'prefix_fp8_layers': tuple(range(0, 17, 2))},
        True),
    'bf16 + fp8 prefix gate/up, layers 8-16': (
        {'precision': 'bf16', 'prefix_fp8': True, 'prefix_fp8_layers': tuple(range(8, 17))},
        False),
}


def fake_quantize_groups(values: torch.Tensor, group: int) -> torch.Tensor:
    """Return float32 values after e4m3 rounding with one scale per `group` along the last dim."""
    shape = values.shape
    grouped = values.float().reshape(*shape[:-1], shape[-1] // group, group)
    scale = grouped.abs().amax(-1, keepdim=True).clamp(min=1e-12) / kernels.FP8_MAX
    rounded = (grouped / scale).clamp(-kernels.FP8_MAX, kernels.FP8_MAX)
    return (rounded.to(torch.float8_e4m3fn).float() * scale).reshape(shape)


class GroupScaledWeight(gemm.Fp8Weight):
    """An Fp8Weight stand-in holding the group-scaled weight, dequantized (emulation only)."""


def install_group_scaling(group: int):
    """
    Route the FP8 prefix MLP through group-scaled emulation; return a function that undoes it.

    The engine's FP8 row writers still run (their outputs are replaced by the float32 values
    they were made from), so the model code is exactly the engine's.
    """
    originals = (gemm.Fp8Weight.quantize, kernels.add_rms_norm, gemm.fp8_linear)
    exact = {}  # id(FP8 tensor) -> the float32 rows it stands for

    def quantize(weight):
        dense = fake_quantize_groups(weight, group)
        return GroupScaledWeight(dense, torch.ones(weight.shape[0]))

    def add_rms_norm(x, residual, out, eps, out_scale=None):
        if out_scale is None:
            return originals[1](x, residual, out, eps)
        rows = torch.empty(out.shape, dtype=torch.float32)
        originals[1](x, residual, rows, eps)
        exact[id(out)] = rows
        out_scale.fill_(1.0)
        return None

    def fp8_linear(x8, x_scale, weight, dtype, *, gelu_mul=False, fp8_out=False):
        rows = exact.pop(id(x8))
        product = fake_quantize_groups(rows, group) @ weight.data.T
        if gelu_mul:
            half = product.shape[1] // 2
            product = torch.nn.functional.gelu(product[:, :half], approximate='tanh') \
                * product[:, half:]
        if fp8_out:
            stand_in = torch.empty(product.shape, dtype=torch.float8_e4m3fn)
            exact[id(stand_in)] = product
            return stand_in, torch.ones(product.shape[0])
        return product.to(dtype)

    gemm.Fp8Weight.quantize = staticmethod(quantize)
    kernels.add_rms_norm, gemm.fp8_linear = add_rms_norm, fp8_linear

    def undo():
        gemm.Fp8Weight.quantize = originals[0]
        kernels.add_rms_norm, gemm.fp8_linear = originals[1], originals[2]
    return undo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--json', default='fp8_accuracy_cpu.json')
    parser.add_argument('--seeds', default='0', help='comma-separated observation seeds')
    parser.add_argument('--group-size', type=int, default=0,
                        help='also emulate FP8 prefix operands scaled per this many K elements')
    parser.add_argument('--only', default='', help="variant names separated by '|' (and fp32)")
    parser.add_argument('--fp8-layer-ranges', default='',
                        help='also the FP8 prefix MLP (gate/up and down) in each of these '
                             'ranges of layers, e.g. 1-16,4-16')
    args = parser.parse_args()
    variants = dict(VARIANTS)
    ranges = []  # names of the --fp8-layer-ranges variants
    for spec in filter(None, args.fp8_layer_ranges.split(',')):
        first, last = (int(v) for v in spec.split('-'))
        ranges.append(f'bf16 + fp8 prefix MLP, layers {first}-{last}')
        variants[ranges[-1]] = ({'precision': 'bf16', 'prefix_fp8': True,
                                 'prefix_fp8_layers': tuple(range(first, last + 1))}, True)
    if args.group_size:
        variants[f'bf16 + fp8 prefix gate/up + down in 1x{args.group_size} groups (emulated)'] = (
            {'precision': 'bf16', 'prefix_fp8': True}, True)
    if args.only or ranges:
        keep = {'fp32', *args.only.split('|'), *ranges}
        variants = {k: v for k, v in variants.items() if k in keep}
    dims = ModelDims.full()
    seeds = [int(s) for s in args.seeds.split(',')]
    observations = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        observations.append((random_frames(rng), rng.normal(size=14).astype(np.float32),
                             rng.normal(size=(dims.chunk_size, dims.max_action_dim))
                             .astype(np.float32)))
    chunks, report = {}, {'seeds': seeds, 'variants': {}}
    for name, (options, fp8_down) in variants.items():
        kernel_configs.FP8_PREFIX_DOWN = fp8_down
        undo = install_group_scaling(args.group_size) if 'groups' in name else None
        started = time.time()
        engine = Pi0Engine.random(dims, state_dim=14, action_dim=14, num_cameras=3, seed=0,
                                  options=EngineOptions(device='cpu', max_frame_height=480,
                                                        max_frame_width=640, **options))
        chunks[name] = [engine.infer(frames, state, 'pick up the red block', noise=noise)
                        .actions.astype(np.float64) for frames, state, noise in observations]
        engine.close()
        del engine
        gc.collect()
        if undo is not None:
            undo()
        entry = {'seconds': time.time() - started}
        if name != 'fp32':
            cosines, errors = [], []
            for actions, reference in zip(chunks[name], chunks['fp32']):
                cosines.append(float((actions * reference).sum() / (
                    np.linalg.norm(actions) * np.linalg.norm(reference))))
                errors.append(float(np.abs(actions - reference).max()
                                    / np.abs(reference).max()))
            entry.update({'cosine_min': min(cosines), 'cosines': cosines,
                          'relative_max_error_max': max(errors)})
        report['variants'][name] = entry
        print(name, json.dumps(entry), flush=True)
    kernel_configs.FP8_PREFIX_DOWN = True
    report['torch'] = torch.__version__
    with open(args.json, 'w', encoding='utf-8') as stream:
        json.dump(report, stream, indent=1)


if __name__ == '__main__':
    main()
