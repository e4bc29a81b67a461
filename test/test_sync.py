# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""ApproximateTimeSync and JointStateBuffer (pure, float stamps)."""
import itertools
import math
import threading

import numpy as np
import pytest

from pi0_ros.sync import ApproximateTimeSync, JointStateBuffer, MatchedSet


def test_matches_one_message_per_input_within_the_skew():
    sync = ApproximateTimeSync(3, queue_size=5, max_skew=0.01)
    for index in range(3):                                # identical stamps: final at once
        matched = sync.add(index, 0.967, f'previous {index}')
    assert matched.items == ('previous 0', 'previous 1', 'previous 2') and matched.skew == 0.0
    assert sync.add(0, 1.000, 'a') is None
    assert sync.add(1, 1.004, 'b') is None
    matched = sync.add(2, 0.998, 'c')
    assert matched == MatchedSet(stamp=1.004, stamps=(1.000, 1.004, 0.998),
                                 items=('a', 'b', 'c'), skew=pytest.approx(0.006))
    assert (sync.matched, sync.dropped, sync.last_skew) == (2, 0, pytest.approx(0.006))
    assert [sync.queued(i) for i in range(3)] == [0, 0, 0]


def test_no_set_when_the_skew_is_too_large():
    sync = ApproximateTimeSync(2, queue_size=5, max_skew=0.25)     # binary-exact stamps
    sync.add(1, 0.5, 'b0')
    assert sync.add(0, 0.0, 'a') is None
    assert sync.add(1, 1.0, 'b') is None
    assert sync.matched == 0 and sync.last_skew is None
    # A skew exactly at the limit is allowed (and final: input 1 comes every 0.5 s, so its next
    # message cannot pair better with 'c').
    matched = sync.add(0, 1.25, 'c')
    assert matched.items == ('c', 'b') and matched.skew == 0.25
    assert sync.dropped == 2                              # 'a' and 'b0' are older than the set


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
    # b2 just older than a2: no message of input 0 still to come can pair better with either.
    matched = sync.add(1, 1.999, 'b2')
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


# Three cameras at 30 Hz (binary-inexact like real stamps); publication k is stamped k * PERIOD.
PERIOD = 1.0 / 30.0


def feed(sync, arrivals):
    """Add (input, publication, stamp) in order; return [(arrival index, publications of set)]."""
    returned = []
    for position, (index, publication, stamp) in enumerate(arrivals):
        matched = sync.add(index, stamp, publication)
        if matched is not None:
            returned.append((position, matched.items))
    return returned


def test_a_set_is_held_until_no_message_still_to_come_could_pair_better():
    sync = ApproximateTimeSync(2, queue_size=5, max_skew=0.01)
    assert sync.add(0, 1.000, 'a0') is None
    # Input 0's rate is unknown: a message of it at 1.001..1.007 would pair better with b0.
    assert sync.add(1, 1.004, 'b0') is None
    matched = sync.add(0, 1.033, 'a1')                    # input 0 comes every 33 ms
    assert matched.items == ('a0', 'b0')
    assert (sync.matched, sync.dropped, sync.queued(0)) == (1, 0, 1)


def test_when_two_sets_become_final_at_once_the_newer_is_returned():
    sync = ApproximateTimeSync(2, queue_size=5, max_skew=0.01)
    sync.add(0, 1.000, 'a0')
    sync.add(1, 1.004, 'b0')
    assert sync.add(1, 1.037, 'b1') is None               # input 0 may still pair better
    matched = sync.add(0, 1.030, 'a1')                    # proves (a0, b0), then (a1, b1)
    assert matched.items == ('a1', 'b1')
    assert (sync.matched, sync.dropped) == (1, 2)         # a0 and b0 were superseded


def test_identical_stamps_match_when_the_last_frame_arrives_in_any_order():
    sync = ApproximateTimeSync(3, queue_size=10, max_skew=0.05)
    orders = list(itertools.permutations(range(3)))
    arrivals = []
    for publication in range(12):
        for index in orders[publication % len(orders)]:
            arrivals.append((index, publication, publication * PERIOD))
    # Interleave: the first frame of each publication overtakes the last frame of the previous.
    for publication in range(1, 12):
        first = 3 * publication
        arrivals[first - 1], arrivals[first] = arrivals[first], arrivals[first - 1]
    returned = feed(sync, arrivals)
    completed = [max(position for position, (_, p, _) in enumerate(arrivals) if p == publication)
                 for publication in range(12)]
    assert returned == [(completed[p], (p, p, p)) for p in range(12)]
    assert sync.dropped == 0


