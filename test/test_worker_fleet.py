# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""One inference worker serving several robots: batching, fairness, and faults kept per robot."""
from dataclasses import dataclass
import threading

import numpy as np
from test_worker import TIMEOUT, wait_for

from pi0_ros.engine.errors import InputError
from pi0_ros.worker import InferenceWorker, Observation, WorkerState


@dataclass
class Output:
    actions: np.ndarray
    timings_ms: dict
    vision_cache_hits: int = 0


class BatchEngine:
    """Records every call; each waits for the gate; 'bad' instructions are refused as input."""

    def __init__(self, gated=True):
        self.calls = []        # per call: [(instruction, frame keys), ...]
        self.encoded = []      # (slot, camera, key)
        self.gate = threading.Semaphore(0)
        self.gated = gated
        self.fail_next = 0
        self.started = threading.Event()

    def warmup(self):
        pass

    def _run(self, observations):
        self.calls.append([(o[2], tuple(o[3])) for o in observations])
        self.started.set()
        if self.gated:
            assert self.gate.acquire(timeout=TIMEOUT)
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError('CUDA error: an illegal memory access (injected)')
        if any(o[2] == 'bad' for o in observations):
            raise InputError('frame 0 is 1920x8: too thin (injected)')
        return [Output(np.full((50, 6), float(len(self.calls))), {'total': 1.0})
                for _ in observations]

    def infer(self, frames, state, instruction, frame_keys=None):
        return self._run([(frames, state, instruction, frame_keys)])[0]

    def infer_batch(self, observations, rtc=None):
        return self._run(observations)

    def encode_frames(self, frames, frame_keys, slot=0):
        self.encoded.extend((slot, camera, key) for camera, key in frame_keys.items())
        return len(frames)

    def close(self):
        pass


class Robot:
    """A robot's side: its client and the results it received."""

    def __init__(self, worker, name):
        self.results = []
        self.arrived = threading.Event()
        self.client = worker.add_client(self.on_result, name=name)
        self.client.set_epoch(1)

    def on_result(self, result):
        self.results.append(result)
        self.arrived.set()

    def wait(self):
        assert self.arrived.wait(TIMEOUT)
        self.arrived.clear()


def observation(instruction, stamp=1.0, epoch=1, keys=('a', 'b', 'c')):
    return Observation(stamp=stamp, stamp_ns=int(stamp * 1e9),
                       frames=(np.zeros((4, 4, 3), np.uint8),) * 3, frame_keys=keys,
                       state=np.zeros(6), instruction=instruction, epoch=epoch)


def fleet(engine, robots, **kwargs):
    worker = InferenceWorker(lambda: engine, None, **kwargs)
    clients = [Robot(worker, name) for name in robots]
    worker.start()
    assert worker.wait_ready(TIMEOUT)
    return worker, clients


def test_ready_observations_run_as_one_batch_with_each_robots_frame_keys():
    engine = BatchEngine(gated=False)
    worker, (arm1, arm2) = fleet(engine, ['/arm1', '/arm2'], max_batch=2, batch_wait_s=2.0)
    arm1.client.submit(observation('pick'))
    arm2.client.submit(observation('place'))
    arm1.wait()
    arm2.wait()
    # One call for both (the first waited for the second to join), in slot order; the same
    # frame keys of two robots stay apart in the engine's frame cache.
    assert engine.calls == [[('pick', (('/arm1', 'a'), ('/arm1', 'b'), ('/arm1', 'c'))),
                             ('place', (('/arm2', 'a'), ('/arm2', 'b'), ('/arm2', 'c')))]]
    assert arm1.results[0].observation.instruction == 'pick' and arm1.results[0].batch_size == 2
    assert arm2.results[0].observation.instruction == 'place'
    assert arm1.client.counters['inferences'] == 1 == arm2.client.counters['inferences']
    assert arm1.client.counters['batched'] == 1 == arm2.client.counters['batched']
    assert worker.stop(TIMEOUT)


