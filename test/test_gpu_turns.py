# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Turns on a shared GPU: one engine call at a time across processes, released by a dead one."""
import ast
import itertools
import subprocess
import sys
import threading
import time

import pytest
from test_worker import Collector, observation, ScriptedEngine, started_worker, TIMEOUT, wait_for

from pi0_ros.engine import gpu_turns
from pi0_ros.engine.gpu_turns import GpuTurns
from pi0_ros.worker import WorkerState

HOLDER = """
import sys, time
from pi0_ros.engine.gpu_turns import GpuTurns
with GpuTurns(sys.argv[1]):
    print('held', flush=True)
    time.sleep(float(sys.argv[2]))
"""


TAKER = """
import sys, time
from pi0_ros.engine.gpu_turns import GpuTurns
turns, times = GpuTurns(sys.argv[1]), []
for _ in range(int(sys.argv[2])):
    with turns:  # a call of 2 ms, then at once the next: always asking
        times.append(time.monotonic())
        end = time.monotonic() + 0.002
        while time.monotonic() < end:
            pass
print(repr(times))
"""


def hold_in_another_process(path, seconds):
    """Start a process that takes the turn and holds it; return once it holds it."""
    holder = subprocess.Popen([sys.executable, '-c', HOLDER, str(path), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == 'held'
    return holder


def test_a_turn_waits_for_another_process_turn_and_counts_the_wait(tmp_path):
    path = tmp_path / 'gpu.lock'
    turns = GpuTurns(path)
    with turns:  # free: no wait
        pass
    assert turns.waited == 0 and turns.last_wait_s == 0.0
    holder = hold_in_another_process(path, 0.5)
    started = time.monotonic()
    with turns:
        waited = time.monotonic() - started
    holder.wait(TIMEOUT)
    assert waited > 0.2
    assert turns.waited == 1 and turns.last_wait_s == pytest.approx(waited, abs=0.05)
    turns.close()


def test_a_process_killed_in_its_turn_releases_it(tmp_path):
    path = tmp_path / 'gpu.lock'
    holder = hold_in_another_process(path, 60)
    turns = GpuTurns(path)
    got = threading.Event()

    def take():
        with turns:
            got.set()
    thread = threading.Thread(target=take)
    thread.start()
    assert not got.wait(0.3)  # the other process holds it
    holder.kill()
    holder.wait(TIMEOUT)
    assert got.wait(TIMEOUT)
    thread.join(TIMEOUT)
    turns.close()


def test_two_processes_asking_again_at_once_take_turns_in_order(tmp_path):
    # Without the gate, the process that just released the lock usually took it again before
    # the waiting one woke up (hundreds of turns in a row on this 2-core machine).
    path, turns = tmp_path / 'gpu.lock', 150
    takers = [subprocess.Popen([sys.executable, '-c', TAKER, str(path), str(turns)],
                               stdout=subprocess.PIPE, text=True) for _ in range(2)]
    times = [ast.literal_eval(taker.communicate(timeout=60)[0]) for taker in takers]
    # While both ask: from the later first turn to the earlier last one.
    begin, end = max(t[0] for t in times), min(t[-1] for t in times)
    order = [who for _, who in sorted((t, who) for who, ts in enumerate(times) for t in ts
                                      if begin <= t <= end)]
    counts = [order.count(0), order.count(1)]
    assert min(counts) >= 20 and min(counts) >= 0.5 * max(counts), counts
    assert max(len(list(run)) for _, run in itertools.groupby(order)) <= 10, order


def test_turns_are_for_cuda_devices_only():
    assert GpuTurns.for_device('cpu') is None


def test_the_worker_takes_the_newest_observation_once_the_turn_is_its(tmp_path, monkeypatch):
    path = tmp_path / 'gpu.lock'
    monkeypatch.setattr(gpu_turns.GpuTurns, 'for_device',
                        classmethod(lambda cls, device: cls(path)))
    other = GpuTurns(path)  # another process's engine call, here a second open file
    engine, collector = ScriptedEngine(), Collector()
    worker = started_worker(engine, collector, gpu_turns=True)
    with other:
        worker.submit(observation(instruction='older'))
        time.sleep(0.3)  # without turns the call would run 'older' now
        assert engine.calls == []
        assert worker.turn_wait_s > 0.2  # what the diagnostics report
        worker.submit(observation(instruction='newer'))
    engine.gate.release()
    collector.wait()
    assert engine.calls == ['newer']
    assert worker.turn_wait_s == 0.0
    assert worker.counters['gpu_turn_waits'] == 1
    assert worker.counters['gpu_turn_wait_ms'] >= 200
    # The next call finds the GPU free: not counted as a wait.
    worker.submit(observation(instruction='again'))
    engine.gate.release()
    collector.wait()
    assert worker.counters['gpu_turn_waits'] == 1
    assert worker.stop(TIMEOUT) and worker.state is WorkerState.STOPPED
    assert wait_for(lambda: engine.closed)
    other.close()
