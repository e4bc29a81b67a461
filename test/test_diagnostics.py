# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The node's rate meter (rate and period jitter from the publish times) and its diagnostics."""
import gc

from diagnostic_msgs.msg import DiagnosticStatus
import pytest

from pi0_ros.diagnostics import (CALL_AGE_P99_KEY, GC_FULL_PASSES_KEY, GcPauses, node_diagnostics,
                                 OUTPUT_WAIT_P99_KEY, RateMeter)
from pi0_ros.worker import _new_counters, WorkerState


def test_steady_ticks_give_the_rate_and_no_jitter():
    meter = RateMeter()
    for tick in range(100):
        meter.tick(10.0 + tick * 0.02)
    assert meter.rate() == pytest.approx(50.0) and meter.jitter() == pytest.approx(0.0, abs=1e-9)


def test_a_clock_that_goes_back_starts_a_new_window():
    # A sim reset between a tick's clock reading and its tick(): the old time base's stamps
    # made the rate 0 then thousands of Hz, and the jitter ~0.8 s, for seconds.
    meter = RateMeter()
    for tick in range(100):
        meter.tick(100.0 + tick * 0.02)
    meter.tick(101.98 + 0.02)          # read before the jump
    for tick in range(10):
        meter.tick(1.0 + tick * 0.02)  # the new time base
    assert meter.rate() == pytest.approx(50.0)
    assert meter.jitter() == pytest.approx(0.0, abs=1e-9)


class WaitingWorker:
    """The worker's side the diagnostics read, its thread waiting for a turn on the GPU."""

    def __init__(self, turn_wait_s):
        self.state = WorkerState.READY
        self.error = ''
        self.counters = _new_counters()
        self.turn_wait_s = turn_wait_s


def node_status_array(worker, **waits):
    from pi0_ros.msg import PolicyStatus
    status = PolicyStatus(engine_state=PolicyStatus.ENGINE_IDLE,
                          output_state=PolicyStatus.OUTPUT_FOLLOWING)
    return node_diagnostics('pi0_ros', status, worker, {'chunks_discarded': 0,
                                                        'commands_on_chunk': 0,
                                                        'commands_blocked': 0},
                            {}, [], last_rejection_age_s=float('inf'), jitter_s=0.0, **waits)


def engine_status(worker):
    return next(s for s in node_status_array(worker).status if s.name.endswith(': engine'))


def test_a_long_wait_for_another_process_turn_on_the_gpu_is_a_warning_that_says_so():
    short, waiting = engine_status(WaitingWorker(0.2)), engine_status(WaitingWorker(3.0))
    assert short.level == DiagnosticStatus.OK and short.message == 'ready'
    assert waiting.level == DiagnosticStatus.WARN
    assert "waiting 3.0 s for another process's turn on the GPU" in waiting.message


def test_collector_pauses_count_the_full_passes_and_keep_the_longest():
    meter = GcPauses()
    try:
        gc.collect(0)
        assert meter.full_passes == 0 and meter.longest_s > 0.0
        gc.collect()
        gc.collect()
        assert meter.full_passes == 2
    finally:
        gc.callbacks.remove(meter._on_pass)


def test_the_output_diagnostic_reports_the_collector_pauses():
    def passes():
        output = next(s for s in node_status_array(WaitingWorker(0.0)).status
                      if s.name.endswith(': output'))
        return int({kv.key: kv.value for kv in output.values}[GC_FULL_PASSES_KEY])

    before = passes()
    gc.collect()
    assert passes() >= before + 1


def test_the_chunks_waits_outside_the_call_are_reported_where_they_happen():
    # Observation ages at the call's start: the engine entry; waits for the output stage: the
    # output entry (what the fleet benchmark reads).
    array = node_status_array(WaitingWorker(0.0), call_ages_s=[0.010] * 99 + [0.090],
                              output_waits_s=[0.004] * 50 + [0.016] * 50)
    values = {s.name.rsplit(': ', 1)[1]: {kv.key: float(kv.value) for kv in s.values}
              for s in array.status}
    assert values['engine']['observation age at call p50 ms'] == pytest.approx(10.0)
    assert 10.0 < values['engine'][CALL_AGE_P99_KEY] < 90.0
    assert values['output'][OUTPUT_WAIT_P99_KEY] == pytest.approx(16.0)
    assert 4.0 < values['output']['chunk wait for the output stage p50 ms'] < 16.0
    none = node_status_array(WaitingWorker(0.0))
    assert all(float(kv.value) == 0.0 for s in none.status for kv in s.values
               if kv.key in (CALL_AGE_P99_KEY, OUTPUT_WAIT_P99_KEY))