def test_the_batch_wait_is_bounded_when_the_other_robots_send_nothing():
    engine = BatchEngine(gated=False)
    worker, (arm1, _) = fleet(engine, ['/arm1', '/arm2'], max_batch=2, batch_wait_s=0.05)
    arm1.client.submit(observation('alone'))
    arm1.wait()
    assert engine.calls == [[('alone', (('/arm1', 'a'), ('/arm1', 'b'), ('/arm1', 'c')))]]
    assert worker.stop(TIMEOUT)


def test_the_oldest_observations_go_first_so_no_robot_starves():
    engine = BatchEngine()
    worker, robots = fleet(engine, ['/a', '/b', '/c'], max_batch=2)
    robots[0].client.submit(observation('a1'))
    assert wait_for(lambda: len(engine.calls) == 1)
    # While a1 runs: c, then b, then a submit. Batches of two take the oldest two (c, b, run in
    # slot order), then a; a robot that keeps sending does not push the others out.
    for robot, text in ((robots[2], 'c1'), (robots[1], 'b1'), (robots[0], 'a2')):
        robot.client.submit(observation(text))
        threading.Event().wait(0.01)  # distinct arrival times
    for _ in range(3):
        engine.gate.release()
    assert wait_for(lambda: len(engine.calls) == 3)
    assert [[text for text, _ in call] for call in engine.calls] == [['a1'], ['b1', 'c1'],
                                                                     ['a2']]
    assert all(wait_for(lambda r=r: len(r.results) == n)
               for r, n in zip(robots, (2, 1, 1)))
    assert worker.stop(TIMEOUT)


def test_a_robot_waits_in_line_while_its_newer_observations_replace_the_waiting_one():
    engine = BatchEngine()
    worker, robots = fleet(engine, ['/a', '/b', '/c'], max_batch=2)
    robots[0].client.submit(observation('a1'))
    assert wait_for(lambda: len(engine.calls) == 1)
    # While a1 runs: c waits first, then b, then a; c's newer observation replaces its waiting
    # one last. c keeps its place: the next batch is b and c (c's newest), a comes after.
    for robot, text in ((robots[2], 'c1'), (robots[1], 'b1'), (robots[0], 'a2'),
                        (robots[2], 'c2')):
        robot.client.submit(observation(text))
        threading.Event().wait(0.01)  # distinct arrival times
    for _ in range(3):
        engine.gate.release()
    assert wait_for(lambda: len(engine.calls) == 3)
    assert [[text for text, _ in call] for call in engine.calls] == [['a1'], ['b1', 'c2'],
                                                                     ['a2']]
    assert robots[2].client.counters['dropped'] == 1
    assert worker.stop(TIMEOUT)


def test_one_robots_bad_input_is_its_own_and_the_others_chunks_still_come():
    engine = BatchEngine(gated=False)
    worker, (good, bad) = fleet(engine, ['/good', '/bad'], max_batch=2, batch_wait_s=2.0)
    good.client.submit(observation('pick'))
    bad.client.submit(observation('bad'))
    good.wait()
    assert wait_for(lambda: bad.client.counters['inputs_rejected'] == 1)
    # The batch was refused; each then ran alone: only the bad one is rejected, nothing failed.
    assert [[text for text, _ in call] for call in engine.calls] == [['pick', 'bad'], ['pick'],
                                                                     ['bad']]
    assert good.client.counters['inputs_rejected'] == 0 and not bad.results
    assert good.client.counters['failures'] == 0 == bad.client.counters['failures']
    assert worker.state is WorkerState.READY
    assert worker.stop(TIMEOUT)


def test_a_new_instruction_on_one_robot_discards_only_its_chunk_in_flight():
    engine = BatchEngine()
    worker, (arm1, arm2) = fleet(engine, ['/arm1', '/arm2'], max_batch=2, batch_wait_s=2.0)
    arm1.client.submit(observation('pick'))
    arm2.client.submit(observation('place'))
    assert engine.started.wait(TIMEOUT)
    arm1.client.set_epoch(2)  # arm1's instruction changed while the batch ran
    engine.gate.release()
    arm2.wait()
    assert wait_for(lambda: arm1.client.counters['discarded'] == 1)
    assert not arm1.results and arm2.client.counters['discarded'] == 0
    assert worker.stop(TIMEOUT)


