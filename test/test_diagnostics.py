# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The node's rate meter: rate and period jitter from the publish times."""
import pytest

from pi0_ros.diagnostics import RateMeter


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
