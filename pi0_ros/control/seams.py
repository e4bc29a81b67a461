# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
How well one action chunk continues the next: metrics at every chunk switch (a seam).

Used to compare ways of handing one chunk over to the next (none, blending, real-time chunking)
on recorded runs. At a switch time s, when a new chunk replaces the executing one:

- overlap disagreement: over the new chunk's action times in [s, end of the executing chunk],
  the RMS over those times of the L2 norm over joints of (new - executing) positions, and the
  same of their velocities (finite differences over one action period);
- reference acceleration: the largest acceleration of the planner's reference (what it tracks,
  before its limits clip anything) over a window from just before s, as a multiple of each
  joint's acceleration limit (1.0 = at the limit), next to the new chunk's own over the same
  window (a rough chunk, as random weights make, is fast everywhere, not only at its seam) and
  the hand-over's: the acceleration of the reference minus the new chunk, what the switch adds.
"""
from dataclasses import dataclass

import numpy as np

from pi0_ros.control.action_chunk import Chunk
from pi0_ros.control.planner import ChunkPlanner


@dataclass(frozen=True)
class SeamDisagreement:
    """Disagreement of a new chunk with the executing one over their overlap."""

    switch_time: float
    overlap_steps: int
    position_rms: float   # joint units (rad, m)
    velocity_rms: float   # joint units per second
    position_gaps: tuple  # L2 over joints of (new - executing) at each overlapping action


def overlap_disagreement(executing: Chunk, new: Chunk, switch_time: float):
    """
    Return the SeamDisagreement of `new` taking over from `executing` at switch_time.

    None when they overlap in fewer than two of the new chunk's actions (no velocity to
    compare). The executing chunk is sampled at the new chunk's action times (linear between
    its actions), so chunks on different time grids compare.
    """
    times = new.t0 + new.dt * np.arange(new.horizon)
    inside = (times >= switch_time - 1e-9) & (times <= executing.end_time + 1e-9)
    indices = np.flatnonzero(inside)
    if indices.size < 2:
        return None
    proposed = new.actions[indices]
    executed = executing.sample_many(times[indices])
    position = np.linalg.norm(proposed - executed, axis=1)
    velocity = np.linalg.norm(np.diff(proposed - executed, axis=0) / new.dt, axis=1)
    return SeamDisagreement(float(switch_time), int(indices.size),
                            float(np.sqrt(np.mean(position ** 2))),
                            float(np.sqrt(np.mean(velocity ** 2))), tuple(position.tolist()))


def reference_acceleration(reference, switch_time: float, max_acceleration: np.ndarray,
                           step: float, window: float, minus=None) -> float:
    """
    Return the largest |acceleration| of reference over [switch_time - step, + window].

    reference(times [M]) -> positions [M, J] (e.g. ChunkPlanner.reference); the acceleration
    is the second difference over `step` seconds, per joint as a multiple of max_acceleration.
    With minus (another such function), of reference - minus: what the reference adds to it.
    """
    times = switch_time + step * np.arange(-2, int(np.ceil(window / step)) + 2)
    positions = reference(times) if minus is None else reference(times) - minus(times)
    acceleration = np.abs(np.diff(positions, n=2, axis=0)) / (step * step)
    return float(np.max(acceleration / np.asarray(max_acceleration)[None, :]))


def evaluate_seams(arrivals, config, limits, position=None):
    """
    Replay chunks through a ChunkPlanner and measure every seam.

    arrivals: [(arrival time, Chunk)] in arrival order, as the planner took them. The planner
    (config, limits) starts at rest at `position` (default: the first chunk's action at its
    arrival). Returns one dict per accepted chunk after the first: switch_time, overlap_steps,
    position_rms, velocity_rms (None where the chunks do not overlap), position_gaps (per
    overlapping action, from the switch on) and
    reference_acceleration (a multiple of the acceleration limit, over one blend duration plus
    two control periods from the switch), chunk_acceleration, the same of the new chunk alone,
    and handover_acceleration, the same of the reference minus the new chunk: what the
    hand-over adds to the chunk's own motion.
    """
    if not arrivals:
        return []
    planner = ChunkPlanner(config, limits)
    first_time, first = arrivals[0]
    start = first.sample(first_time) if position is None else np.asarray(position, float)
    planner.reset(limits.clamp_position(start), first_time)
    planner.set_enabled(True)
    executing = None
    seams = []
    window = config.blend_duration + 2 * config.control_period
    for time, chunk in arrivals:
        planner.step(time)
        if not planner.add_chunk(chunk, time).accepted:
            continue
        if executing is not None:
            seam = overlap_disagreement(executing, chunk, time)
            seams.append({
                'switch_time': float(time),
                'overlap_steps': 0 if seam is None else seam.overlap_steps,
                'position_rms': None if seam is None else seam.position_rms,
                'velocity_rms': None if seam is None else seam.velocity_rms,
                'position_gaps': () if seam is None else seam.position_gaps,
                'reference_acceleration': reference_acceleration(
                    planner.reference, time, limits.max_acceleration, config.control_period,
                    window),
                'chunk_acceleration': reference_acceleration(
                    chunk.sample_many, time, limits.max_acceleration, config.control_period,
                    window),
                'handover_acceleration': reference_acceleration(
                    planner.reference, time, limits.max_acceleration, config.control_period,
                    window, minus=chunk.sample_many)})
        executing = chunk
    return seams