def test_a_late_frame_is_waited_for_instead_of_pairing_a_stale_one():
    # Publication 4 loses camera 1's frame, so camera 2's frame 4 stays queued; camera 2's frame
    # 5 arrives after cameras 0 and 1 of publication 5 (a 33-ms-old frame is within max_skew).
    sync = ApproximateTimeSync(3, queue_size=10, max_skew=0.05)
    arrivals = [(index, p, p * PERIOD) for p in range(4) for index in range(3)]
    arrivals += [(0, 4, 4 * PERIOD), (2, 4, 4 * PERIOD),
                 (0, 5, 5 * PERIOD), (1, 5, 5 * PERIOD), (2, 5, 5 * PERIOD)]
    returned = feed(sync, arrivals)
    assert returned == [(2, (0, 0, 0)), (5, (1, 1, 1)), (8, (2, 2, 2)), (11, (3, 3, 3)),
                        (16, (5, 5, 5))]
    assert (sync.matched, sync.dropped) == (5, 2)         # camera 0's and camera 2's frame 4


def test_a_lost_frame_gives_no_set_and_does_not_mix_the_next_publication():
    # Camera 2's frame 5 is lost; camera 2's frame 6 is the first of publication 6 to arrive.
    sync = ApproximateTimeSync(3, queue_size=10, max_skew=0.05)
    arrivals = [(index, p, p * PERIOD) for p in range(5) for index in range(3)]
    arrivals += [(0, 5, 5 * PERIOD), (1, 5, 5 * PERIOD),
                 (2, 6, 6 * PERIOD), (0, 6, 6 * PERIOD), (1, 6, 6 * PERIOD)]
    returned = feed(sync, arrivals)
    assert returned == [(3 * p + 2, (p, p, p)) for p in range(5)] + [(19, (6, 6, 6))]
    assert (sync.matched, sync.dropped) == (6, 2)         # cameras 0 and 1 of publication 5


def test_30_hz_with_jitter_late_and_lost_frames():
    # Stamps jitter by +-3 ms per camera; each frame arrives 1-45 ms after its stamp (in stamp
    # order per camera, as DDS delivers one writer's samples), 8 % are lost. max_skew (50 ms)
    # exceeds the frame interval, yet every publication whose three frames arrive gives its own
    # set when its last frame arrives, and no set takes a frame of such a publication with others.
    rng = np.random.default_rng(7)
    publications = 600
    arrivals, last_arrival = [], [0.0] * 3
    received = dict.fromkeys(range(publications), 0)
    for publication in range(publications):
        for index in range(3):
            stamp = publication * PERIOD + rng.uniform(-0.003, 0.003)
            arrival = max(last_arrival[index], stamp + rng.uniform(0.001, 0.045))
            last_arrival[index] = arrival
            if rng.random() >= 0.08:
                arrivals.append((arrival, index, publication, stamp))
                received[publication] += 1
    arrivals.sort()
    sync = ApproximateTimeSync(3, queue_size=10, max_skew=0.05)
    returned = feed(sync, [(index, p, stamp) for _, index, p, stamp in arrivals])
    complete = [p for p in range(publications) if received[p] == 3]
    last_frame = {p: max(i for i, (_, _, q, _) in enumerate(arrivals) if q == p)
                  for p in complete}
    own = [(position, items) for position, items in returned if len(set(items)) == 1]
    mixed = [items for _, items in returned if len(set(items)) > 1]
    # Publication 0 waits while no interval is known, and publication 1 completes and supersedes
    # it; from then on every complete publication's set is final when its last frame arrives.
    assert complete[:2] == [0, 1] and len(complete) == 456
    assert own == [(last_frame[p], (p, p, p)) for p in complete[1:]]
    # The rest combine frames of two incomplete publications (within max_skew, as configured).
    assert len(mixed) == 6
    assert all(received[p] < 3 for items in mixed for p in items)
    for index in range(3):                               # no frame is in two sets
        assert np.all(np.diff([items[index] for _, items in returned]) > 0)
    queued = sum(sync.queued(index) for index in range(3))   # the last, incomplete sets
    assert sync.dropped + queued == len(arrivals) - 3 * sync.matched


