# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Measurements the node reports: rates, latency percentiles, GPU telemetry, diagnostic entries."""
from collections import deque

from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
import numpy as np

from pi0_ros import nvml


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
