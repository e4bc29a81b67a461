# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
A/B of two engine set-ups in one process (GPU only; writes JSON).

Engine A is built and its CUDA graphs captured with the committed kernel_configs and default
EngineOptions; then the configurations of the given tune_kernels.py JSON files are applied
(measured rows and batches replace committed entries) and engine B is built with them, the
--b-config kernel_configs values (e.g. BLAS_LIBRARY=none) and the --b-option values. The graphs
keep the configurations they were captured with, so the two engines can be timed call by call,
alternating, with the same new frames: process-to-process drift (0.5-1 ms at batch 1 between
processes of the same code) cancels out.
Usage: python benchmarks/engine_ab.py [--tuned kernel_tuning.json ...]
           [--b-option overlap_first_step=0 ...] [--b-config PREFETCH_WEIGHTS_MAX_ROWS=0 ...]
           [--frame-pool 8] [--frames-ahead] --batches 1,2 --iters 200 --json ab.json
"""
import argparse
import json
import time

import numpy as np
import torch
from tune_kernels import apply, load_best  # benchmarks/, next to this script

from pi0_ros.tools.bench import (apply_kernel_config, encode_ahead, INSTRUCTION, percentiles,
                           random_frames)
from pi0_ros.engine import EngineOptions, ModelDims, Pi0Engine

STAGES = ('preprocess', 'vision', 'prefix', 'denoise')


def build(max_batch: int, **options) -> tuple:
    """Return a warmed-up engine and the peak GPU memory (GiB) its build and warm-up added."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    engine = Pi0Engine.random(ModelDims.full(), state_dim=14, action_dim=14, num_cameras=3,
                              options=EngineOptions(precision='bf16', device='cuda',
                                                    max_batch=max_batch, **options))
    engine.warmup()
    torch.cuda.synchronize()
    return engine, (torch.cuda.max_memory_allocated() - base) / 2 ** 30