def test_free_running_cameras_out_of_phase_still_match_within_a_frame_interval():
    # Phases 0, 11 and 22 ms: every set spans 22 ms, more than half the frame interval, so each
    # waits until the stamps prove it; none is lost and none waits a whole interval more.
    sync = ApproximateTimeSync(3, queue_size=10, max_skew=0.05)
    arrivals = sorted((frame * PERIOD + index * PERIOD / 3, index, frame)
                      for frame in range(60) for index in range(3))
    sets = []
    for stamp, index, frame in arrivals:
        matched = sync.add(index, stamp, frame)
        if matched is not None:
            assert stamp - matched.stamp <= PERIOD + 1e-9    # delay after its newest frame
            sets.append(matched.items)
    assert sets == [(frame, frame, frame) for frame in range(len(sets))]
    assert len(sets) >= 58
    assert sync.last_skew == pytest.approx(2 * PERIOD / 3)


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


def test_cameras_out_of_phase_give_a_set_per_publication_with_the_smallest_queue():
    # 30 Hz cameras 10 ms apart: a set spans 20 ms (more than half the interval), so it is
    # held until each input's next frame could no longer improve it; that frame must not
    # evict the held set's own (a queue of one did: no set at all).
    sync = ApproximateTimeSync(3, queue_size=2, max_skew=0.05)
    sets = [found for k in range(300) for camera in range(3)
            if (found := sync.add(camera, 100.0 + k / 30.0 + camera * 0.01, k)) is not None]
    assert len(sets) >= 298 and all(set(found.items) == {found.items[0]} for found in sets)


@pytest.mark.parametrize('kwargs', [{'num_inputs': 0}, {'num_inputs': 2, 'queue_size': 1},
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
    stamp, positions, velocities = buffer.latest()
    assert stamp == 0.04 and positions.tolist() == [4.0] and velocities is None
    assert buffer.add(0.05, np.array([5.0]), velocities=np.array([0.5]))
    assert buffer.latest()[2].tolist() == [0.5]


def test_buffer_rejects_bad_samples_and_ignores_bad_velocities():
    buffer = make_buffer()
    assert not buffer.add(1.25, np.array([0.0, math.nan]))
    assert not buffer.add(math.inf, np.array([0.0, 0.0]))
    assert not buffer.add(1.25, np.array([0.0, 0.0, 0.0]))          # joint count changed
    assert not buffer.add(1.25, np.zeros((2, 2)))
    assert buffer.add(1.25, np.array([1.0, 3.0]), velocities=np.array([math.nan, 0.0]))
    np.testing.assert_array_equal(buffer.at(1.3125), [1.0, 3.0])     # velocity ignored: hold
    assert len(buffer) == 3


def test_buffer_extrapolates_at_most_at_the_velocity_limit():
    buffer = JointStateBuffer(max_extrapolation=0.0625, max_velocity=[1.0, 1.0])
    assert buffer.add(1.0, np.array([0.0, 0.0]), velocities=np.array([4.0, -0.5]))
    np.testing.assert_array_equal(buffer.at(1.0625), [0.0625, -0.03125])
    np.testing.assert_array_equal(buffer.at(0.9375), [-0.0625, 0.03125])
    assert buffer.latest()[2].tolist() == [4.0, -0.5]    # stored as measured


def test_empty_buffer_and_clear():
    buffer = JointStateBuffer()
    assert buffer.at(0.0) is None and buffer.latest() is None
    buffer.add(1.0, np.array([1.0]))
    buffer.clear()
    assert buffer.at(1.0) is None and len(buffer) == 0
    assert buffer.add(0.5, np.array([1.0, 2.0]))          # joint count may change after clear


@pytest.mark.parametrize('kwargs', [{'capacity': 0}, {'max_gap': -1.0},
                                    {'max_extrapolation': math.nan},
                                    {'max_velocity': [1.0, -1.0]}, {'max_velocity': 1.0}])
def test_buffer_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        JointStateBuffer(**kwargs)
