# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Accuracy of the engine's precision options on Pi0's full-size model, on the CPU.

Builds the full-size engine with the same random weights (seed 0) in float32 (the reference:
it matches LeRobot's float32 policy to a relative 6e-7 on the H200, benchmarks/h200_full) and in
bf16 with each FP8 option, runs one observation with fixed frames, state and noise, and reports
each chunk's cosine and relative max error against the reference. FP8 products run emulated on
the CPU (e4m3 operands with row / channel scales, multiplied in float32: the arithmetic of
torch._scaled_mm up to the summation order), so the accuracy holds for the GPU path; the speed
does not. Usage: python benchmarks/fp8_accuracy_cpu.py --json fp8_accuracy_cpu.json
"""
import argparse
import gc
import json
import time

import numpy as np
import torch

from pi0_ros.engine import EngineOptions, kernel_configs, ModelDims, Pi0Engine

VARIANTS = {
    'fp32': ({'precision': 'fp32'}, True),
    'bf16': ({'precision': 'bf16'}, True),
    'bf16 + fp8 prefix gate/up': ({'precision': 'bf16', 'prefix_fp8': True}, False),
    'bf16 + fp8 prefix gate/up + down': ({'precision': 'bf16', 'prefix_fp8': True}, True),
    'bf16 + fp8 expert (weight-only)': ({'precision': 'bf16', 'expert_fp8': True}, True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--json', default='fp8_accuracy_cpu.json')
    parser.add_argument('--seeds', default='0', help='comma-separated observation seeds')
    args = parser.parse_args()
    dims = ModelDims.full()
    seeds = [int(s) for s in args.seeds.split(',')]
    observations = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        observations.append(([rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)
                              for _ in range(3)],
                             rng.normal(size=14).astype(np.float32),
                             rng.normal(size=(dims.chunk_size, dims.max_action_dim))
                             .astype(np.float32)))
    chunks, report = {}, {'seeds': seeds, 'variants': {}}
    for name, (options, fp8_down) in VARIANTS.items():
        kernel_configs.FP8_PREFIX_DOWN = fp8_down
        started = time.time()
        engine = Pi0Engine.random(dims, state_dim=14, action_dim=14, num_cameras=3, seed=0,
                                  options=EngineOptions(device='cpu', max_frame_height=480,
                                                        max_frame_width=640, **options))
        chunks[name] = [engine.infer(frames, state, 'pick up the red block', noise=noise)
                        .actions.astype(np.float64) for frames, state, noise in observations]
        engine.close()
        del engine
        gc.collect()
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
