# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The inference worker thread: latest wins, epochs, bounded retries, failure, clean stop."""
from dataclasses import dataclass
import os
import threading

import numpy as np

from pi0_ros.engine.errors import InputError
from pi0_ros.worker import InferenceWorker, Observation, WorkerState

TIMEOUT = 10.0


@dataclass
class Output:
    actions: np.ndarray
    timings_ms: dict
    vision_cache_hits: int = 0


class ScriptedEngine:
    """An engine whose infer() blocks until released and can be told to fail."""

    def __init__(self):
        self.calls = []
        self.gate = threading.Semaphore(0)
        self.fail_next = 0
        self.reject_next = 0
        self.closed = False
        self.thread_names = []
        self.encoded = []  # (camera, key) per encode_frames call
        self.fail_encode = 0

    def warmup(self):
        self.thread_names.append(threading.current_thread().name)

    def infer(self, frames, state, instruction, frame_keys=None):
        self.thread_names.append(threading.current_thread().name)
        self.calls.append(instruction)
        assert self.gate.acquire(timeout=TIMEOUT)
        if self.reject_next:
            self.reject_next -= 1
            raise InputError('frame 0 is 1920x8: more than 224:1, too thin (injected)')
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError('CUDA out of memory (injected)')
        return Output(np.full((50, 6), float(len(self.calls))), {'total': 1.0})

    def encode_frames(self, frames, frame_keys):
        self.thread_names.append(threading.current_thread().name)
        if self.fail_encode:
            self.fail_encode -= 1
            raise ValueError('frame is 4000x3000, larger than the maximum (injected)')
        self.encoded.extend(frame_keys.items())
        return len(frame_keys)

    def close(self):
        self.closed = True


def observation(epoch=1, instruction='pick', stamp=1.0, frame_keys=(None,) * 3):
    return Observation(stamp=stamp, stamp_ns=int(stamp * 1e9),
                       frames=(np.zeros((4, 4, 3), np.uint8),) * 3, frame_keys=frame_keys,
                       state=np.zeros(6), instruction=instruction, epoch=epoch)


class Collector:
    def __init__(self):
        self.results = []
        self.event = threading.Event()

    def __call__(self, result):
        self.results.append(result)
        self.event.set()

    def wait(self):
        assert self.event.wait(TIMEOUT)
        self.event.clear()


def started_worker(engine, collector, **kwargs):
    worker = InferenceWorker(lambda: engine, collector, **kwargs)
    worker.start()
    assert worker.wait_ready(TIMEOUT)
    worker.set_epoch(1)
    return worker


def wait_for(predicate):
    event = threading.Event()
    for _ in range(int(TIMEOUT / 0.01)):
        if predicate():
            return True
        event.wait(0.01)
    return predicate()


def test_engine_runs_on_the_named_worker_thread_and_latest_observation_wins():
    engine, collector = ScriptedEngine(), Collector()
    worker = started_worker(engine, collector)
    worker.submit(observation(instruction='first'))
    assert wait_for(lambda: engine.calls == ['first'])
    # While 'first' runs, two more arrive: the second replaces the first of them.
    worker.submit(observation(instruction='stale'))
    worker.submit(observation(instruction='latest'))
    engine.gate.release()
    collector.wait()
    assert wait_for(lambda: engine.calls == ['first', 'latest'])
    engine.gate.release()
    collector.wait()
    assert [r.observation.instruction for r in collector.results] == ['first', 'latest']
    assert worker.counters['dropped'] == 1
    assert set(engine.thread_names) == {'pi0_inference'}
    assert worker.stop(TIMEOUT)
    assert engine.closed and worker.state is WorkerState.STOPPED


def test_the_worker_thread_runs_at_the_niceness_asked_for_and_by_default_at_the_callers():
    def niceness_of_the_building_thread():
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    own = os.getpriority(os.PRIO_PROCESS, 0)
    for kwargs, expected in (({}, own), ({'niceness': min(own + 3, 19)}, min(own + 3, 19))):
        seen = []
        worker = InferenceWorker(lambda: seen.append(niceness_of_the_building_thread())
                                 or ScriptedEngine(), Collector(), **kwargs)
        worker.start()
        assert worker.wait_ready(TIMEOUT)
        assert seen == [expected]
        assert worker.stop(TIMEOUT)


def test_results_for_an_old_epoch_are_discarded():
    engine, collector = ScriptedEngine(), Collector()
    worker = started_worker(engine, collector)
    worker.submit(observation(epoch=1))
    assert wait_for(lambda: len(engine.calls) == 1)
    worker.set_epoch(2)  # the instruction changed while the engine ran
    engine.gate.release()
    assert wait_for(lambda: worker.counters['discarded'] == 1)
    assert collector.results == []
    worker.submit(observation(epoch=2))
    engine.gate.release()
    collector.wait()
    assert collector.results[0].observation.epoch == 2
    worker.stop(TIMEOUT)


