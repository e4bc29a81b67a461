# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Per-joint kinematic limits."""
import numpy as np


def _as_vector(name: str, value) -> np.ndarray:
    array = np.array(value, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f'{name} must be a non-empty 1-D array, got shape {array.shape}')
    array.setflags(write=False)
    return array


class JointLimits:
    """
    Position, velocity and acceleration limits of J joints (radians or metres, seconds).

    Position limits may be infinite (continuous joints); velocity and acceleration limits must be
    finite and positive. `names` (optional) name the joints in messages.
    """

    def __init__(self, position_lower, position_upper, max_velocity, max_acceleration,
                 names=None):
        self.position_lower = _as_vector('position_lower', position_lower)
        self.position_upper = _as_vector('position_upper', position_upper)
        self.max_velocity = _as_vector('max_velocity', max_velocity)
        self.max_acceleration = _as_vector('max_acceleration', max_acceleration)
        sizes = {a.size for a in (self.position_lower, self.position_upper, self.max_velocity,
                                  self.max_acceleration)}
        if len(sizes) != 1:
            raise ValueError(f'joint limit arrays differ in length: {sorted(sizes)}')
        if np.isnan(self.position_lower).any() or np.isnan(self.position_upper).any():
            raise ValueError('position limits must not be NaN')
        if not (self.position_lower < self.position_upper).all():
            raise ValueError(f'position_lower must be below position_upper: '
                             f'{self.position_lower} vs {self.position_upper}')
        for name in ('max_velocity', 'max_acceleration'):
            value = getattr(self, name)
            if not (np.isfinite(value).all() and (value > 0).all()):
                raise ValueError(f'{name} must be finite and positive, got {value}')
        if names is None:
            names = [f'joint {j}' for j in range(self.position_lower.size)]
        self.names = tuple(str(name) for name in names)
        if len(self.names) != self.position_lower.size:
            raise ValueError(f'{len(self.names)} joint names for {self.position_lower.size} '
                             'joints')

    @property
    def num_joints(self) -> int:
        """Return the number of joints J."""
        return int(self.position_lower.size)

    def clamp_position(self, position: np.ndarray) -> np.ndarray:
        """Return the position(s) [..., J] clipped to the position limits (a new array)."""
        return np.clip(position, self.position_lower, self.position_upper)

    def __repr__(self) -> str:
        return (f'JointLimits(position_lower={self.position_lower.tolist()}, '
                f'position_upper={self.position_upper.tolist()}, '
                f'max_velocity={self.max_velocity.tolist()}, '
                f'max_acceleration={self.max_acceleration.tolist()})')
