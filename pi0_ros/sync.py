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
from collections import deque
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
    Approximate-time synchroniser over num_inputs inputs, with message_filters' guarantees.

    A set is one queued message per input whose stamps lie within max_skew (skew: newest - oldest
    stamp of the set). As in message_filters' ApproximateTime policy:
    - each message is in at most one set, so one published message never gives two sets;
    - a set is emitted only when no message still to come can form a set of smaller skew with a
      message the set would consume (its own, or an older queued one); the candidate is the
      queued set of least skew (ties: the older);
    - when a set is emitted, its messages and every older queued message are dropped; newer
      ones stay queued, and a message not newer than the last one its input gave to a set is
      dropped on arrival (on every input, successive sets go forward in time).

    What may still come: each input's messages are taken to arrive in stamp order (one publisher
    per topic; DDS keeps a writer's order), so the next one is at least the input's shortest recent
    interval between stamps after its newest (message_filters takes that bound as a setting,
    inter-message lower bound; here it is measured, over the last INTERVAL_WINDOW intervals,
    0 until two have arrived). A set is final when, for every input j,
    newest_j + interval_j - (the newest stamp of the set on the other inputs) >= skew.

    What that means for cameras: the frames of one publication (skew under half the frame
    interval) form a set as soon as the last of them arrives. A set that would combine
    frames of two publications (skew near the frame interval, possible whenever max_skew exceeds
    it) is held until the late frame could no longer come; when it does come, the publication's
    own set wins and the stale frame is dropped. One published camera set therefore gives at most
    one set, and never a mixed one while its own frames are on the way. The price is paid only
    where the stamps cannot prove a set: the first set, before the intervals are known, and sets
    wider than half the interval (free-running cameras far out of phase) wait for the next
    message of the inputs that could still improve them, at most about one frame interval, as in
    message_filters. A message that arrives out of stamp order is still matched where it can be.
    A stalled input simply yields no sets; the other queues keep their newest queue_size
    messages, and sets resume when it does. Stamps that go back in time (a sim-time reset) are
    dropped as older than the last used ones until clear() is called (the node does so on a
    backward jump of its clock).

    add() returns the newest set it could emit (if a message completes two sets at once, the
    older one's messages count as dropped). Counters: matched (sets returned), dropped
    (messages discarded without being in a returned set), last_skew (skew of the last set, None
    before the first).
    """

    INTERVAL_WINDOW = 50
    # Slack for float stamps when comparing intervals with skews, s (stamps are nanoseconds).
    _TOLERANCE = 1e-9

    def __init__(self, num_inputs: int, queue_size: int = 10, max_skew: float = 0.05):
        if isinstance(num_inputs, bool) or not isinstance(num_inputs, int) or num_inputs < 1:
            raise ValueError(f'num_inputs must be an integer >= 1, got {num_inputs!r}')
        # A set held for a better match needs room for the next message of its inputs: with
        # one message per queue that message evicts the set's own, and cameras out of phase
        # would never give a set.
        if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 2:
            raise ValueError(f'queue_size must be an integer >= 2, got {queue_size!r}')
        if not (isinstance(max_skew, (int, float)) and math.isfinite(max_skew)
                and max_skew >= 0):
            raise ValueError(f'max_skew must be a finite number >= 0, got {max_skew!r}')
        self.num_inputs = num_inputs
        self.queue_size = queue_size
        self.max_skew = float(max_skew)
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        """Empty the queues, forget the intervals and reset the counters."""
        with self._lock:
            self._stamps: list[list[float]] = [[] for _ in range(self.num_inputs)]
            self._items: list[list[Any]] = [[] for _ in range(self.num_inputs)]
            self._last_used = [-math.inf] * self.num_inputs
            self._newest = [-math.inf] * self.num_inputs
            self._intervals = [deque(maxlen=self.INTERVAL_WINDOW)
                               for _ in range(self.num_inputs)]
            self.matched = 0
            self.dropped = 0
            self.last_skew: float | None = None

    def queued(self, index: int) -> int:
        """Return how many messages input `index` has queued."""
        return len(self._stamps[index])

    def add(self, index: int, stamp: float, item: Any) -> MatchedSet | None:
        """Queue a message of input `index`; return the newest set that became final, if any."""
        if not 0 <= index < self.num_inputs:
            raise IndexError(f'input index {index} out of range 0..{self.num_inputs - 1}')
        stamp = float(stamp)
        with self._lock:
            if not math.isfinite(stamp) or stamp <= self._last_used[index]:
                self.dropped += 1
                return None
            if stamp > self._newest[index]:
                if math.isfinite(self._newest[index]):
                    self._intervals[index].append(stamp - self._newest[index])
                self._newest[index] = stamp
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
            emitted = None
            while all(self._stamps):
                chosen = self._best_set()
                if chosen is None or not self._is_final(chosen):
                    break
                if emitted is not None:          # superseded by a newer final set
                    self.matched -= 1
                    self.dropped += self.num_inputs
                emitted = self._emit(chosen)
            return emitted

    def _best_set(self) -> list[int] | None:
        """Return per-input queue positions of the queued set of least skew (ties: older)."""
        queues = self._stamps
        # A set holds a message at or after every input's oldest and at or before every input's
        # newest, so its oldest stamp lies in this range.
        low = max(queue[0] for queue in queues) - self.max_skew
        high = min(queue[-1] for queue in queues)
        lower_bounds = sorted({stamp for queue in queues
                               for stamp in queue[bisect.bisect_left(queue, low):
                                                  bisect.bisect_right(queue, high)]})
        best, best_skew = None, None
        for lower in lower_bounds:
            # The least-skew set whose oldest stamp is `lower`: each input's first message at or
            # after it.
            positions = [bisect.bisect_left(queue, lower) for queue in queues]
            skew = max(queue[p] for queue, p in zip(queues, positions)) - lower
            if (skew <= self.max_skew + self._TOLERANCE
                    and (best is None or skew < best_skew - self._TOLERANCE)):
                best, best_skew = positions, skew
        return best

    def _is_final(self, positions: list[int]) -> bool:
        """Return True when no message still to come can improve on this set (class doc)."""
        stamps = [self._stamps[i][p] for i, p in enumerate(positions)]
        skew = max(stamps) - min(stamps)
        for j in range(self.num_inputs):
            others = max((s for i, s in enumerate(stamps) if i != j), default=-math.inf)
            interval = min(self._intervals[j], default=0.0)
            if self._newest[j] + interval - others < skew - self._TOLERANCE:
                return False
        return True

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
    given (each joint's at most max_velocity, where given), holding its position otherwise.
    """

    def __init__(self, capacity: int = 200, max_gap: float = 0.1,
                 max_extrapolation: float = 0.05, max_velocity=None):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f'capacity must be an integer >= 1, got {capacity!r}')
        for name, value in (('max_gap', max_gap), ('max_extrapolation', max_extrapolation)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f'{name} must be a finite number >= 0, got {value!r}')
        self.capacity = capacity
        self.max_gap = float(max_gap)
        self.max_extrapolation = float(max_extrapolation)
        self.max_velocity = (None if max_velocity is None
                             else np.array(max_velocity, dtype=np.float64))
        if self.max_velocity is not None and not (self.max_velocity.ndim == 1
                                                  and (self.max_velocity >= 0).all()):
            raise ValueError(f'max_velocity must be a vector of values >= 0, got {max_velocity!r}')
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
                if self.max_velocity is not None and self.max_velocity.shape == velocity.shape:
                    velocity = np.clip(velocity, -self.max_velocity, self.max_velocity)
                return self._positions[nearest] + offset * velocity
            before, after = stamps[index - 1], stamps[index]
            if after - before > self.max_gap:
                return None
            fraction = (stamp - before) / (after - before)
            start = self._positions[index - 1]
            return start + fraction * (self._positions[index] - start)

    def latest(self) -> tuple[float, np.ndarray, np.ndarray | None] | None:
        """Return (stamp, positions, velocities or None) of the newest sample, or None."""
        with self._lock:
            if not self._stamps:
                return None
            velocities = self._velocities[-1]
            return (self._stamps[-1], self._positions[-1].copy(),
                    None if velocities is None else velocities.copy())