def test_a_waiting_observation_of_an_old_epoch_is_dropped_not_a_discarded_chunk():
    engine, collector = ScriptedEngine(), Collector()
    worker = started_worker(engine, collector)
    worker.submit(observation(epoch=1, stamp=1.0))
    assert wait_for(lambda: len(engine.calls) == 1)    # running
    worker.submit(observation(epoch=1, stamp=2.0))     # waiting
    worker.set_epoch(2)                                # drops the waiting one
    engine.gate.release()
    assert wait_for(lambda: worker.counters['discarded'] == 1)   # the running one's chunk
    assert worker.counters['dropped'] == 1 and len(engine.calls) == 1
    worker.stop(TIMEOUT)


def test_an_older_epoch_reported_late_does_not_roll_the_epoch_back():
    # Two callbacks (instruction, clock jump) on different executor threads bump the node's
    # epoch to 2 and 3 and report them in the other order.
    engine, collector = ScriptedEngine(), Collector()
    worker = started_worker(engine, collector)
    worker.set_epoch(3)
    worker.set_epoch(2)
    worker.submit(observation(epoch=3))
    engine.gate.release()
    collector.wait()
    assert collector.results[0].observation.epoch == 3
    assert worker.counters['discarded'] == 0
    worker.stop(TIMEOUT)


def test_observations_the_engine_rejects_as_input_are_counted_not_failures():
    engine, collector = ScriptedEngine(), Collector()
    worker = started_worker(engine, collector, max_consecutive_failures=2)
    engine.reject_next = 5                       # more than the failures allowed
    for count in range(1, 6):
        worker.submit(observation())
        engine.gate.release()
        assert wait_for(lambda: worker.counters['inputs_rejected'] == count)
    assert worker.state is WorkerState.READY and worker.counters['failures'] == 0
    worker.submit(observation())
    engine.gate.release()
    collector.wait()                             # a good observation still gets its chunk
    worker.stop(TIMEOUT)


def test_bounded_retries_then_failed_state_until_recover():
    engine, collector = ScriptedEngine(), Collector()
    worker = started_worker(engine, collector, max_consecutive_failures=2)
    engine.fail_next = 3
    for attempt in range(3):
        worker.submit(observation(stamp=float(attempt)))
        engine.gate.release()
        assert wait_for(lambda: worker.counters['failures'] == attempt + 1)
    assert wait_for(lambda: worker.state is WorkerState.FAILED)
    assert 'out of memory' in worker.error
    # FAILED: observations are not inferred until recover().
    worker.submit(observation(stamp=9.0))
    threading.Event().wait(0.2)  # a negative check: give a wrong inference the time to start
    assert len(engine.calls) == 3
    assert worker.recover()
    engine.gate.release()
    collector.wait()
    assert collector.results[-1].observation.stamp == 9.0
    assert worker.consecutive_failures == 0
    assert worker.error == ''    # no stale error reported next to a working engine
    worker.stop(TIMEOUT)


def test_an_inference_after_a_failure_clears_the_reported_error():
    engine, collector = ScriptedEngine(), Collector()
    worker = started_worker(engine, collector, max_consecutive_failures=3)
    engine.fail_next = 1
    worker.submit(observation(stamp=1.0))
    engine.gate.release()
    assert wait_for(lambda: worker.counters['failures'] == 1)
    assert 'out of memory' in worker.error and worker.state is not WorkerState.FAILED
    worker.submit(observation(stamp=2.0))
    engine.gate.release()
    collector.wait()
    assert worker.error == '' and worker.consecutive_failures == 0
    worker.stop(TIMEOUT)


def test_engine_that_fails_to_build_reports_failed():
    def broken():
        raise FileNotFoundError('model.safetensors missing')

    worker = InferenceWorker(broken, Collector())
    worker.start()
    assert not worker.wait_ready(TIMEOUT)
    assert worker.state is WorkerState.FAILED
    assert 'model.safetensors missing' in worker.error
    assert worker.stop(TIMEOUT)


def test_a_malformed_engine_output_is_an_inference_failure_not_a_dead_thread():
    engine, collector = ScriptedEngine(), Collector()
    worker = started_worker(engine, collector, max_consecutive_failures=0)
    infer = engine.infer
    engine.infer = lambda *args, **kwargs: Output(infer(*args, **kwargs).actions, None)
    worker.submit(observation())
    engine.gate.release()
    assert wait_for(lambda: worker.state is WorkerState.FAILED)
    assert worker.alive and 'TypeError' in worker.error   # dict(None): counted, logged
    worker.stop(TIMEOUT)


