# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The simulated task: "touch the <color> <object>", with the objects placed anew each episode.

Episode k of a base seed places the four table objects at random, well-separated places in
front of the arm and names one of them (both from `numpy.random.default_rng([base_seed, k])`),
so only the cameras tell where the named object is and only the instruction tells which one
it is. The simulator decides the outcome: success once the tool point (between the gripper's jaw
tips) comes within SUCCESS_DISTANCE of the named object's centre; failure once it comes that
close to another object first, or when the episode's time runs out. Pure numpy: the simulator
node and the tests call it with positions read from the scene.
"""
from dataclasses import dataclass
import enum
import math

import numpy as np

from pi0_ros.sim.scene import HOME_TOOL_XY, OBJECTS

# Outcome: the tool point within this distance of an object's centre touches it, m. The largest
# centre-to-top distance of the objects is 0.025 m (the cylinder), so touching any top counts.
SUCCESS_DISTANCE = 0.04
# Where objects are placed: polar coordinates around the arm's base (at the origin).
PLACEMENT_RADIUS = (0.16, 0.29)  # m
PLACEMENT_AZIMUTH = (-math.radians(55.0), math.radians(55.0))
MIN_SEPARATION = 0.085  # between object centres, m (> 2 * SUCCESS_DISTANCE: never ambiguous)
# No object under the tool point of the home pose (scene.HOME_TOOL_XY): it would touch it at once.
HOME_CLEARANCE = 0.08  # m, on the table plane


class Outcome(enum.IntEnum):
    """How an episode stands (the values of pi0_ros/EpisodeState's outcome)."""

    RUNNING = 0
    SUCCESS = 1
    WRONG_OBJECT = 2
    TIMEOUT = 3


@dataclass(frozen=True)
class Episode:
    """One seeded episode: where each object is and which one the instruction names."""

    index: int
    base_seed: int
    target: str  # object name (scene.OBJECTS)
    instruction: str
    placements: dict  # name -> (x, y, yaw)


def instruction_for(name: str) -> str:
    """Return the instruction that names object `name`."""
    item = next(item for item in OBJECTS if item.name == name)
    return f'touch the {item.color} {item.noun}'


def make_episode(index: int, base_seed: int = 0) -> Episode:
    """Return episode `index` of `base_seed` (the same arguments give the same episode)."""
    if index < 0 or base_seed < 0:
        raise ValueError(f'episode index and seed must be >= 0: {index}, {base_seed}')
    rng = np.random.default_rng([int(base_seed), int(index)])
    centres = []
    while len(centres) < len(OBJECTS):
        radius = rng.uniform(*PLACEMENT_RADIUS)
        azimuth = rng.uniform(*PLACEMENT_AZIMUTH)
        centre = np.array([radius * math.cos(azimuth), radius * math.sin(azimuth)])
        if np.linalg.norm(centre - HOME_TOOL_XY) < HOME_CLEARANCE:
            continue
        if all(np.linalg.norm(centre - other) >= MIN_SEPARATION for other in centres):
            centres.append(centre)
    yaws = rng.uniform(-math.pi, math.pi, size=len(OBJECTS))
    target = OBJECTS[int(rng.integers(len(OBJECTS)))].name
    placements = {item.name: (float(c[0]), float(c[1]), float(yaw))
                  for item, c, yaw in zip(OBJECTS, centres, yaws)}
    return Episode(index=int(index), base_seed=int(base_seed), target=target,
                   instruction=instruction_for(target), placements=placements)


def touched_object(tool_position, object_positions) -> str | None:
    """Return the object the tool point touches (within SUCCESS_DISTANCE), or None."""
    tool = np.asarray(tool_position, dtype=float)
    for name, centre in object_positions.items():
        if np.linalg.norm(tool - np.asarray(centre, dtype=float)) <= SUCCESS_DISTANCE:
            return name
    return None


class EpisodeJudge:
    """Latches an episode's outcome from the tool and object positions over time."""

    def __init__(self, episode: Episode, start_time: float, timeout: float):
        self.episode = episode
        self.start_time = float(start_time)
        self.timeout = float(timeout)  # s; 0 = no time limit
        self.outcome = Outcome.RUNNING
        self.outcome_time = None  # seconds from the start to the outcome
        self.target_distance = math.inf

    def update(self, now: float, tool_position, object_positions) -> Outcome:
        """Judge the state at time `now`; a decided outcome stays as it is."""
        target = np.asarray(object_positions[self.episode.target], dtype=float)
        self.target_distance = float(np.linalg.norm(np.asarray(tool_position) - target))
        if self.outcome != Outcome.RUNNING:
            return self.outcome
        elapsed = now - self.start_time
        touched = touched_object(tool_position, object_positions)
        if touched == self.episode.target:
            self._decide(Outcome.SUCCESS, elapsed)
        elif touched is not None:
            self._decide(Outcome.WRONG_OBJECT, elapsed)
        elif self.timeout > 0.0 and elapsed >= self.timeout:
            self._decide(Outcome.TIMEOUT, elapsed)
        return self.outcome

    def _decide(self, outcome, elapsed):
        self.outcome = outcome
        self.outcome_time = float(elapsed)