def call(engine: Pi0Engine, observations: list, keys=None) -> tuple:
    start = time.perf_counter()
    results = (engine.infer_batch(observations) if len(observations) > 1
               else [engine.infer(*observations[0], frame_keys=keys)])
    return (time.perf_counter() - start) * 1e3, results[0].timings_ms


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--tuned', action='append', default=[],
                        help="tune_kernels.py JSON whose 'best' configurations engine B uses")
    parser.add_argument('--b-option', action='append', default=[], metavar='NAME=VALUE',
                        help='an EngineOptions field of engine B (a switch, a number or '
                             'comma-separated numbers)')
    parser.add_argument('--b-config', action='append', default=[], metavar='NAME=VALUE',
                        help="a kernel_configs value of engine B (as bench's --kernel-config)")
    parser.add_argument('--frame-pool', type=int, default=0, metavar='N',
                        help='draw N sets of frames before timing and cycle through them, so '
                             'the calls run back to back (0: draw new frames before each pair '
                             'of calls, ~18 ms of host work at batch 8 while the GPU idles)')
    parser.add_argument('--instruction', default=INSTRUCTION,
                        help='the prompt of every call (the built-in tokenizer makes one token '
                             'per byte, plus <bos> and a newline)')
    parser.add_argument('--frames-ahead', action='store_true',
                        help='batch 1 as the node runs it: every camera but the last encoded '
                             'ahead (encode_frames, timed per camera as encode_ms), so the '
                             'timed call encodes one frame')
    parser.add_argument('--batches', default='1')
    parser.add_argument('--iters', type=int, default=200)
    parser.add_argument('--json', default='engine_ab.json')
    args = parser.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    batches = [int(b) for b in args.batches.split(',')]
    engines, peaks = {}, {}
    engines['A'], peaks['A'] = build(max(batches))
    for path in args.tuned:
        apply(load_best(path))
    for setting in args.b_config:
        apply_kernel_config(setting)
    b_options = {}
    for setting in args.b_option:
        name, _, value = setting.partition('=')
        current = getattr(EngineOptions(), name.strip())
        if isinstance(current, bool):
            b_options[name.strip()] = value.strip().lower() in ('1', 'true', 'on')
        elif isinstance(current, tuple):  # e.g. prompt_buckets=16,48
            b_options[name.strip()] = tuple(int(v) for v in value.split(',') if v.strip())
        else:
            b_options[name.strip()] = type(current)(value)
    engines['B'], peaks['B'] = build(max(batches), **b_options)
    print(f"peak GPU memory of build + warm-up: A {peaks['A']:.3f} GiB, B {peaks['B']:.3f} GiB",
          flush=True)
    rng = np.random.default_rng(0)
    report = {'tuned': args.tuned, 'b_options': b_options, 'b_configs': args.b_config,
              'frame_pool': args.frame_pool, 'instruction': args.instruction,
              'frames_ahead': args.frames_ahead,
              'build_peak_gib': peaks, 'batches': {}}

    def draw(batch):
        return [(random_frames(rng), rng.normal(size=14).astype(np.float32), args.instruction)
                for _ in range(batch)]

    for batch in batches:
        samples = {name: {'total': [], 'encode_ms': [], **{stage: [] for stage in STAGES}}
                   for name in engines}
        ahead = args.frames_ahead and batch == 1
        pool = [draw(batch) for _ in range(args.frame_pool)]
        for index in range(args.iters + 5):
            observations = pool[index % len(pool)] if pool else draw(batch)
            order = ('A', 'B') if index % 2 == 0 else ('B', 'A')
            for name in order:
                keys = None
                if ahead:  # new keys every call: the frames are encoded anew
                    frames = observations[0][0]
                    keys = [(name, index, cam) for cam in range(len(frames))]
                    encoded = encode_ahead(engines[name], frames, keys, len(frames) - 1)
                    if index >= 5:
                        samples[name]['encode_ms'].extend(encoded)
                elapsed, timings = call(engines[name], observations, keys)
                if index >= 5:
                    samples[name]['total'].append(elapsed)
                    for stage in STAGES:
                        samples[name][stage].append(timings[stage])
        entry = {name: {'total': percentiles(values['total']),
                        'stages_p50_ms': {stage: float(np.median(values[stage]))
                                          for stage in STAGES}}
                 for name, values in samples.items()}
        entry['b_minus_a_p50_ms'] = entry['B']['total']['p50'] - entry['A']['total']['p50']
        report['batches'][str(batch)] = entry
        if ahead:
            for name, values in samples.items():
                entry[name]['encode_ms'] = percentiles(values['encode_ms'])
            print(f"batch 1, one camera encoded ahead: A p50 {entry['A']['encode_ms']['p50']:.3f}"
                  f" ms, B p50 {entry['B']['encode_ms']['p50']:.3f} ms", flush=True)
        print(f"batch {batch}: A p50 {entry['A']['total']['p50']:.2f} ms "
              f"{entry['A']['stages_p50_ms']}, B p50 {entry['B']['total']['p50']:.2f} ms "
              f"{entry['B']['stages_p50_ms']}", flush=True)
    report['agreement'] = agreement(engines, draw(max(batches)))
    print(f"B against A, same inputs and noise: cosine {report['agreement']['cosine']:.6f}, "
          f"max abs {report['agreement']['max_abs']:.3e}", flush=True)
    with open(args.json, 'w', encoding='utf-8') as stream:
        json.dump(report, stream, indent=1)
    return 0


def agreement(engines: dict, observations: list) -> dict:
    """Cosine and largest difference of B's action chunks against A's (same weights, noise)."""
    rng = np.random.default_rng(1)
    engine = engines['A']
    noisy = [observation + (None, rng.normal(size=(engine.chunk_size, engine.dims.max_action_dim))
                            .astype(np.float32))
             for observation in observations]
    chunks = {name: torch.from_numpy(np.stack([r.actions for r in e.infer_batch(noisy)]))
              .double().reshape(-1) for name, e in engines.items()}
    cosine = torch.nn.functional.cosine_similarity(chunks['A'], chunks['B'], dim=0)
    return {'cosine': float(cosine), 'max_abs': float((chunks['A'] - chunks['B']).abs().max())}


if __name__ == '__main__':
    raise SystemExit(main())