def test_a_crash_outside_the_engine_leaves_the_worker_failed_and_logged():
    def broken_callback(result):
        raise RuntimeError('callback bug (injected)')

    engine, logger = ScriptedEngine(), Warnings()
    worker = started_worker(engine, broken_callback, logger=logger)
    worker.submit(observation())
    engine.gate.release()
    assert wait_for(lambda: not worker.alive)
    # FAILED (the node holds the arm for it), never a silent STOPPED; recover() cannot revive
    # a thread that is gone.
    assert worker.state is WorkerState.FAILED and 'callback bug' in worker.error
    assert any('inference thread crashed' in line for line in logger.lines)
    assert not worker.recover() and worker.state is WorkerState.FAILED


def test_an_observation_of_a_newer_epoch_than_the_worker_knows_is_kept():
    # The node's new epoch reaches the worker after an observation made in it (set_epoch is
    # called outside the node's lock).
    engine, collector = ScriptedEngine(), Collector()
    worker = started_worker(engine, collector)
    worker.submit(observation(epoch=2))
    engine.gate.release()
    collector.wait()                              # inferred and delivered before set_epoch(2)
    worker.submit(observation(epoch=2, instruction='running'))
    assert wait_for(lambda: engine.calls[-1] == 'running')
    worker.submit(observation(epoch=3, instruction='waiting'))
    worker.set_epoch(2)                           # late: the waiting one is newer, kept
    engine.gate.release()
    engine.gate.release()
    assert wait_for(lambda: len(collector.results) == 3)
    assert [r.observation.epoch for r in collector.results] == [2, 2, 3]
    assert worker.counters['discarded'] == 0
    worker.stop(TIMEOUT)


def test_a_failed_build_cannot_be_recovered_into_a_ready_worker_without_engine():
    recovered = []

    class RecoverOnReady(threading.Event):
        def set(self):  # noqa: A003 - threading.Event.set, overridden
            recovered.append(worker.recover())  # the node's ~/enable racing the failure
            super().set()

    engine = ScriptedEngine()

    def broken_warmup():
        raise RuntimeError('CUDA out of memory during warm-up (injected)')

    engine.warmup = broken_warmup
    worker = InferenceWorker(lambda: engine, Collector())
    worker._ready = RecoverOnReady()
    worker.start()
    assert not worker.wait_ready(TIMEOUT)
    assert recovered == [False] and worker.state is WorkerState.FAILED


FRAME = np.zeros((4, 4, 3), np.uint8)


class Warnings:
    def __init__(self):
        self.lines = []

    def warning(self, message):
        self.lines.append(message)

    error = info = warning


def worker_busy_with_first(engine, collector):
    """Start a worker and return it once its engine is inside infer() for 'first'."""
    worker = started_worker(engine, collector)
    worker.submit(observation(instruction='first'))
    assert wait_for(lambda: engine.calls == ['first'])
    return worker


def test_frames_are_encoded_ahead_while_idle_newest_per_camera():
    engine, collector = ScriptedEngine(), Collector()
    worker = worker_busy_with_first(engine, collector)
    # While the engine is busy, camera 0 sends two frames and camera 1 one.
    worker.offer_frame(0, FRAME, 'a')
    worker.offer_frame(0, FRAME, 'b')
    worker.offer_frame(1, FRAME, 'c')
    threading.Event().wait(0.1)  # a negative check: nothing is encoded during the inference
    assert engine.encoded == []
    engine.gate.release()
    collector.wait()
    assert wait_for(lambda: engine.encoded == [(0, 'b'), (1, 'c')])
    assert worker.counters['frames_encoded_ahead'] == 2
    assert worker.state is WorkerState.READY and not worker.busy
    assert set(engine.thread_names) == {'pi0_inference'}
    worker.stop(TIMEOUT)


def test_an_observation_goes_before_arrived_frames_and_encodes_its_own():
    engine, collector = ScriptedEngine(), Collector()
    worker = worker_busy_with_first(engine, collector)
    worker.offer_frame(0, FRAME, 'x')
    worker.offer_frame(1, FRAME, 'y')
    worker.submit(observation(instruction='second', frame_keys=('x', 'z', 'w')))
    engine.gate.release()
    collector.wait()
    # 'second' runs next, before any frame is encoded ahead; its own frame 'x' is left to it.
    assert wait_for(lambda: engine.calls == ['first', 'second'])
    assert engine.encoded == []
    engine.gate.release()
    collector.wait()
    assert wait_for(lambda: engine.encoded == [(1, 'y')])
    worker.stop(TIMEOUT)


