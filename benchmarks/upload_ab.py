# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
How the camera frames should reach the GPU (GPU only; writes JSON, changes nothing).

The full-size random engine runs as the benchmark runs it (new 480x640 frames every call) with
three ways of moving the frames, swapped in for Pi0Engine._upload:
  threads  copied into pinned memory by four copy threads, then uploaded (async)
  serial   copied into pinned memory on the calling thread, then uploaded (async)
  direct   uploaded straight from the numpy arrays (pageable memory: CUDA stages the bytes;
           what the engine does since this measurement)
and reports the latency p50 and the preprocess stage at batch 1 and 8.
Usage: python benchmarks/upload_ab.py --json upload_ab.json
"""
import argparse
from concurrent.futures import ThreadPoolExecutor
import json
import statistics
import time

import numpy as np
import torch

from pi0_ros.tools.bench import random_frames
from pi0_ros.engine import EngineOptions, ModelDims, Pi0Engine

INSTRUCTION = 'pick up the red cube and place it in the bin'


def upload_variant(engine: Pi0Engine, name: str, pinned: torch.Tensor,
                   pool: ThreadPoolExecutor):
    """Return an _upload replacement for the engine (pinned: a host copy of its frame rows)."""
    def upload(pending, start, stop, pipelined):
        compute = torch.cuda.current_stream(engine.device)
        stream = engine._copy_stream if pipelined else compute
        host = pinned.numpy()

        def stage(index):
            frame = pending[index][3]
            np.copyto(host[index, :frame.size].reshape(frame.shape), frame)
            return frame.size

        if name == 'direct':
            with torch.cuda.stream(stream):
                for index in range(start, stop):
                    frame = np.ascontiguousarray(pending[index][3])
                    engine._device_frames[index, :frame.size].copy_(
                        torch.from_numpy(frame).view(-1), non_blocking=True)
        else:
            sizes = (pool.map(stage, range(start, stop)) if name == 'threads'
                     else map(stage, range(start, stop)))
            with torch.cuda.stream(stream):
                for index, size in zip(range(start, stop), sizes):
                    engine._device_frames[index, :size].copy_(pinned[index, :size],
                                                              non_blocking=True)
        if pipelined:
            compute.wait_stream(stream)
    return upload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--json', required=True)
    parser.add_argument('--iters', type=int, default=100)
    args = parser.parse_args()
    engine = Pi0Engine.random(ModelDims.full(), state_dim=14, action_dim=14, num_cameras=3,
                              options=EngineOptions(device='cuda', precision='bf16',
                                                    max_batch=8))
    engine.warmup()
    rng = np.random.default_rng(0)
    pool = [random_frames(rng) for _ in range(32)]
    states = rng.normal(size=(len(pool), 14)).astype(np.float32)
    original = engine._upload
    pinned = torch.empty(engine._device_frames.shape, dtype=torch.uint8, pin_memory=True)
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix='frame_copy')
    results = []
    for batch in (1, 8):
        for name in ('threads', 'serial', 'direct'):
            engine._upload = upload_variant(engine, name, pinned, pool)
            latencies, pre = [], []
            for index in range(args.iters + 5):
                picks = [(index * batch + k) % len(pool) for k in range(batch)]
                start = time.perf_counter()
                out = engine.infer_batch([(pool[p], states[p], INSTRUCTION) for p in picks])
                elapsed = (time.perf_counter() - start) * 1e3
                if index >= 5:
                    latencies.append(elapsed)
                    pre.append(out[0].timings_ms['preprocess'])
            row = {'batch': batch, 'variant': name, 'p50_ms': statistics.median(latencies),
                   'preprocess_p50_ms': statistics.median(pre)}
            results.append(row)
            print(row, flush=True)
    engine._upload = original
    pool.shutdown()
    with open(args.json, 'w') as handle:
        json.dump({'device': torch.cuda.get_device_name(), 'results': results}, handle,
                  indent=1)


if __name__ == '__main__':
    main()
