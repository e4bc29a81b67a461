# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Measurements the node reports: rates, latency percentiles, GPU telemetry, diagnostic entries."""
from collections import deque
import functools
import gc
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
import numpy as np

from pi0_ros import nvml
from pi0_ros.msg import PolicyStatus

# The inputs diagnostic warns while a rejection is at most this old (then OK again, the totals
# stay in its values).
INPUT_WARN_S = 10.0
# The output diagnostic's keys of the process's garbage collector (GcPauses), as the soak and the
# fleet benchmark read them.
GC_FULL_PASSES_KEY = 'gc full passes (process)'
GC_PAUSE_MAX_MS_KEY = 'gc pause max ms (process)'
# Where a chunk's latency outside its engine call goes, as the fleet benchmark reads it: the
# observation's age when its call began (engine entry), the chunk's wait from the call's end to
# the command that first uses it (output entry).
CALL_AGE_P99_KEY = 'observation age at call p99 ms'
OUTPUT_WAIT_P99_KEY = 'chunk wait for the output stage p99 ms'
# An engine call waiting this long for another process's turn on the GPU is reported (WARN).
TURN_WAIT_WARN_S = 1.0


def percentile(values, q):
    """Return the q-th percentile of values (0.0 when empty)."""
    return float(np.percentile(np.fromiter(values, dtype=np.float64), q)) if values else 0.0


class RateMeter:
    """Measures the period of a recurring event over a sliding window of timestamps (seconds)."""

    def __init__(self, window=250):
        self._stamps = deque(maxlen=window)

    def tick(self, now):
        if self._stamps and now <= self._stamps[-1]:
            self._stamps.clear()  # the clock went back (sim reset): a new time base
        self._stamps.append(now)

    def reset(self):
        self._stamps.clear()

    @property
    def periods(self):
        stamps = np.fromiter(self._stamps, dtype=np.float64)
        return np.diff(stamps) if stamps.size > 1 else np.empty(0)

    def rate(self):
        """Mean rate in Hz over the window (0.0 with fewer than two events)."""
        if len(self._stamps) < 2:
            return 0.0
        span = self._stamps[-1] - self._stamps[0]
        return (len(self._stamps) - 1) / span if span > 0 else 0.0

    def jitter(self, q=99.0):
        """Return the q-th percentile of |period - mean period|, seconds."""
        periods = self.periods
        if periods.size == 0:
            return 0.0
        return float(np.percentile(np.abs(periods - periods.mean()), q))


class GcPauses:
    """
    Pauses of Python's cyclic garbage collector in this process, through gc.callbacks.

    Every thread waits for the GIL while a pass runs; a full pass over an unfrozen loaded engine
    took ~105 ms on an idle core (executors.freeze_loaded_objects).
    """

    def __init__(self):
        self.full_passes = 0
        self.longest_s = 0.0
        self._started = None
        gc.callbacks.append(self._on_pass)

    def _on_pass(self, phase, info):
        # One pass at a time (under the GIL), on whichever thread allocated.
        if phase == 'start':
            self._started = time.perf_counter()
            return
        if self._started is None:
            return
        self.longest_s = max(self.longest_s, time.perf_counter() - self._started)
        self.full_passes += info['generation'] == 2
        self._started = None


@functools.cache
def gc_pauses():
    """Return the process's GcPauses, watching from the first call on."""
    return GcPauses()


class GpuTelemetry:
    """GPU memory and utilization of a torch device through NVML; zeros where there is none."""

    def __init__(self, device=None):
        found = nvml.device_handle(device)
        self._nvml, self._handle = found if found is not None else (None, None)

    @property
    def available(self):
        return self._handle is not None

    def read(self):
        """Return (memory_used_bytes, memory_total_bytes, utilization_percent)."""
        if self._handle is None:
            return 0, 0, 0.0
        # Separately: NVML has no utilization for a MIG instance, whose memory it does report.
        try:
            memory = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
            used, total = int(memory.used), int(memory.total)
        except Exception:  # noqa: B902 - a transient NVML error is reported as unknown
            used, total = 0, 0
        try:
            utilization = float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
        except Exception:  # noqa: B902 - unsupported (MIG) or transient: unknown
            utilization = 0.0
        return used, total, utilization


def diagnostic_status(name, level, message, values, hardware_id='pi0_ros'):
    """Build a diagnostic_msgs/DiagnosticStatus with key/values formatted as strings."""
    status = DiagnosticStatus(name=name, level=level, message=message, hardware_id=hardware_id)
    status.values = [KeyValue(key=str(key), value=_format(value)) for key, value in values.items()]
    return status


def _format(value):
    if isinstance(value, float):
        return f'{value:.4g}'
    return str(value)


OK = DiagnosticStatus.OK
WARN = DiagnosticStatus.WARN
ERROR = DiagnosticStatus.ERROR
STALE = DiagnosticStatus.STALE


