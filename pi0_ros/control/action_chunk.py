# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""An action chunk on the ROS time base: action k is meant for time t0 + k * dt."""
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Chunk:
    """
    H joint-position actions [H, J] for times t0 + k * dt (t0: observation stamp, seconds).

    Only the structure is checked here (a 2-D array with at least one action); numeric validity
    (finite values, dt > 0, joint count) is checked by ChunkPlanner.add_chunk, which rejects a bad
    chunk with a reason instead of raising.
    """

    t0: float
    dt: float
    actions: np.ndarray
    sequence: int = 0

    def __post_init__(self):
        actions = np.array(self.actions, dtype=np.float64)
        if actions.ndim != 2 or actions.shape[0] == 0 or actions.shape[1] == 0:
            raise ValueError(f'actions must have shape [H, J] with H, J >= 1, '
                             f'got {actions.shape}')
        actions.setflags(write=False)
        object.__setattr__(self, 'actions', actions)
        object.__setattr__(self, 't0', float(self.t0))
        object.__setattr__(self, 'dt', float(self.dt))

    @property
    def horizon(self) -> int:
        """Return the number of actions H."""
        return int(self.actions.shape[0])

    @property
    def num_joints(self) -> int:
        """Return the number of joints J."""
        return int(self.actions.shape[1])

    @property
    def end_time(self) -> float:
        """Return the time of the last action, t0 + (H - 1) * dt."""
        return self.t0 + (self.horizon - 1) * self.dt

    def action_time(self, index: int) -> float:
        """Return the time action `index` is meant for."""
        return self.t0 + index * self.dt

    def sample(self, t: float) -> np.ndarray:
        """Return the positions [J] at time t, linear between actions, held outside the chunk."""
        return self.sample_many(np.array([t], dtype=np.float64))[0]

    def sample_many(self, times: np.ndarray) -> np.ndarray:
        """Return the positions [M, J] at the times [M] (vectorised `sample`)."""
        last = self.horizon - 1
        if last == 0:
            return np.broadcast_to(self.actions[0], (len(times), self.num_joints)).copy()
        index = np.clip((np.asarray(times, dtype=np.float64) - self.t0) / self.dt, 0.0, last)
        lower = np.minimum(np.floor(index).astype(np.intp), last - 1)
        fraction = (index - lower)[:, None]
        return self.actions[lower] + fraction * (self.actions[lower + 1] - self.actions[lower])
