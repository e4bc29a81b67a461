# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
How fast camera frames move from numpy arrays to the GPU on this host (GPU only; writes JSON).

For 3, 6 and 24 frames of 480x640x3 uint8 (one observation, a first quarter of batch 8, batch
8), the median milliseconds of: uploads straight from the arrays (pageable; what the engine
does), the DMA alone from pinned memory, and the copy into pinned memory by numpy (serial and on
a thread pool, with and without the DMA after it) or by PyTorch's CPU copy on 1-16 intra-op
threads. The engine's own stages are pi0_ros.tools.bench's and engine_ab.py's business.
Usage: python benchmarks/upload_bandwidth.py --json upload_bandwidth.json
"""
import argparse
from concurrent.futures import ThreadPoolExecutor
import json
import os
import time

import numpy as np
import torch

from pi0_ros.tools.bench import random_frames


def median_ms(function, repeats: int = 20) -> float:
    """Median wall milliseconds of function() followed by a device synchronization."""
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        function()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e3)
    return float(np.median(samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--json', default='upload_bandwidth.json')
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    frames = [frame.reshape(-1) for frame in random_frames(rng, 24)]
    device = torch.empty(24, frames[0].size, dtype=torch.uint8, device='cuda')
    pinned = torch.empty(24, frames[0].size, dtype=torch.uint8).pin_memory()
    pinned_array = pinned.numpy()
    report = {'device': torch.cuda.get_device_name(), 'cpus': os.cpu_count(), 'frames': {}}
    for count in (3, 6, 24):
        def stage(index):
            np.copyto(pinned_array[index], frames[index])

        result = {
            'pageable_direct': median_ms(lambda: [
                device[i].copy_(torch.from_numpy(frames[i]), non_blocking=True)
                for i in range(count)]),
            'pinned_dma_only': median_ms(
                lambda: device[:count].copy_(pinned[:count], non_blocking=True)),
            'np_copyto_serial': median_ms(lambda: [stage(i) for i in range(count)])}
        for threads in (2, 4, 8):
            with ThreadPoolExecutor(threads) as pool:
                result[f'np_copyto_pool{threads}'] = median_ms(
                    lambda: list(pool.map(stage, range(count))))
                result[f'staged_pool{threads}_plus_dma'] = median_ms(lambda: (
                    list(pool.map(stage, range(count))),
                    device[:count].copy_(pinned[:count], non_blocking=True)))
        default_threads = torch.get_num_threads()
        for threads in (1, 4, 8, 16):
            torch.set_num_threads(threads)
            result[f'torch_copy_threads{threads}'] = median_ms(lambda: [
                pinned[i].copy_(torch.from_numpy(frames[i])) for i in range(count)])
        torch.set_num_threads(default_threads)
        report['frames'][count] = result
        print(count, {name: round(value, 3) for name, value in result.items()}, flush=True)
    with open(args.json, 'w', encoding='utf-8') as stream:
        json.dump(report, stream, indent=1)


if __name__ == '__main__':
    main()
