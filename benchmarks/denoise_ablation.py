# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Where the denoiser's time goes, by leaving kernels out (GPU only; writes JSON).

The full-size random engine's denoise stage is captured as a CUDA graph (as the engine runs it)
once as it is and once per variant with one family of kernels replaced by nothing (the result
is then wrong; only the time is read). The difference to the full stage is what that family
costs inside the graph, launch gaps and PDL overlap included: the most a fusion that removes
those kernels can save.
Usage: python benchmarks/denoise_ablation.py --json denoise_ablation.json [--batches 1,8]
"""
import argparse
import contextlib
import json
import statistics

import numpy as np
import torch

from pi0_ros.engine import EngineOptions, kernel_configs, kernels, model, ModelDims
from pi0_ros.engine import Pi0Engine


def _noop(*args, **kwargs):
    return None


@contextlib.contextmanager
def patched(pairs):
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in pairs]
    for owner, name, value in pairs:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def _no_attention(queries, *args, **kwargs):
    return queries


def variants():
    unsplit = {key: [(size, dict(config, keys_per_split=0)) for size, config in table]
               for key, table in kernel_configs.ATTENTION.items()}
    return {
        'full': [],
        'no_rms_norm': [(kernels, 'add_rms_norm', _noop)],
        'no_rope_qkv': [(kernels, 'rope_qkv', _noop)],
        'attention_unsplit': [(kernel_configs, 'ATTENTION', unsplit)],
        'no_attention': [(model, 'attention', _no_attention)],
        'projections_only': [(kernels, 'add_rms_norm', _noop), (kernels, 'rope_qkv', _noop),
                             (model, 'attention', _no_attention)],
    }


def time_stage(engine: Pi0Engine, batch: int, repeats: int = 7, replays: int = 50) -> float:
    """Median ms of one replay of a freshly captured denoise graph."""
    graph = engine._capture('denoise', batch)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        for _ in range(replays):
            graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / replays)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--json', required=True)
    parser.add_argument('--batches', default='1,8')
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(',')]
    engine = Pi0Engine.random(ModelDims.full(), state_dim=14, action_dim=14, num_cameras=3,
                              options=EngineOptions(device='cuda', precision='bf16',
                                                    max_batch=max(batches),
                                                    overlap_first_step=False))  # all 10 steps
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (480, 640, 3), dtype=np.uint8) for _ in range(3)]
    observation = (frames, np.zeros(14, np.float32), 'pick up the cube')
    engine.infer_batch([observation] * max(batches))  # fills the KV cache once
    results = []
    with torch.inference_mode():
        for batch in batches:
            for name, pairs in variants().items():
                with patched(pairs):
                    ms = time_stage(engine, batch)
                results.append({'batch': batch, 'variant': name, 'denoise_ms': ms})
                print(f'batch {batch:2d}  {name:20s} {ms:7.3f} ms', flush=True)
    full = {r['batch']: r['denoise_ms'] for r in results if r['variant'] == 'full'}
    for r in results:
        r['saved_ms'] = full[r['batch']] - r['denoise_ms']
    with open(args.json, 'w') as handle:
        json.dump({'device': torch.cuda.get_device_name(), 'results': results}, handle,
                  indent=1)


if __name__ == '__main__':
    main()
