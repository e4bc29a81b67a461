# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Time synchronisation of inputs, pure Python: stamps are float seconds on the ROS clock.

ApproximateTimeSync forms sets of one message per input whose stamps lie within max_skew, in the
spirit of message_filters' ApproximateTime policy. JointStateBuffer keeps recent joint states and
interpolates them at an observation's stamp. Both are thread-safe (one internal lock each), so
subscription callbacks of a multi-threaded executor may call them directly.
"""
import bisect
from dataclasses import dataclass
import math
import threading
from typing import Any

import numpy as np


@dataclass(frozen=True)
class MatchedSet:
    """
    One message per input whose stamps lie within max_skew of each other.

    stamp is the newest stamp of the set (the freshest information it holds; observations, and
    the ActionChunk made from them, carry it); stamps and items are per input, skew is
    max(stamps) - min(stamps).
    """

    stamp: float
    stamps: tuple
    items: tuple
    skew: float


class ApproximateTimeSync:
    """
    Approximate-time synchroniser over num_inputs inputs.

    Each input keeps up to queue_size messages sorted by stamp (arrival order does not matter;
    the oldest is dropped when a queue overflows). When a message arrives, add() looks for the set
    containing it with the smallest skew (ties: the newest set) among the queued messages of the
    other inputs; if its skew is at most max_skew, the set is returned at once, and the messages
    of the set and every older queued message are dropped. A message that is not newer than the
    last one its input contributed to a set is dropped on arrival (a set never goes back in
    time, so the reference stamps of successive sets strictly increase).

    Unlike message_filters, which may wait for a later message to be sure a set is optimal, this
    emits as soon as a set within max_skew exists: for a controller the freshest observation
    matters more than the last millisecond of skew. A stalled input simply yields no sets; the
    other queues keep their newest queue_size messages, and sets resume when it does.

    Counters: matched (sets emitted), dropped (messages discarded without being in a set),
    last_skew (skew of the last set, None before the first).
    """

    def __init__(self, num_inputs: int, queue_size: int = 10, max_skew: float = 0.05):
        if isinstance(num_inputs, bool) or not isinstance(num_inputs, int) or num_inputs < 1:
            raise ValueError(f'num_inputs must be an integer >= 1, got {num_inputs!r}')
        if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 1:
            raise ValueError(f'queue_size must be an integer >= 1, got {queue_size!r}')
        if not (isinstance(max_skew, (int, float)) and math.isfinite(max_skew)
                and max_skew >= 0):
            raise ValueError(f'max_skew must be a finite number >= 0, got {max_skew!r}')
        self.num_inputs = num_inputs
        self.queue_size = queue_size
        self.max_skew = float(max_skew)
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        """Empty the queues and reset the counters."""
        with self._lock:
            self._stamps: list[list[float]] = [[] for _ in range(self.num_inputs)]
            self._items: list[list[Any]] = [[] for _ in range(self.num_inputs)]
            self._last_used = [-math.inf] * self.num_inputs
            self.matched = 0
            self.dropped = 0
            self.last_skew: float | None = None

    def queued(self, index: int) -> int:
        """Return how many messages input `index` has queued."""
        return len(self._stamps[index])

    def add(self, index: int, stamp: float, item: Any) -> MatchedSet | None:
        """Queue a message of input `index`; return the set it completes, if any."""
        if not 0 <= index < self.num_inputs:
            raise IndexError(f'input index {index} out of range 0..{self.num_inputs - 1}')
        stamp = float(stamp)
        with self._lock:
            if not math.isfinite(stamp) or stamp <= self._last_used[index]:
                self.dropped += 1
                return None
            stamps, items = self._stamps[index], self._items[index]
            position = bisect.bisect_left(stamps, stamp)
            if position < len(stamps) and stamps[position] == stamp:
                items[position] = item          # same stamp again: the newer message wins
                self.dropped += 1
            else:
                stamps.insert(position, stamp)
                items.insert(position, item)
                if len(stamps) > self.queue_size:
                    del stamps[0], items[0]
                    self.dropped += 1
                    if position == 0:
                        return None
            if any(not queue for queue in self._stamps):
                return None
            chosen = self._best_set(index, stamp)
            if chosen is None:
                return None
            return self._emit(chosen)

    def _best_set(self, pivot_input: int, pivot: float) -> list[int] | None:
        """Return per-input queue positions of the least-skew set containing the pivot."""
        others = [i for i in range(self.num_inputs) if i != pivot_input]
        lower_bounds = {pivot}
        for i in others:
            stamps = self._stamps[i]
            first = bisect.bisect_left(stamps, pivot - self.max_skew)
            last = bisect.bisect_right(stamps, pivot)
            lower_bounds.update(stamps[first:last])
        best, best_key = None, None
        for lower in sorted(lower_bounds):
            positions = [0] * self.num_inputs
            positions[pivot_input] = bisect.bisect_left(self._stamps[pivot_input], pivot)
            newest, oldest = pivot, pivot
            for i in others:
                position = bisect.bisect_left(self._stamps[i], lower)
                if position == len(self._stamps[i]):
                    break
                positions[i] = position
                stamp = self._stamps[i][position]
                newest, oldest = max(newest, stamp), min(oldest, stamp)
            else:
                skew = newest - oldest
                if skew <= self.max_skew and (best_key is None or (skew, -newest) < best_key):
                    best, best_key = positions, (skew, -newest)
        return best

    def _emit(self, positions: list[int]) -> MatchedSet:
        stamps = tuple(self._stamps[i][p] for i, p in enumerate(positions))
        items = tuple(self._items[i][p] for i, p in enumerate(positions))
        for i, p in enumerate(positions):
            self.dropped += p                    # older messages of this input never matched
            del self._stamps[i][:p + 1], self._items[i][:p + 1]
            self._last_used[i] = stamps[i]
        skew = max(stamps) - min(stamps)
        self.matched += 1
        self.last_skew = skew
        return MatchedSet(max(stamps), stamps, items, skew)


class JointStateBuffer:
    """
    Recent joint states, sorted by stamp, interpolated at a requested stamp.

    capacity: samples kept (the oldest go first). max_gap: the longest interval between two
    samples that at() interpolates across. max_extrapolation: how far before the first or after
    the newest sample at() still answers, extrapolating with the sample's velocity when one was
    given, holding its position otherwise.
    """

    def __init__(self, capacity: int = 200, max_gap: float = 0.1,
                 max_extrapolation: float = 0.05):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f'capacity must be an integer >= 1, got {capacity!r}')
        for name, value in (('max_gap', max_gap), ('max_extrapolation', max_extrapolation)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f'{name} must be a finite number >= 0, got {value!r}')
        self.capacity = capacity
        self.max_gap = float(max_gap)
        self.max_extrapolation = float(max_extrapolation)
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        """Forget every sample."""
        with self._lock:
            self._stamps: list[float] = []
            self._positions: list[np.ndarray] = []
            self._velocities: list[np.ndarray | None] = []

    def __len__(self) -> int:
        return len(self._stamps)

    def add(self, stamp: float, positions: np.ndarray,
            velocities: np.ndarray | None = None) -> bool:
        """
        Store a sample (any arrival order); return False if it was rejected.

        Rejected: a non-finite stamp or position, a joint count that differs from the stored
        samples, or a sample older than a full buffer's oldest. Velocities that are absent, of
        the wrong length or not finite are ignored (the positions are kept). A sample with a
        stamp already stored replaces it.
        """
        stamp = float(stamp)
        positions = np.array(positions, dtype=np.float64)
        if (not math.isfinite(stamp) or positions.ndim != 1 or positions.size == 0
                or not np.isfinite(positions).all()):
            return False
        if velocities is not None:
            velocities = np.array(velocities, dtype=np.float64)
            if velocities.shape != positions.shape or not np.isfinite(velocities).all():
                velocities = None
        with self._lock:
            if self._positions and self._positions[0].size != positions.size:
                return False
            index = bisect.bisect_left(self._stamps, stamp)
            if index < len(self._stamps) and self._stamps[index] == stamp:
                self._positions[index], self._velocities[index] = positions, velocities
                return True
            if index == 0 and len(self._stamps) == self.capacity:
                return False
            self._stamps.insert(index, stamp)
            self._positions.insert(index, positions)
            self._velocities.insert(index, velocities)
            if len(self._stamps) > self.capacity:
                del self._stamps[0], self._positions[0], self._velocities[0]
            return True

    def at(self, stamp: float) -> np.ndarray | None:
        """Return the positions at stamp (see class doc), or None where they are not known."""
        stamp = float(stamp)
        with self._lock:
            stamps = self._stamps
            if not stamps or not math.isfinite(stamp):
                return None
            index = bisect.bisect_left(stamps, stamp)
            if index < len(stamps) and stamps[index] == stamp:
                return self._positions[index].copy()
            if index == 0 or index == len(stamps):
                nearest = 0 if index == 0 else len(stamps) - 1
                offset = stamp - stamps[nearest]
                if abs(offset) > self.max_extrapolation:
                    return None
                velocity = self._velocities[nearest]
                if velocity is None:
                    return self._positions[nearest].copy()
                return self._positions[nearest] + offset * velocity
            before, after = stamps[index - 1], stamps[index]
            if after - before > self.max_gap:
                return None
            fraction = (stamp - before) / (after - before)
            start = self._positions[index - 1]
            return start + fraction * (self._positions[index] - start)

    def latest(self) -> tuple[float, np.ndarray] | None:
        """Return (stamp, positions) of the newest sample, or None when empty."""
        with self._lock:
            if not self._stamps:
                return None
            return self._stamps[-1], self._positions[-1].copy()
