# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Run the control node with an engine whose faults a test switches through a file.

The file named by PI0_ROS_FAULT_FILE holds one word, read before every inference:
  ok      the real (tiny, random) engine answers
  raise   infer() raises RuntimeError
  oom     infer() raises torch.cuda.OutOfMemoryError (what a real CUDA OOM raises)
  nan     infer() returns a chunk full of NaN
  slow    infer() takes 1.5 s longer
PI0_ROS_BUILD_DELAY (seconds, optional) makes building the engine take that much longer.
"""
import os
from pathlib import Path
import sys
import threading

import numpy as np

import pi0_ros.node as control_node

FAULT_FILE = Path(os.environ['PI0_ROS_FAULT_FILE'])


class FaultyEngine:
    """Delegates to the real engine unless the fault file says otherwise."""

    def __init__(self, engine):
        self._engine = engine
        self._pause = threading.Event()

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def infer(self, *args, **kwargs):
        mode = FAULT_FILE.read_text().strip() if FAULT_FILE.exists() else 'ok'
        if mode == 'raise':
            raise RuntimeError('injected engine failure')
        if mode == 'oom':
            import torch
            raise torch.cuda.OutOfMemoryError('CUDA out of memory (injected)')
        result = self._engine.infer(*args, **kwargs)
        if mode == 'nan':
            result.actions[:] = np.nan
        elif mode == 'slow':
            self._pause.wait(1.5)
        return result


def main():
    build = control_node.build_engine
    delay = float(os.environ.get('PI0_ROS_BUILD_DELAY', '0'))

    def faulty_build(settings):
        threading.Event().wait(delay)  # a checkpoint that takes long to load
        return FaultyEngine(build(settings))

    control_node.build_engine = faulty_build
    return control_node.main()


if __name__ == '__main__':
    sys.exit(main())