def node_diagnostics(name, status, worker, counters, rejections, skews, *, last_rejection_age_s,
                     jitter_s, call_ages_s=(), output_waits_s=()):
    """
    Return the control node's DiagnosticArray: engine, output and inputs, stamped like `status`.

    status: the PolicyStatus just built; worker: the InferenceWorker (state, error, counters);
    counters, rejections (per reason) and skews (seconds): the node's, copied under its lock;
    call_ages_s and output_waits_s: the recent chunks' observation ages at their call's start and
    waits for the output stage (seconds).
    """
    engine_level = {PolicyStatus.ENGINE_FAILED: ERROR,
                    PolicyStatus.ENGINE_STOPPED: WARN}.get(status.engine_state, OK)
    engine_message = worker.state.value + (f' ({worker.error})' if worker.error else '')
    turn_wait_s = getattr(worker, 'turn_wait_s', 0.0)
    if turn_wait_s >= TURN_WAIT_WARN_S:
        engine_level = max(engine_level, WARN)
        engine_message += (f"; waiting {turn_wait_s:.1f} s for another process's turn on the GPU "
                           '(gpu_turns)')
    output_level = OK if status.output_state == PolicyStatus.OUTPUT_FOLLOWING else WARN
    recent = last_rejection_age_s <= INPUT_WARN_S
    inputs_message = (f'{status.inputs_rejected} rejected, the last {last_rejection_age_s:.0f} s '
                      'ago' if recent
                      else f'ok ({status.inputs_rejected} rejected since configure)'
                      if status.inputs_rejected else 'ok')
    array = DiagnosticArray()
    array.header.stamp = status.header.stamp
    array.status = [
        diagnostic_status(
            f'{name}: engine', engine_level, engine_message,
            {'latency p50 ms': status.inference_latency_p50_ms,
             'latency p99 ms': status.inference_latency_p99_ms,
             'observation age at call p50 ms': percentile(call_ages_s, 50) * 1e3,
             CALL_AGE_P99_KEY: percentile(call_ages_s, 99) * 1e3,
             'inferences': worker.counters['inferences'],
             'inferences batched with other robots': worker.counters['batched'],
             'failures': worker.counters['failures'],
             'chunks discarded (old instruction)': worker.counters['discarded'],
             'chunks discarded by the node (old instruction, not commanding)':
                 counters['chunks_discarded'],
             'vision cache hits': status.vision_cache_hits,
             'frames encoded ahead': worker.counters['frames_encoded_ahead'],
             'frames encoded ahead, failed': worker.counters['encode_ahead_failures'],
             'chunks guided (rtc)': worker.counters['rtc_guided'],
             'chunks without a plan to continue (rtc)': worker.counters['rtc_no_previous'],
             'rtc fallbacks': worker.counters['rtc_fallbacks'],
             "calls that waited for another process's turn on the GPU":
                 worker.counters['gpu_turn_waits'],
             'gpu turn wait ms (all calls)': worker.counters['gpu_turn_wait_ms'],
             'language cache hits': status.language_cache_hits,
             'gpu memory used bytes': status.gpu_memory_used_bytes,
             'gpu utilization %': status.gpu_utilization_percent}),
        diagnostic_status(
            f'{name}: output', output_level,
            {PolicyStatus.OUTPUT_FOLLOWING: 'following the policy',
             PolicyStatus.OUTPUT_HOLDING: f'holding: {status.hold_reason}',
             PolicyStatus.OUTPUT_ESTOP: 'e-stop latched',
             PolicyStatus.OUTPUT_DISABLED: 'disabled'}[status.output_state],
            {'rate hz': status.control_rate_hz, 'target hz': status.control_rate_target_hz,
             'rate error': status.control_rate_error,
             'period jitter p99 ms': jitter_s * 1e3,
             'actions skipped (latency)': status.actions_skipped,
             'chunk wait for the output stage p50 ms': percentile(output_waits_s, 50) * 1e3,
             OUTPUT_WAIT_P99_KEY: percentile(output_waits_s, 99) * 1e3,
             'commands on chunk arrival': counters['commands_on_chunk'],
             'commands blocked': counters['commands_blocked'],
             GC_FULL_PASSES_KEY: gc_pauses().full_passes,
             GC_PAUSE_MAX_MS_KEY: gc_pauses().longest_s * 1e3}),
        diagnostic_status(
            f'{name}: inputs', WARN if recent else OK, inputs_message,
            {'observation age s': status.observation_age_s,
             'observations synced': status.observations_synced,
             'observations dropped': status.observations_dropped,
             'camera skew p50 ms': percentile([s * 1e3 for s in skews], 50),
             'camera skew max ms': max(skews, default=0.0) * 1e3,
             'rejected by the engine': worker.counters['inputs_rejected'],
             **{f'rejected {key}': count for key, count in sorted(rejections.items())}}),
    ]
    return array
