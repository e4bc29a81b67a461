# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The inference worker: one named thread that owns the engine and turns observations into chunks.

The engine is built, warmed up (CUDA graphs captured) and run on this one thread. Observations
arrive in a single slot where the latest wins; results made for an older instruction epoch are
discarded; failures are retried on the next observations up to a bound, then the worker enters a
visible FAILED state until `recover()`. An observation the engine refuses as bad input (its
InputError, e.g. a frame too thin to resize) is counted and logged, not a failure: a camera
sending such frames does not take the engine down. While no observation waits, the thread
encodes camera frames as they arrive (`offer_frame`, the engine's `encode_frames`), so the
observation that a frame later completes finds its features ready and only encodes the frames
still new. With a `guidance` callback (Real-Time Chunking), each call is guided towards the plan
the callback reports as executing when the call starts; without one, or where it cannot be
used, the call runs plain, counted and logged.
"""
from collections import deque
from dataclasses import dataclass, field
import enum
import os
import threading
import time
import traceback

import numpy as np

from pi0_ros.engine.config import RTCRequest
from pi0_ros.engine.errors import InputError


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
    received_at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class ChunkResult:
    """The engine's answer to one observation."""

    observation: Observation
    actions: np.ndarray
    timings_ms: dict
    vision_cache_hits: int
    latency_s: float
    rtc_applied: bool = False   # guided by Real-Time Chunking towards the executing plan


class WorkerState(enum.Enum):
    """Lifecycle of the inference worker."""

    STARTING = 'starting'
    READY = 'ready'
    RUNNING = 'running'
    FAILED = 'failed'
    STOPPED = 'stopped'


class InferenceWorker:
    """Runs `engine.infer` on a dedicated thread; never on the ROS executor."""

    def __init__(self, engine_factory, on_result, *, max_consecutive_failures=3, logger=None,
                 name='pi0_inference', latency_window=200, niceness=0,
                 encode_frames_ahead=True, warning_period_s=5.0, guidance=None):
        """
        Create the worker (its thread starts with start()).

        guidance: None, or a callable (observation, expected latency s or None) -> None or
        (previous actions [T, J] in robot units for the observation's action times, delay in
        actions), called on the worker thread as each call starts (Real-Time Chunking).
        """
        self._engine_factory = engine_factory
        self._guidance = guidance
        self._on_result = on_result
        self._max_failures = max_consecutive_failures
        self._logger = logger
        self._name = name
        self._niceness = niceness
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._slot = None
        self._arrived_frames = {}  # camera index -> (frame, key), the newest not yet encoded
        self._encode_frames_ahead = encode_frames_ahead
        self._warning_period_s = warning_period_s
        self._last_warnings = {}  # kind -> monotonic time of its last throttled warning
        self._epoch = 0
        self._stop_requested = False
        self._ready = threading.Event()
        self._thread = None
        self._engine = None
        self.state = WorkerState.STOPPED
        self.error = ''
        self.latencies_s = deque(maxlen=latency_window)
        self.counters = {'inferences': 0, 'discarded': 0, 'dropped': 0, 'failures': 0,
                         'inputs_rejected': 0, 'frames_encoded_ahead': 0,
                         'encode_ahead_failures': 0, 'rtc_guided': 0, 'rtc_no_previous': 0,
                         'rtc_fallbacks': 0}
        self.last_input_rejection = -float('inf')  # monotonic time of the engine's last one
        self.consecutive_failures = 0

    # Control from the node (any thread) -----------------------------------------------------
    def start(self):
        """Start the thread; it builds and warms up the engine, then waits for observations."""
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

    def submit(self, observation):
        """Offer an observation; it replaces any that the worker has not started yet."""
        with self._wakeup:
            if self._slot is not None:
                self.counters['dropped'] += 1
            self._slot = observation
            self._wakeup.notify()

    def offer_frame(self, camera, frame, key):
        """
        Offer a camera frame to encode ahead while the thread is idle (the newest per camera).

        key is the frame key the observation will name; ignored when encoding ahead is off.
        """
        if not self._encode_frames_ahead:
            return
        with self._wakeup:
            self._arrived_frames[camera] = (frame, key)
            self._wakeup.notify()

    def set_epoch(self, epoch):
        """
        Results for observations of an older epoch (instruction, reset) are discarded.

        Epochs only go forward: callbacks on several executor threads may report theirs out of
        order, and a late, older one must not make the current epoch's results look stale.
        """
        with self._wakeup:
            if epoch <= self._epoch:
                return
            self._epoch = epoch
            # Older only: a newer observation may reach the worker before its epoch does.
            if self._slot is not None and self._slot.epoch < epoch:
                self._slot = None
                self.counters['dropped'] += 1  # an observation never inferred, not a chunk

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
            self._slot = None
            self._arrived_frames.clear()
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
        return self._thread is not None and self._thread.is_alive()

    @property
    def busy(self):
        """Return True while an observation is pending or being inferred."""
        return self._slot is not None or self.state is WorkerState.RUNNING

    @property
    def engine_device(self):
        """Return the engine's torch device (None before the engine exists)."""
        return getattr(self._engine, 'device', None)

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
        if getattr(self._engine, 'encode_frames', None) is None:
            with self._wakeup:  # an engine that cannot encode ahead: infer encodes every frame
                self._encode_frames_ahead = False
                self._arrived_frames.clear()
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

    def _serve(self):
        while True:
            with self._wakeup:
                while not self._stop_requested and (
                        (self._slot is None and not self._arrived_frames)
                        or self.state is WorkerState.FAILED):
                    self._wakeup.wait()
                if self._stop_requested:
                    return
                if self._slot is None:  # idle: encode one arrived frame, then look again
                    camera = next(iter(self._arrived_frames))
                    frame, key = self._arrived_frames.pop(camera)
                    observation = None
                else:
                    observation, self._slot = self._slot, None
                    # The call encodes the observation's own frames that are still waiting.
                    for camera, (_, key) in list(self._arrived_frames.items()):
                        if key in observation.frame_keys:
                            del self._arrived_frames[camera]
                    self.state = WorkerState.RUNNING
            if observation is None:
                self._encode_ahead(camera, frame, key)
                continue
            result = self._infer(observation)
            with self._wakeup:
                if self.state is WorkerState.RUNNING:
                    self.state = WorkerState.READY
                if result is None or self._stop_requested:
                    continue
                if observation.epoch < self._epoch:
                    self.counters['discarded'] += 1
                    continue
            self._on_result(result)

    def _rtc_request(self, observation):
        """Return the RTCRequest of this call (None: plain), counting the plain ones."""
        latencies = self.latencies_s
        expected = float(np.median(latencies)) if latencies else None
        guidance = self._guidance(observation, expected)
        if guidance is None:
            self.counters['rtc_no_previous'] += 1
            return None
        previous, delay = guidance
        try:
            return RTCRequest(self._engine.normalize_actions(previous), int(delay))
        except InputError as error:
            self._rtc_fallback(f'previous plan unusable: {error}')
            return None

    def _rtc_fallback(self, reason):
        self.counters['rtc_fallbacks'] += 1
        self._warn_throttled('rtc', f'chunk made without Real-Time Chunking '
                                    f"({self.counters['rtc_fallbacks']} so far): {reason}")

    def _infer(self, observation):
        started = time.monotonic()
        try:
            guided = {}  # an engine without Real-Time Chunking needs no rtc argument
            request = None
            if self._guidance is not None:
                request = guided['rtc'] = self._rtc_request(observation)
            output = self._engine.infer(list(observation.frames), observation.state,
                                        observation.instruction,
                                        frame_keys=list(observation.frame_keys), **guided)
            applied = request is not None and bool(getattr(output, 'rtc_applied', False))
            if applied:
                self.counters['rtc_guided'] += 1
            elif request is not None:
                self._rtc_fallback(getattr(output, 'rtc_reason', '') or 'not applied')
            result = ChunkResult(observation, np.asarray(output.actions, dtype=np.float64),
                                 dict(output.timings_ms), int(output.vision_cache_hits),
                                 time.monotonic() - started, applied)
        except InputError as error:  # the observation, not the engine: no failure counted
            self.counters['inputs_rejected'] += 1
            self.last_input_rejection = time.monotonic()
            self._warn_throttled('rejection', f'observation rejected by the engine '
                                              f"({self.counters['inputs_rejected']} so far): "
                                              f'{error}')
            return None
        except Exception as error:  # noqa: B902 - engine errors become state, never a crash
            self.counters['failures'] += 1
            self.consecutive_failures += 1
            self.error = f'{type(error).__name__}: {error}'
            if self.consecutive_failures > self._max_failures:
                self.state = WorkerState.FAILED
                self._log('error', f'inference failed {self.consecutive_failures} times in a '
                                   f'row; worker FAILED (last: {self.error})')
            else:
                self._log('warning', f'inference failed ({self.consecutive_failures}/'
                                     f'{self._max_failures} retries used): {self.error}')
            return None
        self.consecutive_failures = 0
        self.error = ''  # recovered: no stale error next to a working engine
        self.counters['inferences'] += 1
        self.latencies_s.append(result.latency_s)
        return result

    def _encode_ahead(self, camera, frame, key):
        try:
            self.counters['frames_encoded_ahead'] += self._engine.encode_frames(
                {camera: frame}, {camera: key})
        except Exception as error:  # noqa: B902 - the observation's call encodes it instead
            self.counters['encode_ahead_failures'] += 1
            self._warn_throttled('encode', f'encoding camera {camera} ahead failed '
                                           f"({self.counters['encode_ahead_failures']} so far; "
                                           f'the observation encodes it): '
                                           f'{type(error).__name__}: {error}')

    def _warn_throttled(self, kind, message):
        """Log a warning of this kind at most once per warning period."""
        now = time.monotonic()
        if now - self._last_warnings.get(kind, -float('inf')) >= self._warning_period_s:
            self._last_warnings[kind] = now
            self._log('warning', message)

    def _release_engine(self):
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
