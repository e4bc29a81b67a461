# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""ApproximateTimeSync and JointStateBuffer (pure, float stamps)."""
import math
import threading

import numpy as np
import pytest

from pi0_ros.sync import ApproximateTimeSync, JointStateBuffer, MatchedSet


def test_matches_one_message_per_input_within_the_skew():
    sync = ApproximateTimeSync(3, queue_size=5, max_skew=0.01)
    assert sync.add(0, 1.000, 'a') is None
    assert sync.add(1, 1.004, 'b') is None
    matched = sync.add(2, 0.998, 'c')
    assert matched == MatchedSet(stamp=1.004, stamps=(1.000, 1.004, 0.998),
                                 items=('a', 'b', 'c'), skew=pytest.approx(0.006))
    assert (sync.matched, sync.dropped, sync.last_skew) == (1, 0, pytest.approx(0.006))
    assert [sync.queued(i) for i in range(3)] == [0, 0, 0]


def test_no_set_when_the_skew_is_too_large():
    sync = ApproximateTimeSync(2, queue_size=5, max_skew=0.25)     # binary-exact stamps
    sync.add(0, 1.0, 'a')
    assert sync.add(1, 1.5, 'b') is None
    assert sync.matched == 0 and sync.last_skew is None
    # A skew exactly at the limit is allowed.
    matched = sync.add(0, 1.25, 'c')
    assert matched.items == ('c', 'b') and matched.skew == 0.25
    assert sync.dropped == 1                              # 'a' is older than the set


def test_picks_the_least_skew_partner_and_drops_older_messages():
    sync = ApproximateTimeSync(2, queue_size=10, max_skew=0.05)
    for index, stamp in enumerate([0.90, 0.95, 0.98, 1.03]):
        sync.add(0, stamp, f'cam{index}')
    matched = sync.add(1, 0.99, 'joint')
    assert matched.items == ('cam2', 'joint')             # 0.98 beats 0.95 and 1.03
    assert matched.stamp == 0.99
    assert sync.dropped == 2                              # 0.90 and 0.95 are gone
    assert sync.queued(0) == 1                            # 1.03 waits for a partner
    matched = sync.add(1, 1.04, 'joint2')
    assert matched.items == ('cam3', 'joint2')


def test_out_of_order_arrival_still_matches():
    sync = ApproximateTimeSync(2, queue_size=10, max_skew=0.005)
    sync.add(0, 2.0, 'a2')
    sync.add(0, 1.0, 'a1')                                # arrives late, older stamp
    matched = sync.add(1, 1.001, 'b1')
    assert matched.items == ('a1', 'b1')
    matched = sync.add(1, 2.002, 'b2')
    assert matched.items == ('a2', 'b2')
    assert (sync.matched, sync.dropped) == (2, 0)


def test_a_message_older_than_its_last_set_is_dropped():
    sync = ApproximateTimeSync(2, queue_size=10, max_skew=0.01)
    sync.add(0, 1.0, 'a')
    sync.add(1, 1.0, 'b')
    assert sync.add(0, 0.995, 'late') is None
    assert sync.add(0, 1.0, 'same stamp again') is None
    assert sync.dropped == 2 and sync.queued(0) == 0
    assert sync.add(0, math.nan, 'nan') is None
    assert sync.dropped == 3