def test_a_failed_encode_ahead_is_counted_and_logged_throttled():
    engine, collector, log = ScriptedEngine(), Collector(), Warnings()
    worker = started_worker(engine, collector, logger=log, warning_period_s=60.0)
    engine.fail_encode = 2
    worker.offer_frame(0, FRAME, 'big')
    assert wait_for(lambda: worker.counters['encode_ahead_failures'] == 1)
    worker.offer_frame(0, FRAME, 'big again')
    assert wait_for(lambda: worker.counters['encode_ahead_failures'] == 2)
    warnings = [line for line in log.lines if 'ahead failed' in line]
    assert len(warnings) == 1 and 'larger than the maximum' in warnings[0]
    # The worker keeps serving: the next frame and an observation go through.
    worker.offer_frame(0, FRAME, 'ok')
    assert wait_for(lambda: engine.encoded == [(0, 'ok')])
    worker.submit(observation())
    engine.gate.release()
    collector.wait()
    assert worker.state is WorkerState.READY and worker.counters['failures'] == 0
    worker.stop(TIMEOUT)


def test_frames_are_not_encoded_ahead_when_switched_off():
    engine, collector = ScriptedEngine(), Collector()
    worker = started_worker(engine, collector, encode_frames_ahead=False)
    worker.offer_frame(0, FRAME, 'a')
    worker.submit(observation())
    engine.gate.release()
    collector.wait()
    assert engine.encoded == [] and worker.counters['frames_encoded_ahead'] == 0
    worker.stop(TIMEOUT)


@dataclass
class GuidedOutput(Output):
    rtc_applied: bool = False
    rtc_reason: str = ''


class GuidedEngine:
    """An engine with Real-Time Chunking: records each request, applies or refuses it."""

    action_dim = 6

    def __init__(self, refuse=''):
        self.requests = []
        self.refuse = refuse  # a reason: every request comes back not applied with it

    def warmup(self):
        pass

    def normalize_actions(self, actions):
        actions = np.asarray(actions, dtype=np.float32)
        if actions.ndim != 2 or actions.shape[1] != self.action_dim:
            raise InputError(f'actions must have shape (..., 6), got {actions.shape}')
        return (actions - 1.0) / 2.0

    def infer(self, frames, state, instruction, frame_keys=None, rtc=None):
        self.requests.append(rtc)
        applied = rtc is not None and not self.refuse
        return GuidedOutput(np.zeros((50, 6)), {'total': 1.0}, rtc_applied=applied,
                            rtc_reason='' if applied or rtc is None else self.refuse)

    def close(self):
        pass


def test_guided_calls_get_the_executing_plan_normalized_with_the_expected_delay():
    engine, collector, asked = GuidedEngine(), Collector(), []

    def guidance(observation, expected_latency_s):
        asked.append((observation.stamp, expected_latency_s))
        return np.full((40, 6), 3.0), 4

    worker = started_worker(engine, collector, guidance=guidance)
    for stamp in (1.0, 2.0):
        worker.submit(observation(stamp=stamp))
        collector.wait()
    worker.stop()
    first, second = engine.requests
    assert first.inference_delay == 4 and first.prev_chunk.shape == (40, 6)
    assert np.all(first.prev_chunk == 1.0)  # (3 - 1) / 2: in the engine's normalized space
    # The expected latency: none known before the first call, then the calls' own.
    assert asked[0] == (1.0, None)
    assert asked[1][1] == worker.latencies_s[0]
    assert [r.rtc_applied for r in collector.results] == [True, True]
    assert worker.counters['rtc_guided'] == 2 and worker.counters['rtc_fallbacks'] == 0


def test_a_call_without_a_plan_to_continue_runs_plain_and_is_counted():
    engine, collector = GuidedEngine(), Collector()
    worker = started_worker(engine, collector, guidance=lambda observation, latency: None)
    worker.submit(observation())
    collector.wait()
    worker.stop()
    assert engine.requests == [None]
    assert not collector.results[0].rtc_applied
    assert worker.counters['rtc_no_previous'] == 1 and worker.counters['rtc_guided'] == 0


def test_an_unusable_plan_or_a_refused_request_runs_plain_counted_and_logged_throttled():
    engine, collector, log = GuidedEngine(), Collector(), Warnings()
    joints = [4]  # the plan's joints: 4 for a 6-joint engine first
    worker = started_worker(engine, collector, logger=log, warning_period_s=60.0,
                            guidance=lambda observation, latency: (np.ones((40, joints[0])), 2))
    worker.submit(observation(stamp=1.0))
    collector.wait()
    engine.refuse = 'prev_chunk has non-finite values'
    joints[0] = 6
    worker.submit(observation(stamp=2.0))
    collector.wait()
    worker.stop()
    assert engine.requests[0] is None and engine.requests[1] is not None
    assert [r.rtc_applied for r in collector.results] == [False, False]
    assert worker.counters['rtc_fallbacks'] == 2
    assert worker.counters['failures'] == 0 and worker.counters['inputs_rejected'] == 0
    warnings = [line for line in log.lines if 'without Real-Time Chunking' in line]
    assert len(warnings) == 1 and 'previous plan unusable' in warnings[0]  # throttled