def test_an_engine_failure_is_counted_for_every_robot_in_the_batch_then_failed_for_all():
    engine = BatchEngine(gated=False)
    worker, (arm1, arm2) = fleet(engine, ['/arm1', '/arm2'], max_batch=2, batch_wait_s=2.0,
                                 max_consecutive_failures=0)
    engine.fail_next = 1
    arm1.client.submit(observation('pick'))
    arm2.client.submit(observation('place'))
    assert wait_for(lambda: worker.state is WorkerState.FAILED)
    assert arm1.client.counters['failures'] == 1 == arm2.client.counters['failures']
    assert arm1.client.state is WorkerState.FAILED is arm2.client.state
    # Recovered through either robot (its ~/enable): both are served again.
    assert arm2.client.recover()
    arm1.client.submit(observation('pick'))
    arm2.client.submit(observation('place'))
    arm1.wait()
    arm2.wait()
    assert worker.stop(TIMEOUT)


def test_frames_are_encoded_ahead_into_each_robots_own_batch_slot():
    engine = BatchEngine(gated=False)
    worker, (arm1, arm2) = fleet(engine, ['/arm1', '/arm2'], max_batch=2)
    arm2.client.offer_frame(0, np.zeros((4, 4, 3), np.uint8), 'x')
    arm1.client.offer_frame(1, np.zeros((4, 4, 3), np.uint8), 'y')
    assert wait_for(lambda: sorted(engine.encoded) == [(0, 1, ('/arm1', 'y')),
                                                       (1, 0, ('/arm2', 'x'))])
    assert arm2.client.counters['frames_encoded_ahead'] == 1
    assert worker.stop(TIMEOUT)


def test_the_last_robot_to_leave_stops_the_worker_and_a_left_robot_gets_nothing():
    engine = BatchEngine()
    worker, (arm1, arm2) = fleet(engine, ['/arm1', '/arm2'], max_batch=2)
    arm1.client.submit(observation('pick'))
    assert engine.started.wait(TIMEOUT)
    assert arm1.client.stop(TIMEOUT)  # arm1 cleaned up while its observation ran
    assert worker.alive and worker.client_count == 1
    engine.gate.release()
    arm2.client.submit(observation('place'))
    engine.gate.release()
    arm2.wait()
    assert not arm1.results
    assert arm2.client.stop(TIMEOUT)
    assert not worker.alive and worker.state is WorkerState.STOPPED


class GuidedBatchEngine(BatchEngine):
    """A BatchEngine with Real-Time Chunking: records each call's requests, applies them."""

    def __init__(self):
        super().__init__(gated=False)
        self.requests = []

    def normalize_actions(self, actions):
        return np.asarray(actions, dtype=np.float32) / 2.0

    def infer_batch(self, observations, rtc=None):
        self.requests.append(rtc)
        outputs = self._run(observations)
        for output, request in zip(outputs, rtc or [None] * len(outputs)):
            output.rtc_applied = request is not None
        return outputs


def test_each_robot_in_a_batch_is_guided_towards_its_own_plan():
    engine = GuidedBatchEngine()
    worker = InferenceWorker(lambda: engine, None, max_batch=2, batch_wait_s=2.0)
    guided, plain = Robot(worker, '/guided'), Robot(worker, '/plain')
    guided.client.guidance = lambda observation, latency: (np.full((40, 6), 4.0), 3)
    plain.client.guidance = lambda observation, latency: None  # nothing to continue yet
    worker.start()
    assert worker.wait_ready(TIMEOUT)
    guided.client.submit(observation('pick'))
    plain.client.submit(observation('place'))
    guided.wait()
    plain.wait()
    ((request, none),) = engine.requests
    assert none is None and request.inference_delay == 3
    assert np.all(request.prev_chunk == 2.0)  # normalized by the engine
    assert guided.results[0].rtc_applied and not plain.results[0].rtc_applied
    assert guided.client.counters['rtc_guided'] == 1 and plain.client.counters['rtc_guided'] == 0
    assert plain.client.counters['rtc_no_previous'] == 1
    assert worker.stop(TIMEOUT)