def test_scrambled_arrivals_match_frames_and_stamps_strictly_increase():
    # Three cameras at 30 Hz; within a frame the skew is <= 0.014 s, across frames >= 0.019 s.
    sync = ApproximateTimeSync(3, queue_size=10, max_skew=0.015)
    rng = np.random.default_rng(3)
    arrivals = []
    for frame in range(100):
        for index in range(3):
            arrivals.append((frame * 0.033 + rng.uniform(-0.004, 0.004) + 0.003 * index,
                             index, frame))
    head = arrivals[:30]
    rng.shuffle(head)                    # the first ten frames arrive scrambled
    arrivals[:30] = head
    sets = [sync.add(index, stamp, frame) for stamp, index, frame in arrivals]
    sets = [matched for matched in sets if matched is not None]
    assert all(len(set(matched.items)) == 1 for matched in sets)      # never mixes frames
    assert all(matched.skew <= 0.015 and matched.stamp == max(matched.stamps)
               for matched in sets)
    assert np.all(np.diff([matched.stamp for matched in sets]) > 0)
    frames = [matched.items[0] for matched in sets]
    assert frames[-90:] == list(range(10, 100))        # every frame after the scramble
    assert sync.matched == len(sets)
    assert sync.dropped == 3 * 100 - 3 * len(sets)      # every other message was dropped


def test_a_stalled_input_bounds_the_queues_and_counts_drops():
    sync = ApproximateTimeSync(2, queue_size=3, max_skew=0.01)
    for frame in range(10):
        assert sync.add(0, frame * 0.1, frame) is None
    assert sync.queued(0) == 3 and sync.dropped == 7
    matched = sync.add(1, 0.9, 'resumed')                 # the stalled input comes back
    assert matched.items == (9, 'resumed')
    assert sync.dropped == 9                              # 0.7 and 0.8 never matched
    assert sync.add(0, -1.0, 'too old for a full queue') is None


def test_overflowing_queue_drops_the_new_message_if_it_is_the_oldest():
    sync = ApproximateTimeSync(2, queue_size=2, max_skew=0.01)
    sync.add(0, 1.0, 'a')
    sync.add(0, 2.0, 'b')
    assert sync.add(0, 0.5, 'older') is None
    assert sync.queued(0) == 2 and sync.dropped == 1


def test_clear_resets_queues_and_counters():
    sync = ApproximateTimeSync(2, queue_size=2, max_skew=0.01)
    sync.add(0, 1.0, 'a')
    sync.add(1, 1.0, 'b')
    sync.add(0, 0.5, 'late')
    sync.clear()
    assert (sync.matched, sync.dropped, sync.last_skew) == (0, 0, None)
    sync.add(0, 0.5, 'again')                             # accepted again after clear
    assert sync.add(1, 0.5, 'b').items == ('again', 'b')


def test_single_input_passes_every_message_through():
    sync = ApproximateTimeSync(1, queue_size=2, max_skew=0.0)
    assert sync.add(0, 1.0, 'x').items == ('x',)
    assert sync.add(0, 2.0, 'y').stamp == 2.0


@pytest.mark.parametrize('kwargs', [{'num_inputs': 0}, {'num_inputs': 2, 'queue_size': 0},
                                    {'num_inputs': 2, 'max_skew': -0.1},
                                    {'num_inputs': 2, 'max_skew': math.inf}])
def test_sync_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        ApproximateTimeSync(**kwargs)


def test_sync_rejects_a_bad_input_index():
    with pytest.raises(IndexError):
        ApproximateTimeSync(2).add(2, 1.0, 'x')


