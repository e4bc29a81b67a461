# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Turns on a shared GPU: one engine call at a time across processes, released by a dead one."""
import fcntl
import os
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
    assert turns.waited == 1 and turns.last_wait_s == pytest.approx(waited, abs=0.1)
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


def locked(path):
    """Whether someone holds the flock of the file at path."""
    probe = os.open(str(path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(probe, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(probe)


def gate_held(path):
    """Whether someone holds the gate of the turns at path (a waiting process does)."""
    return locked(f'{path}.gate')


def turn_free(path):
    """Whether no one holds the turn of the turns at path."""
    return not locked(path)


def test_a_process_asking_again_at_once_queues_behind_the_one_waiting(tmp_path):
    # Two open files of one lock exclude each other as two processes' do. With a plain lock the
    # process asking again right after its call usually took it again before the waiting one
    # woke up (up to 96 turns in a row on a busy 2-core host).
    path = tmp_path / 'gpu.lock'
    first, second = GpuTurns(path), GpuTurns(path)
    order = []

    def second_call():
        with second:
            order.append('second')
    with first:
        waiting = threading.Thread(target=second_call)
        waiting.start()
        assert wait_for(lambda: gate_held(path))  # the second waits for the turn
    with first:  # at once again
        order.append('first')
    waiting.join(TIMEOUT)
    assert order == ['second', 'first']
    # The second waited; whether the first did depends on whether the second's turn was over
    # by the time it asked again (it failed under load when asserted).
    assert second.waited == 1
    first.close()
    second.close()


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


def test_a_turn_released_in_its_block_is_free_and_not_released_twice(tmp_path):
    path = tmp_path / 'gpu.lock'
    first, other = GpuTurns(path), GpuTurns(path)
    with first:
        assert not turn_free(path)
        first.release()
        assert turn_free(path)
        with other:  # the other process's turn begins while the first block still runs
            first.release()  # a second release does not end the other's turn
            assert not turn_free(path)
    assert turn_free(path)
    first.close()
    other.close()


class TailEngine(ScriptedEngine):
    """A ScriptedEngine that calls on_gpu_tail as Pi0Engine does, before its result."""

    def infer(self, frames, state, instruction, frame_keys=None, on_gpu_tail=None):
        if on_gpu_tail is not None:
            on_gpu_tail()
        return super().infer(frames, state, instruction, frame_keys)


@pytest.mark.parametrize('early, engine_type, ends_early', [
    (True, TailEngine, True),
    (False, TailEngine, False),
    (True, ScriptedEngine, False),  # an engine without on_gpu_tail: a warning
])
def test_the_turn_ends_at_the_engines_gpu_tail_where_asked_and_the_engine_can(
        tmp_path, monkeypatch, early, engine_type, ends_early):
    path = tmp_path / 'gpu.lock'
    monkeypatch.setattr(gpu_turns.GpuTurns, 'for_device',
                        classmethod(lambda cls, device: cls(path)))
    engine, collector = engine_type(), Collector()
    worker = started_worker(engine, collector, gpu_turns=True,
                            end_turn_early=early)
    worker.submit(observation())
    assert wait_for(lambda: engine.calls == ['pick'])  # in the call, waiting for its gate
    assert turn_free(path) == ends_early
    engine.gate.release()
    collector.wait()
    assert turn_free(path)
    assert worker.stop(TIMEOUT)
