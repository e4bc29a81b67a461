# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Where the host's time goes in Pi0Engine.infer / infer_batch (GPU only; prints, changes nothing).

The full-size random engine runs as the benchmark runs it (new 480x640 frames every call) under
cProfile; the functions with the most own time are printed per batch size, and written to
--out as text. The GPU's own time is the stage events' business (pi0_ros.tools.bench); this shows the
Python and copy work around it (validation, staging frames into pinned memory, launches).
Usage: python benchmarks/host_profile.py --batches 1,8 --iters 100 --out host_profile.txt
"""
import argparse
import cProfile
import io
import pstats

import numpy as np

from pi0_ros.tools.bench import random_frames
from pi0_ros.engine import EngineOptions, ModelDims, Pi0Engine

INSTRUCTION = 'pick up the red cube and place it in the bin'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--batches', default='1,8')
    parser.add_argument('--iters', type=int, default=100)
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(',')]
    engine = Pi0Engine.random(ModelDims.full(), state_dim=14, action_dim=14, num_cameras=3,
                              options=EngineOptions(device='cuda', precision='bf16',
                                                    max_batch=max(batches)))
    engine.warmup()
    rng = np.random.default_rng(0)
    pool = [random_frames(rng) for _ in range(4 * max(batches))]
    states = rng.normal(size=(len(pool), 14)).astype(np.float32)
    report = io.StringIO()
    for batch in batches:
        def run(iters):
            for index in range(iters):
                picks = [(index * batch + k) % len(pool) for k in range(batch)]
                engine.infer_batch([(pool[p], states[p], INSTRUCTION) for p in picks])

        run(5)
        profiler = cProfile.Profile()
        profiler.runcall(run, args.iters)
        report.write(f'==== batch {batch}: {args.iters} calls, own time (tottime) ====\n')
        stats = pstats.Stats(profiler, stream=report)
        stats.sort_stats('tottime').print_stats(25)
        report.write(f'==== batch {batch}: cumulative ====\n')
        stats.sort_stats('cumulative').print_stats(30)
    text = report.getvalue()
    print(text[:6000])
    with open(args.out, 'w') as handle:
        handle.write(text)


if __name__ == '__main__':
    main()
