# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The inference worker: one named thread that owns the engine and turns observations into chunks.

The engine is built, warmed up (CUDA graphs captured) and run on this one thread, for one robot
(the control node) or several (pi0_ros.fleet: one engine, one GPU, several arms). Each robot is a
client (`WorkerClient`, the interface the control node uses): observations arrive in its single
slot where the latest wins; results made for an older instruction epoch of that robot are
discarded. With several clients, the ready observations run as one batch (`max_batch`, oldest
first, so no robot is starved), after waiting at most `batch_wait_s` for the other robots' to fill
it. Failures are retried on the next observations up to a bound, then the worker enters a
visible FAILED state until `recover()` (a failing engine stops every robot it serves). An
observation the engine refuses as bad input (its InputError, e.g. a frame too thin to resize) is
counted and logged for its robot only, not a failure: in a batch, the observations then run one
by one so that the other robots' chunks still come. While no observation waits, the thread encodes
camera frames as they arrive (`offer_frame`, the engine's `encode_frames`), so the observation that
a frame later completes finds its features ready and only encodes the frames still new. With a
`guidance` callback (Real-Time Chunking), each call is guided towards the plan the callback
reports as executing when the call starts; without one, or where it cannot be used, the call runs
plain, counted and logged. With `gpu_turns`, each call waits for its turn on a GPU that other
processes' engines share (pi0_ros.engine.gpu_turns) before it takes the newest observations; the
turn ends when the chunk is back, or (`end_turn_early`) once the GPU has run the call's work up to
its tail (the engine's on_gpu_tail: the denoising, or its last steps), so that the next process's
host work overlaps it.
"""
from collections import deque
import contextlib
from dataclasses import dataclass
import enum
import inspect
import os
import threading
import time
import traceback

import numpy as np

from pi0_ros.engine.config import RTCRequest
from pi0_ros.engine.errors import InputError

_ENCODE, _INFER = 'encode', 'infer'  # the inference thread's next work (InferenceWorker)


@dataclass(frozen=True)
class Observation:
    """One synchronized observation: frames, the joint state at their stamp, the instruction."""

    stamp: float
    stamp_ns: int
    frames: tuple
    frame_keys: tuple
    state: np.ndarray
    instruction: str
    epoch: int


@dataclass(frozen=True)
class ChunkResult:
    """The engine's answer to one observation."""

    observation: Observation
    actions: np.ndarray
    timings_ms: dict
    vision_cache_hits: int
    latency_s: float
    rtc_applied: bool = False   # guided by Real-Time Chunking towards the executing plan
    batch_size: int = 1         # observations in the engine call that made it
    call_started_s: float | None = None  # time.monotonic() when that engine call began


class WorkerState(enum.Enum):
    """Lifecycle of the inference worker."""

    STARTING = 'starting'
    READY = 'ready'
    RUNNING = 'running'
    FAILED = 'failed'
    STOPPED = 'stopped'


def _new_counters():
    return {'inferences': 0, 'discarded': 0, 'dropped': 0, 'failures': 0, 'inputs_rejected': 0,
            'frames_encoded_ahead': 0, 'encode_ahead_failures': 0, 'rtc_guided': 0,
            'rtc_no_previous': 0, 'rtc_fallbacks': 0, 'batched': 0, 'gpu_turn_waits': 0,
            'gpu_turn_wait_ms': 0}


class WorkerClient:
    """
    One robot's side of an InferenceWorker: its observation slot, epoch, counters and latencies.

    The control node talks to this (or to an InferenceWorker, which forwards to its one client):
    submit / offer_frame / set_epoch / busy / counters / latencies_s are the robot's own;
    state, error, recover() and engine_stats() are the shared engine's.
    """

    def __init__(self, worker, on_result, *, guidance=None, logger=None, name='',
                 home_slot=0, latency_window=200):
        self.worker = worker
        self.name = name
        self.home_slot = home_slot   # the engine's batch slot whose frame cache this robot uses
        self.on_result = on_result
        self.guidance = guidance
        self.logger = logger
        self.counters = _new_counters()
        self.latencies_s = deque(maxlen=latency_window)
        self.last_input_rejection = -float('inf')  # monotonic time of the engine's last one
        # Guarded by the worker's lock:
        self.slot = None
        self.waiting_since = 0.0  # monotonic time the slot last went from empty to full
        self.arrived_frames = {}  # camera index -> (frame, key), the newest not yet encoded
        self.epoch = 0
        self.in_flight = False
        self.attached = True
        self.last_warnings = {}  # kind -> monotonic time of its last throttled warning

    # Inputs (any thread) ----------------------------------------------------------------------
    def submit(self, observation):
        """Offer an observation; it replaces any of this robot's that has not started yet."""
        self.worker.submit_for(self, observation)

    def offer_frame(self, camera, frame, key):
        """Offer a camera frame to encode ahead while the thread is idle (newest per camera)."""
        self.worker.offer_frame_for(self, camera, frame, key)

    def set_epoch(self, epoch):
        """Results for this robot's observations of an older epoch are discarded (see worker)."""
        self.worker.set_epoch_for(self, epoch)

    def frame_key(self, key):
        """Return the key the engine's frame cache knows this robot's frame key by."""
        return key if not self.name or key is None else (self.name, key)

    # The shared engine ----------------------------------------------------------------------
    def start(self):
        """Start the shared thread if it is not running (it builds the engine)."""
        self.worker.start()

    def wait_ready(self, timeout):
        """Wait until the engine is ready (True) or failed to build / timed out (False)."""
        return self.worker.wait_ready(timeout)

    def stop(self, timeout=5.0):
        """Leave the worker; the last client to leave stops it (False if its thread lingers)."""
        return self.worker.detach(self, timeout)

    def recover(self):
        """Leave the worker's FAILED state (see InferenceWorker.recover)."""
        return self.worker.recover()

    @property
    def state(self):
        """Return the shared worker's state."""
        return self.worker.state

    @property
    def error(self):
        """Return the last error of the shared worker ('' when none)."""
        return self.worker.error

    @property
    def consecutive_failures(self):
        """Return the engine failures in a row (shared)."""
        return self.worker.consecutive_failures

    @property
    def alive(self):
        """Whether the shared thread still runs."""
        return self.worker.alive

    @property
    def busy(self):
        """Return True while an observation of this robot is pending or being inferred."""
        return self.slot is not None or self.in_flight

    @property
    def engine_device(self):
        """Return the engine's torch device (None before the engine exists)."""
        return self.worker.engine_device

    @property
    def turn_wait_s(self):
        """Return how long the shared thread has been waiting for its turn on the GPU."""
        return self.worker.turn_wait_s

    def engine_stats(self):
        """Return the engine's counters (empty before the engine exists)."""
        return self.worker.engine_stats()

    def warn_throttled(self, kind, message, period_s):
        """Log a warning of this kind at most once per period, on this robot's logger."""
        now = time.monotonic()
        if now - self.last_warnings.get(kind, -float('inf')) >= period_s:
            self.last_warnings[kind] = now
            if self.logger is not None:
                self.logger.warning(message)


class InferenceWorker:
    """Runs the engine on a dedicated thread for its clients; never on the ROS executor."""

    def __init__(self, engine_factory, on_result=None, *, max_consecutive_failures=3,
                 logger=None, name='pi0_inference', latency_window=200, niceness=0,
                 encode_frames_ahead=True, warning_period_s=5.0, guidance=None, max_batch=1,
                 batch_wait_s=0.0, gpu_turns=False, end_turn_early=False):
        """
        Create the worker (its thread starts with start()).

        on_result: the callback of the one robot this worker serves (the control node), which
        then forwards its client's API; None to add robots with add_client() (a fleet).
        guidance: None, or a callable (observation, expected latency s or None) -> None or
        (previous actions [T, J] in robot units for the observation's action times, delay in
        actions), called on the worker thread as each call starts (Real-Time Chunking).
        max_batch: observations per engine call (the engine's own max_batch or less);
        batch_wait_s: how long the oldest ready observation may wait for other robots' to join.
        gpu_turns: take turns on a CUDA device with other processes' engines (GpuTurns): each
        call waits for the GPU to be free of theirs, then takes the newest observations.
        end_turn_early: with gpu_turns, a call's turn ends once the GPU has run its work up to
        its tail (the engine's on_gpu_tail), not when the call returns.
        """
        if max_batch < 1 or batch_wait_s < 0:
            raise ValueError(f'max_batch must be >= 1 and batch_wait_s >= 0, got {max_batch}, '
                             f'{batch_wait_s}')
        self._engine_factory = engine_factory
        self._max_failures = max_consecutive_failures
        self._logger = logger
        self._name = name
        self._niceness = niceness
        self._latency_window = latency_window
        self._max_batch = max_batch
        self._batch_wait_s = batch_wait_s
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._clients = []
        self._encode_frames_ahead = encode_frames_ahead
        self._warning_period_s = warning_period_s
        self._stop_requested = False
        self._ready = threading.Event()
        self._thread = None
        self._engine = None
        self._gpu_turns = gpu_turns
        self._turns = None
        self._end_turn_early_asked = end_turn_early
        self._end_turn_early = False  # asked, and the engine can (on_gpu_tail)
        self._turn_wait_since = None  # monotonic time the thread began to wait for a turn
        self.state = WorkerState.STOPPED
        self.error = ''
        self.consecutive_failures = 0
        self._client = None
        if on_result is not None:
            self._client = self.add_client(on_result, guidance=guidance, logger=logger)

    def add_client(self, on_result, *, guidance=None, logger=None, name=''):
        """
        Serve one more robot; return its WorkerClient.

        name: a robot name that keeps its frame keys apart from the others' in the engine's
        frame cache ('' for a single robot).
        """
        with self._wakeup:
            used = {client.home_slot for client in self._clients}
            home = next(slot for slot in range(len(self._clients) + 1) if slot not in used)
            client = WorkerClient(self, on_result, guidance=guidance, logger=logger, name=name,
                                  home_slot=home, latency_window=self._latency_window)
            self._clients.append(client)
            return client

    @property
    def client_count(self):
        """Return how many robots the worker serves."""
        return len(self._clients)

    def detach(self, client, timeout=5.0):
        """Stop serving a client; the last one leaving stops the thread (see stop())."""
        with self._wakeup:
            client.attached = False
            client.slot = None
            client.arrived_frames.clear()
            if client in self._clients:
                self._clients.remove(client)
            last = not self._clients
        return self.stop(timeout) if last else True

    # The one robot's API (a worker made with on_result) ----------------------------------------
    def submit(self, observation):
        """Offer an observation; it replaces any that the worker has not started yet."""
        self._client.submit(observation)

    def offer_frame(self, camera, frame, key):
        """
        Offer a camera frame to encode ahead while the thread is idle (the newest per camera).

        key is the frame key the observation will name; ignored when encoding ahead is off.
        """
        self._client.offer_frame(camera, frame, key)

    def set_epoch(self, epoch):
        """
        Results for observations of an older epoch (instruction, reset) are discarded.

        Epochs only go forward: callbacks on several executor threads may report theirs out of
        order, and a late, older one must not make the current epoch's results look stale.
        """
        self._client.set_epoch(epoch)

    @property
    def counters(self):
        """Return the one robot's counters."""
        return self._client.counters

    @property
    def latencies_s(self):
        """Return the one robot's recent call latencies (s)."""
        return self._client.latencies_s

    @property
    def last_input_rejection(self):
        """Return the monotonic time of the engine's last rejection of the robot's input."""
        return self._client.last_input_rejection

    @property
    def busy(self):
        """Return True while an observation is pending or being inferred."""
        return self._client.busy

    # Per client (any thread) -----------------------------------------------------------------
    def submit_for(self, client, observation):
        """Put a client's observation in its slot (the latest wins) and wake the thread."""
        with self._wakeup:
            if not client.attached:
                return
            if client.slot is not None:
                client.counters['dropped'] += 1
            else:
                # A newer observation replacing a waiting one keeps the robot's place in line.
                client.waiting_since = time.monotonic()
            client.slot = observation
            self._wakeup.notify()

    def offer_frame_for(self, client, camera, frame, key):
        """Keep a client's newest frame of a camera to encode while the thread is idle."""
        if not self._encode_frames_ahead:
            return
        with self._wakeup:
            if not client.attached or client.home_slot >= self._max_batch:
                return  # no slot of its own in the engine's frame cache
            client.arrived_frames[camera] = (frame, key)
            self._wakeup.notify()

    def set_epoch_for(self, client, epoch):
        """Move a client's epoch forward; its waiting observation of an older one is dropped."""
        with self._wakeup:
            if epoch <= client.epoch:
                return
            client.epoch = epoch
            # Older only: a newer observation may reach the worker before its epoch does.
            if client.slot is not None and client.slot.epoch < epoch:
                client.slot = None
                client.counters['dropped'] += 1  # an observation never inferred, not a chunk

    # Control (any thread) --------------------------------------------------------------------
    def start(self):
        """Start the thread; it builds and warms up the engine, then waits for observations."""
        with self._wakeup:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop_requested = False
            self._ready.clear()
            self.state = WorkerState.STARTING
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def wait_ready(self, timeout):
        """Wait until the engine is ready (True) or failed to build / timed out (False)."""
        self._ready.wait(timeout)
        return self.state in (WorkerState.READY, WorkerState.RUNNING)

    def recover(self):
        """Leave the FAILED state (after the cause was dealt with) if the engine exists."""
        with self._wakeup:
            if self.state is WorkerState.FAILED and self._engine is not None and self.alive:
                self.consecutive_failures = 0
                self.error = ''
                self.state = WorkerState.READY
                self._wakeup.notify()
                return True
            return False

    def stop(self, timeout=5.0):
        """Stop the thread and free the engine; False (with a warning) if it did not exit."""
        with self._wakeup:
            self._stop_requested = True
            for client in self._clients:
                client.slot = None
                client.arrived_frames.clear()
            self._wakeup.notify()
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        if thread.is_alive():  # e.g. still building the engine: it exits when that returns
            self._log('warning', f'inference thread did not stop within {timeout:.1f} s')
            return False
        self._thread = None
        return True

    @property
    def alive(self):
        """Whether the thread still runs (after a stop() that timed out: until it exits)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    @property
    def engine_device(self):
        """Return the engine's torch device (None before the engine exists)."""
        return getattr(self._engine, 'device', None)

    @property
    def turn_wait_s(self):
        """Return how long the thread has been waiting for its turn on the GPU (0: not)."""
        since = self._turn_wait_since
        return 0.0 if since is None else time.monotonic() - since

    def engine_stats(self):
        """Return the engine's counters (empty before the engine exists)."""
        engine = self._engine
        return dict(getattr(engine, 'stats', {}) or {}) if engine is not None else {}

    # The thread ---------------------------------------------------------------------------
    def _run(self):
        if self._niceness:
            # Linux schedules threads individually: a lower priority for this thread (and the
            # threads it starts) lets the executor's timers win the CPU when it is contended.
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self._niceness)
            except OSError as error:
                self._log('warning', f'could not lower the inference thread priority: {error}')
        try:
            self._engine = self._engine_factory()
            warmup = getattr(self._engine, 'warmup', None)
            if warmup is not None:
                warmup()
        except Exception as error:  # noqa: B902 - any failure to build is reported, not raised
            self.error = f'engine failed to start: {type(error).__name__}: {error}'
            self._log('error', self.error + '\n' + traceback.format_exc())
            self._release_engine()  # first: a recover() must not find an engine to go on with
            self.state = WorkerState.FAILED
            self._ready.set()
            return
        if self._gpu_turns:
            self._turns = self._open_turns()
            self._end_turn_early = self._turns is not None and self._early_turn_release()
        if getattr(self._engine, 'encode_frames', None) is None:
            with self._wakeup:  # an engine that cannot encode ahead: infer encodes every frame
                self._encode_frames_ahead = False
                for client in self._clients:
                    client.arrived_frames.clear()
        self.state = WorkerState.READY
        self._ready.set()
        crashed = False
        try:
            self._serve()
        except Exception as error:  # noqa: B902 - a bug, not an engine error: FAILED, logged
            crashed = True
            self.error = f'inference thread crashed: {type(error).__name__}: {error}'
            self._log('error', self.error + '\n' + traceback.format_exc())
        finally:
            self._release_engine()
            # FAILED holds the arm (the node's hold reason); STOPPED is an orderly stop only.
            self.state = WorkerState.FAILED if crashed else WorkerState.STOPPED

    def _idle(self):
        """Whether the thread has nothing to do (called under the lock)."""
        return self.state is WorkerState.FAILED or not any(
            client.slot is not None or client.arrived_frames for client in self._clients)

    def _ready_clients(self):
        return [client for client in self._clients if client.slot is not None]

    def _fill_batch(self, ready):
        """Wait up to batch_wait_s after the oldest ready observation for the others' to join."""
        deadline = min(client.waiting_since for client in ready) + self._batch_wait_s
        while not self._stop_requested and self.state is not WorkerState.FAILED:
            if len(ready) >= min(len(self._clients), self._max_batch):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._wakeup.wait(left)
            ready = self._ready_clients()
        return ready

    def _serve(self):
        while True:
            with self._wakeup:
                work = self._await_work()
                if work is None:
                    return
                if work is _ENCODE:  # idle: encode one arrived frame, then look again
                    client = next(c for c in self._clients if c.arrived_frames)
                    camera = next(iter(client.arrived_frames))
                    frame, key = client.arrived_frames.pop(camera)
            if work is _ENCODE:
                self._encode_ahead(client, camera, frame, key)
                continue
            # The batch is taken once the GPU's turn is ours (GpuTurns): the newest observations.
            self._turn_wait_since = time.monotonic()
            with self._turn():
                self._turn_wait_since = None
                with self._wakeup:
                    batch, observations = self._take_batch()
                results = self._infer(batch, observations) if batch else []
            if batch and self._turns is not None and self._turns.last_wait_s > 0:
                for client in batch:
                    client.counters['gpu_turn_waits'] += 1
                    client.counters['gpu_turn_wait_ms'] += round(self._turns.last_wait_s * 1e3)
            delivered = []
            with self._wakeup:
                if self.state is WorkerState.RUNNING:
                    self.state = WorkerState.READY
                for client, observation, result in zip(batch, observations, results):
                    client.in_flight = False
                    if result is None or self._stop_requested or not client.attached:
                        continue
                    if observation.epoch < client.epoch:
                        client.counters['discarded'] += 1
                        continue
                    delivered.append((client, result))
            for client, result in delivered:
                client.on_result(result)

    def _await_work(self):
        """Wait (under the lock) for work: None to stop, _ENCODE, or _INFER (a batch is ready)."""
        while True:
            while not self._stop_requested and self._idle():
                self._wakeup.wait()
            if self._stop_requested:
                return None
            ready = self._ready_clients()
            if not ready:
                return _ENCODE
            if self._batch_wait_s > 0 and len(self._clients) > 1:
                ready = self._fill_batch(ready)
                if self._stop_requested:
                    return None
                if self.state is WorkerState.FAILED or not ready:
                    continue
            return _INFER

    def _take_batch(self):
        """Take the ready observations of one call (under the lock); ([], []) if none is left."""
        ready = self._ready_clients()
        if self._stop_requested or self.state is WorkerState.FAILED or not ready:
            return [], []
        # The longest waiting first (none starves, also with fewer batch slots than robots),
        # then in slot order: a robot that keeps its batch slot finds the frames it encoded
        # ahead there.
        ready.sort(key=lambda c: c.waiting_since)
        batch = sorted(ready[:self._max_batch], key=lambda c: c.home_slot)
        observations = []
        for client in batch:
            observation, client.slot = client.slot, None
            # The call encodes the observation's own frames that are still waiting.
            for camera, (_, key) in list(client.arrived_frames.items()):
                if key in observation.frame_keys:
                    del client.arrived_frames[camera]
            client.in_flight = True
            observations.append(observation)
        self.state = WorkerState.RUNNING
        return batch, observations

    def _turn(self):
        """Return the context of one engine call: the GPU's turn (GpuTurns), or none."""
        return self._turns if self._turns is not None else contextlib.nullcontext()

    def _rtc_request(self, client, observation):
        """Return the RTCRequest of this call (None: plain), counting the plain ones."""
        latencies = client.latencies_s
        expected = float(np.median(latencies)) if latencies else None
        guidance = client.guidance(observation, expected)
        if guidance is None:
            client.counters['rtc_no_previous'] += 1
            return None
        previous, delay = guidance
        try:
            return RTCRequest(self._engine.normalize_actions(previous), int(delay))
        except InputError as error:
            self._rtc_fallback(client, f'previous plan unusable: {error}')
            return None

    def _rtc_fallback(self, client, reason):
        client.counters['rtc_fallbacks'] += 1
        client.warn_throttled('rtc', f'chunk made without Real-Time Chunking '
                                     f"({client.counters['rtc_fallbacks']} so far): {reason}",
                              self._warning_period_s)

    def _call_engine(self, batch, observations, requests):
        """Run the engine on the observations; return its outputs (raises what it raises)."""
        engine = self._engine
        guided = any(client.guidance is not None for client in batch)
        # Optional arguments only where used: an engine without RTC or turns needs none.
        extra = {'on_gpu_tail': self._turns.release} if self._end_turn_early else {}
        if len(batch) == 1:
            client, observation = batch[0], observations[0]
            if guided:
                extra['rtc'] = requests[0]
            return [engine.infer(list(observation.frames), observation.state,
                                 observation.instruction,
                                 frame_keys=[client.frame_key(k) for k in observation.frame_keys],
                                 **extra)]
        if guided:
            extra['rtc'] = requests
        return engine.infer_batch(
            [(list(o.frames), o.state, o.instruction, [c.frame_key(k) for k in o.frame_keys])
             for c, o in zip(batch, observations)], **extra)

    def _infer(self, batch, observations, requests=None):
        """Return one ChunkResult or None per observation (rejected, or the engine failed)."""
        started = time.monotonic()
        try:
            if requests is None:
                requests = [self._rtc_request(c, o) if c.guidance is not None else None
                            for c, o in zip(batch, observations)]
            outputs = self._call_engine(batch, observations, requests)
            if len(outputs) != len(batch):
                raise RuntimeError(f'the engine returned {len(outputs)} results for '
                                   f'{len(batch)} observations')
            results = []
            for client, observation, request, output in zip(batch, observations, requests,
                                                            outputs):
                applied = request is not None and bool(getattr(output, 'rtc_applied', False))
                if applied:
                    client.counters['rtc_guided'] += 1
                elif request is not None:
                    self._rtc_fallback(client,
                                       getattr(output, 'rtc_reason', '') or 'not applied')
                results.append(ChunkResult(
                    observation, np.asarray(output.actions, dtype=np.float64),
                    dict(output.timings_ms), int(output.vision_cache_hits),
                    time.monotonic() - started, applied, len(batch), started))
        except InputError as error:  # an observation, not the engine: no failure counted
            if len(batch) > 1:
                # Which robot's? Each alone: the others' chunks still come.
                return [self._infer([c], [o], [r])[0]
                        for c, o, r in zip(batch, observations, requests)]
            client = batch[0]
            client.counters['inputs_rejected'] += 1
            client.last_input_rejection = time.monotonic()
            client.warn_throttled('rejection', f'observation rejected by the engine '
                                               f"({client.counters['inputs_rejected']} so far): "
                                               f'{error}', self._warning_period_s)
            return [None]
        except Exception as error:  # noqa: B902 - engine errors become state, never a crash
            for client in batch:
                client.counters['failures'] += 1
            self.consecutive_failures += 1
            self.error = f'{type(error).__name__}: {error}'
            if self.consecutive_failures > self._max_failures:
                self.state = WorkerState.FAILED
                self._log('error', f'inference failed {self.consecutive_failures} times in a '
                                   f'row; worker FAILED (last: {self.error})')
            else:
                self._log('warning', f'inference failed ({self.consecutive_failures}/'
                                     f'{self._max_failures} retries used): {self.error}')
            return [None] * len(batch)
        self.consecutive_failures = 0
        self.error = ''  # recovered: no stale error next to a working engine
        for client, result in zip(batch, results):
            client.counters['inferences'] += 1
            client.counters['batched'] += len(batch) > 1
            client.latencies_s.append(result.latency_s)
        return results

    def _encode_ahead(self, client, camera, frame, key):
        slot = {} if client.home_slot == 0 else {'slot': client.home_slot}
        try:
            client.counters['frames_encoded_ahead'] += self._engine.encode_frames(
                {camera: frame}, {camera: client.frame_key(key)}, **slot)
        except Exception as error:  # noqa: B902 - the observation's call encodes it instead
            client.counters['encode_ahead_failures'] += 1
            client.warn_throttled('encode', f'encoding camera {camera} ahead failed '
                                            f"({client.counters['encode_ahead_failures']} so "
                                            f'far; the observation encodes it): '
                                            f'{type(error).__name__}: {error}',
                                  self._warning_period_s)

    def _early_turn_release(self):
        """Whether calls end their turn at the engine's on_gpu_tail (asked, and it can)."""
        if not self._end_turn_early_asked:
            return False
        methods = [self._engine.infer] + ([self._engine.infer_batch] if self._max_batch > 1
                                          else [])
        if all('on_gpu_tail' in inspect.signature(method).parameters for method in methods):
            return True
        self._log('warning', 'this engine cannot end a GPU turn before its call returns '
                             '(on_gpu_tail): turns end with the call')
        return False

    def _open_turns(self):
        from pi0_ros.engine.gpu_turns import GpuTurns
        try:
            turns = GpuTurns.for_device(self.engine_device)
        except Exception as error:  # noqa: B902 - a GPU without turns still runs
            self._log('warning', f'no turns on the GPU with other processes '
                                 f'({type(error).__name__}: {error}): calls may overlap theirs')
            return None
        if turns is not None:
            self._log('info', f'engine calls take turns on the GPU with other processes '
                              f'({turns.path})')
        return turns

    def _release_engine(self):
        turns, self._turns = self._turns, None
        if turns is not None:
            turns.close()
        engine, self._engine = self._engine, None
        close = getattr(engine, 'close', None)
        if close is not None:
            try:
                close()
            except Exception as error:  # noqa: B902 - closing must not mask the shutdown
                self._log('warning', f'engine close failed: {error}')

    def _log(self, level, message):
        # One call site per severity: an rclpy logger raises ValueError when the same line logs
        # with two severities ('Logger severity cannot be changed between calls').
        if self._logger is None:
            return
        if level == 'error':
            self._logger.error(message)
        elif level == 'warning':
            self._logger.warning(message)
        else:
            self._logger.info(message)
