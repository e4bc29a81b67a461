# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Kernel timeline of the engine's CUDA graphs as they replay (GPU only; writes JSON).

`bench --profile` times one eager call, where no kernel overlaps the next; in the engine's
graphs the Triton kernels launch as programmatic dependents (PDL), so a kernel's time on the
critical path is the gap between the end of the kernel before it and its own end, not its
duration. This script builds the full-size engine (random weights) for --batch observations
per call (batch 1 by default, as the node runs it; the engine built for exactly that batch),
profiles a few
calls with CUPTI (torch.profiler), and reports per kernel name: count, median duration and
median "step" (end minus the latest end before it, i.e. what it adds to the chain), plus the
whole kernel sequence of the last call (start and end times from its first kernel).
Usage: python benchmarks/graph_timeline.py --calls 3 [--batch 8] --json timeline.json
"""
import argparse
import json
import os
import statistics
import tempfile

import numpy as np
import torch

from pi0_ros.tools.bench import INSTRUCTION, random_frames
from pi0_ros.engine import EngineOptions, ModelDims, Pi0Engine


def kernel_events(trace: dict) -> list:
    """
    Return the trace's GPU work as (start_us, end_us, name), in start order.

    Kernels, and the graphs' memset and memcpy nodes (which also sit on the chain).
    """
    kernels = [(event['ts'], event['ts'] + event['dur'], event['name'])
               for event in trace.get('traceEvents', [])
               if event.get('cat') in ('kernel', 'gpu_memset', 'gpu_memcpy')
               and 'dur' in event]
    return sorted(kernels)


def summarize(kernels: list) -> dict:
    """Per kernel name: count, median duration and median step (end - previous end), in us."""
    durations, steps = {}, {}
    previous_end = None
    for start, end, name in kernels:
        durations.setdefault(name, []).append(end - start)
        if previous_end is not None:
            steps.setdefault(name, []).append(end - previous_end)
        previous_end = end if previous_end is None else max(previous_end, end)
    return {name: {'count': len(values), 'median_us': statistics.median(values),
                   'total_us': sum(values),
                   'median_step_us': statistics.median(steps[name]) if name in steps else None}
            for name, values in sorted(durations.items(), key=lambda item: -sum(item[1]))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--calls', type=int, default=3)
    parser.add_argument('--batch', type=int, default=1, help='observations per call')
    parser.add_argument('--json', default='graph_timeline.json')
    args = parser.parse_args(argv)
    engine = Pi0Engine.random(ModelDims.full(), state_dim=14, action_dim=14, num_cameras=3,
                              options=EngineOptions(precision='bf16', device='cuda',
                                                    max_batch=args.batch,
                                                    batch_buckets=(args.batch,)))
    engine.warmup()
    rng = np.random.default_rng(0)

    def observations():
        return [(random_frames(rng), rng.normal(size=14).astype(np.float32), INSTRUCTION)
                for _ in range(args.batch)]

    for _ in range(5):
        engine.infer_batch(observations())  # as infer() at batch 1: the same path
    torch.cuda.synchronize()
    calls = []
    for _ in range(args.calls):
        inputs = observations()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            engine.infer_batch(inputs)
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, 'trace.json')
            prof.export_chrome_trace(path)
            with open(path, encoding='utf-8') as stream:
                calls.append(kernel_events(json.load(stream)))
    kernels = calls[-1]
    origin = kernels[0][0] if kernels else 0.0
    report = {'batch': args.batch,
              'calls': [{'kernels': len(call), 'span_us': call[-1][1] - call[0][0]}
                        for call in calls if call],
              'summary': summarize(kernels),
              'sequence': [{'start_us': start - origin, 'end_us': end - origin, 'name': name}
                           for start, end, name in kernels]}
    for call in report['calls']:
        print(f"{call['kernels']} kernels over {call['span_us'] / 1e3:.2f} ms")
    for name, entry in list(report['summary'].items())[:25]:
        step = entry['median_step_us']
        print(f"{entry['count']:5d} x {entry['median_us']:7.2f} us (step "
              f"{step if step is None else round(step, 2)}) {name[:90]}")
    with open(args.json, 'w', encoding='utf-8') as stream:
        json.dump(report, stream, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
