# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Host work of the inference thread with and without busy Python threads beside it (CPU).

A fleet process runs an executor thread and a control thread beside the inference thread; when
they are busy, each Python-level step of the inference thread's host path waits for the GIL
(sys.setswitchinterval as the node sets it). This times the host side of one Real-Time Chunking
request (pi0_ros.engine.rtc.plan_guidance) as it is now (its weights computed once per setting
and shared) and as it was (the weight functions run on every call), and the packing of a fleet
call's 12 frames for the upload as the engine copies them and with numpy's copy, alone and beside
1 and 2 threads that spin in Python.

    python benchmarks/gil_contention.py --json gil_contention.json
"""
import argparse
import json
import platform
import sys
import threading
import time
from unittest import mock

import numpy as np

from pi0_ros.engine import ModelDims
from pi0_ros.engine import rtc
from pi0_ros.engine.config import RTCOptions, RTCRequest
from pi0_ros.engine.preprocess import copy_frame_bytes
from pi0_ros.executors import SWITCH_INTERVAL_S  # as the node's and the fleet's main set it


def time_calls(function, calls):
    """Return the mean, median and p99 of one call's wall time (ms) over `calls` calls."""
    times = []
    for index in range(calls):
        start = time.perf_counter()
        function(index)
        times.append(time.perf_counter() - start)
    times = np.asarray(times) * 1e3
    return {'mean': float(times.mean()), 'p50': float(np.median(times)),
            'p99': float(np.percentile(times, 99))}


class BusyThreads:
    """Threads that run Python bytecode without a pause while the block runs."""

    def __init__(self, count):
        self.count = count
        self._stop = threading.Event()
        self._threads = []

    def _spin(self):
        value = 0
        while not self._stop.is_set():
            for _ in range(1000):
                value += 1

    def __enter__(self):
        self._threads = [threading.Thread(target=self._spin, daemon=True)
                         for _ in range(self.count)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--calls', type=int, default=200)
    parser.add_argument('--busy', default='0,1,2', help='busy thread counts')
    parser.add_argument('--json', default='')
    args = parser.parse_args(argv)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    dims, options = ModelDims(), RTCOptions()
    # Delays 5..11 as a running node's requests vary; a 44-row previous chunk of 6 joints.
    requests = [RTCRequest(np.zeros((44, 6), np.float32), delay) for delay in range(5, 12)]

    def plan(index):
        plan_, reason = rtc.plan_guidance(requests[index % len(requests)], dims, 6, options)
        assert plan_ is not None, reason

    # A fleet call's frames (4 observations of 3 cameras, 640x480) packed for the upload, as the
    # engine copies them (preprocess.copy_frame_bytes) and with numpy's copy per frame.
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (480, 640, 3), dtype=np.uint8) for _ in range(12)]
    packed = np.zeros(sum(frame.size for frame in frames), np.uint8)
    packed_bytes = memoryview(packed)

    def pack_frames(_):
        offset = 0
        for frame in frames:
            offset = copy_frame_bytes(frame, packed, packed_bytes, offset)

    def pack_frames_numpy(_):
        offset = 0
        for frame in frames:
            np.copyto(packed[offset:offset + frame.size].reshape(frame.shape), frame)
            offset += frame.size

    uncached = {'prefix_weights': rtc.prefix_weights.__wrapped__,
                'guidance_weights': rtc.guidance_weights.__wrapped__}
    results = {}
    for busy in [int(n) for n in args.busy.split(',')]:
        with BusyThreads(busy):
            for stat, value in time_calls(plan, args.calls).items():
                results[f'busy{busy}_plan_guidance_{stat}_ms'] = value
            with mock.patch.multiple(rtc, **uncached):
                for stat, value in time_calls(plan, args.calls).items():
                    results[f'busy{busy}_plan_guidance_uncached_{stat}_ms'] = value
            for name, function in (('pack_frames', pack_frames),
                                   ('pack_frames_numpy', pack_frames_numpy)):
                for stat, value in time_calls(function, args.calls).items():
                    results[f'busy{busy}_{name}_{stat}_ms'] = value
    report = {'command': 'python benchmarks/gil_contention.py ' + ' '.join(argv or sys.argv[1:]),
              'python': platform.python_version(), 'switch_interval_s': SWITCH_INTERVAL_S,
              'calls': args.calls, 'results': {k: round(v, 4) for k, v in results.items()}}
    for key, value in report['results'].items():
        print(f'{key:>46}: {value:9.4f}')
    if args.json:
        with open(args.json, 'w') as stream:
            json.dump(report, stream, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