def test_concurrent_adds_lose_nothing():
    sync = ApproximateTimeSync(2, queue_size=1000, max_skew=0.001)
    found = []

    def feed(index):
        for frame in range(500):
            matched = sync.add(index, frame * 0.01, frame)
            if matched is not None:
                found.append(matched.items)

    threads = [threading.Thread(target=feed, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(found) == [(frame, frame) for frame in range(500)]
    assert sync.dropped == 0


def make_buffer():
    # Binary-exact stamps, so that "exactly at the limit" is exact.
    buffer = JointStateBuffer(capacity=5, max_gap=0.125, max_extrapolation=0.0625)
    assert buffer.add(1.0, np.array([0.0, 1.0]))
    assert buffer.add(1.125, np.array([1.0, 3.0]))
    return buffer


def test_buffer_returns_exact_samples_and_interpolates_between():
    buffer = make_buffer()
    np.testing.assert_array_equal(buffer.at(1.0), [0.0, 1.0])
    np.testing.assert_array_equal(buffer.at(1.125), [1.0, 3.0])
    np.testing.assert_array_equal(buffer.at(1.03125), [0.25, 1.5])
    result = buffer.at(1.00)
    result[0] = 42.0                                      # a copy, not the stored sample
    np.testing.assert_array_equal(buffer.at(1.00), [0.0, 1.0])


def test_buffer_holds_or_extrapolates_just_outside_and_refuses_further():
    buffer = make_buffer()
    np.testing.assert_array_equal(buffer.at(1.1875), [1.0, 3.0])       # hold (no velocity)
    np.testing.assert_array_equal(buffer.at(0.9375), [0.0, 1.0])       # exactly at the limit
    assert buffer.at(1.19) is None
    assert buffer.at(0.93) is None
    assert buffer.add(1.25, np.array([1.0, 3.0]), velocities=np.array([2.0, -1.0]))
    np.testing.assert_array_equal(buffer.at(1.3125), [1.125, 2.9375])
    assert buffer.at(math.nan) is None


def test_buffer_refuses_to_interpolate_across_a_gap():
    buffer = make_buffer()
    buffer.add(1.375, np.array([2.0, 2.0]))               # 0.25 s after the previous sample
    assert buffer.at(1.25) is None
    np.testing.assert_array_equal(buffer.at(1.375), [2.0, 2.0])


def test_buffer_tolerates_out_of_order_samples_and_replaces_duplicates():
    buffer = make_buffer()
    assert buffer.add(1.0625, np.array([0.0, 0.0]))       # arrives late, goes in between
    np.testing.assert_array_equal(buffer.at(1.09375), [0.5, 1.5])
    assert buffer.add(1.0625, np.array([0.5, 2.0]))       # same stamp: replaced
    np.testing.assert_array_equal(buffer.at(1.0625), [0.5, 2.0])
    assert len(buffer) == 3
    assert buffer.latest()[0] == 1.125


def test_buffer_capacity_drops_the_oldest():
    buffer = JointStateBuffer(capacity=3, max_extrapolation=0.0)
    for index in range(5):
        assert buffer.add(index * 0.01, np.array([float(index)]))
    assert len(buffer) == 3
    assert buffer.at(0.0) is None                         # 0.00 and 0.01 are gone
    np.testing.assert_array_equal(buffer.at(0.02), [2.0])
    assert not buffer.add(0.005, np.array([9.0]))         # older than a full buffer
    stamp, positions = buffer.latest()
    assert stamp == 0.04 and positions.tolist() == [4.0]


def test_buffer_rejects_bad_samples_and_ignores_bad_velocities():
    buffer = make_buffer()
    assert not buffer.add(1.25, np.array([0.0, math.nan]))
    assert not buffer.add(math.inf, np.array([0.0, 0.0]))
    assert not buffer.add(1.25, np.array([0.0, 0.0, 0.0]))          # joint count changed
    assert not buffer.add(1.25, np.zeros((2, 2)))
    assert buffer.add(1.25, np.array([1.0, 3.0]), velocities=np.array([math.nan, 0.0]))
    np.testing.assert_array_equal(buffer.at(1.3125), [1.0, 3.0])     # velocity ignored: hold
    assert len(buffer) == 3


def test_empty_buffer_and_clear():
    buffer = JointStateBuffer()
    assert buffer.at(0.0) is None and buffer.latest() is None
    buffer.add(1.0, np.array([1.0]))
    buffer.clear()
    assert buffer.at(1.0) is None and len(buffer) == 0
    assert buffer.add(0.5, np.array([1.0, 2.0]))          # joint count may change after clear


@pytest.mark.parametrize('kwargs', [{'capacity': 0}, {'max_gap': -1.0},
                                    {'max_extrapolation': math.nan}])
def test_buffer_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        JointStateBuffer(**kwargs)
