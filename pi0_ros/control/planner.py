# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Turns action chunks into short, limit-respecting trajectories for the JTC, one per tick.

Model (per joint, independent): the planner keeps the last published plan. Each step(now)
evaluates that plan at `now` (so the commanded state is exactly what the controller is executing,
whatever the tick jitter, given a controller that runs each plan from its start time, the
message's stamp, and continues from its own last command: open_loop_control) and plans
`points_per_message` new points on a time grid of `point_spacing` fixed at reset (so successive
plans share their points and a jittered tick does not break the braking invariant below). The
first point is the first grid point at least FIRST_POINT_LEAD h after now: a controller receives
the plan a little after its stamp (a millisecond), and a first point still ahead of it keeps the
plan's start, not a spline from wherever the delivery delay left the arm to the second point.
Where that longer first segment cannot stay inside the position limits (it cannot brake as hard
as a short one) the first point is the next grid point, (0, h] after now:

* Between points the acceleration is constant: q[i] = q[i-1] + h * (v[i-1] + v[i]) / 2 with
  |v[i] - v[i-1]| <= max_acceleration * h. A cubic through such points with these velocities (what
  the JTC does when positions and velocities are sent) degenerates to exactly this quadratic, so
  the executed motion respects the velocity and acceleration limits between points, too.
* Every plan can stop by its last point: |v[i]| <= max_acceleration * h * (N - i), so the last
  point has zero velocity (JTC rule) and, if the node dies, the arm stops within its limits where
  the last message ends. Cost: the speed is capped at max_acceleration * h * (N - 1) (with the
  defaults, 0.18 s times the acceleration limit); make the lookahead at least
  max_velocity / max_acceleration long to reach full speed.
* Position limits: a point's velocity is bounded so that braking at max_acceleration from it stops
  inside the limits (exact for the discrete braking below), and positions are clipped as a last
  resort.
* Following: a deadbeat tracker of the reference (converges in two points when unconstrained, exact
  on constant-velocity references), with its approach speed bounded so that it can stop at the
  target (a far target is approached at bounded speed and acceleration without overshoot).
* Holding (hold reason, disabled, e-stop): velocity is reduced by max_acceleration * h per point
  until it is zero, then the position stays (the e-stop is thus a controlled stop, latched until
  clear_estop()). A hold discards the chunks it interrupts; motion resumes only with a chunk
  added afterwards (a hold that ends before the arm is at rest keeps braking until then).
  When the chunks run out ('chunk exhausted') the reference stays at the last action, so the
  arm settles there.
* Joints are limited independently: when a limit binds on some joints only, the joint-space path
  deviates from the chunk's until the tracker catches up.

Reference: the newest chunk is blended into the previous reference over blend_duration from its
arrival with a C2 smootherstep weight (position, velocity and acceleration continuous at the
seam). With temporal_ensembling, the chunks covering a time are averaged with ACT weights
exp(-ensembling_decay * i), i = 0 for the oldest, each ramped in by the same weight; a chunk
leaves the average at its last action's time (a small step of the reference that the tracker's
limits smooth). At most MAX_REFERENCE_SEGMENTS blends are kept; beyond, the oldest is dropped.

Time: `now` is always passed in (ROS clock). If it goes backwards (sim time reset), the planner
moves the executing plan onto the new time base: it takes the commanded state one control period
after the last step on the old base (where the controller is, as far as the planner can know),
keeps its position and velocity, drops the chunks and brakes from there at the acceleration limit
('clock jumped backwards'), its points on the old grid's phase, until a chunk stamped on the new
time base arrives. A jump forward past
the published plan finds the arm stopped at the plan's last point, as the controller leaves it.

Chunks are ordered by their t0 (the observation's stamp): one older than the executing chunk is
rejected. A t0 ahead of `now` (a camera clock running ahead) counts as `now` for that ordering,
so one chunk stamped in the future cannot lock out the correctly stamped ones after it.

Start: reset() takes the measured position. A position outside the position limits by more than
a step the acceleration limit allows within one point spacing is refused (OutsideLimits): moving
it inside at once would be a jump, and the limits or the arm need attention first. A measured
velocity (an arm still moving when the policy takes over) is continued, within the limits, and
braked at the acceleration limit until a chunk arrives, rather than stopped within one point.
"""
from dataclasses import dataclass
import enum
import math

import numpy as np

from pi0_ros.control.action_chunk import Chunk
from pi0_ros.control.limits import JointLimits

MAX_REFERENCE_SEGMENTS = 16
FIRST_POINT_LEAD = 0.25      # the first point is at least this many point spacings after now
VELOCITY_EPSILON = 1e-12
# Room beyond the braking distance bound (_track) under which a bound's speed is computed
# exactly: covers the rounding of both sides (positions in rad or m).
ROOM_MARGIN = 1e-9
REASON_WAITING = 'waiting for chunk'
REASON_EXHAUSTED = 'chunk exhausted'
REASON_DISABLED = 'disabled'
REASON_ESTOP = 'e-stop'
REASON_CLOCK = 'clock jumped backwards'
REASON_NOT_RESET = 'not reset'


class OutsideLimits(ValueError):
    """A measured position too far outside the position limits to start from (reset())."""


@dataclass(frozen=True)
class PlannerConfig:
    """
    Planner settings (seconds).

    control_period: expected interval between step() calls (the control timer period).
    points_per_message: N, trajectory points returned per step (>= 2).
    point_spacing: h, time between successive points; the lookahead N * h must cover at least two
        control periods so that the controller never runs out of plan between ticks.
    blend_duration: time over which a new chunk is blended into the executing reference from its
        arrival (0 switches at once; the tracker still bounds velocity and acceleration).
    temporal_ensembling: average overlapping chunks with ACT-style exponential weights.
    ensembling_decay: m in the weights exp(-m * i), i = 0 for the oldest chunk (>= 0).
    """

    control_period: float = 0.02
    points_per_message: int = 10
    point_spacing: float = 0.02
    blend_duration: float = 0.2
    temporal_ensembling: bool = False
    ensembling_decay: float = 0.1

    def __post_init__(self):
        for name in ('control_period', 'point_spacing'):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f'{name} must be a finite number > 0, got {value!r}')
        if isinstance(self.points_per_message, bool) or not isinstance(
                self.points_per_message, int) or self.points_per_message < 2:
            raise ValueError(f'points_per_message must be an integer >= 2, '
                             f'got {self.points_per_message!r}')
        if self.lookahead_duration < 2 * self.control_period:
            raise ValueError(f'points_per_message * point_spacing = {self.lookahead_duration} s '
                             f'must be at least two control periods '
                             f'({2 * self.control_period} s)')
        for name in ('blend_duration', 'ensembling_decay'):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f'{name} must be a finite number >= 0, got {value!r}')
        if not isinstance(self.temporal_ensembling, bool):
            raise ValueError(f'temporal_ensembling must be a bool, '
                             f'got {self.temporal_ensembling!r}')

    @property
    def lookahead_duration(self) -> float:
        """Return the time covered by one message, points_per_message * point_spacing."""
        return self.points_per_message * self.point_spacing


class PlannerState(enum.Enum):
    """What the planner is doing."""

    DISABLED = 'disabled'
    FOLLOWING = 'following'
    HOLDING = 'holding'
    ESTOP = 'estop'


@dataclass(frozen=True, eq=False)
class PlanPoints:
    """Trajectory points; times_from_start count from start_time (the step's `now`)."""

    times_from_start: np.ndarray
    positions: np.ndarray
    velocities: np.ndarray
    state: PlannerState
    hold_reason: str | None
    start_time: float = 0.0

    def __len__(self) -> int:
        return int(self.times_from_start.size)


@dataclass(frozen=True)
class AddChunkResult:
    """Outcome of ChunkPlanner.add_chunk; skipped_actions counts actions already in the past."""

    accepted: bool
    skipped_actions: int
    reason: str


def smootherstep(x: np.ndarray) -> np.ndarray:
    """Return the C2 blend weight 6x^5 - 15x^4 + 10x^3 of x clipped to [0, 1]."""
    x = np.clip(x, 0.0, 1.0)
    return x * x * x * (x * (6.0 * x - 15.0) + 10.0)


def max_speed_to_stop(room: np.ndarray, max_acceleration: np.ndarray, h: float,
                      first_step: float | None = None) -> np.ndarray:
    """
    Return the largest next velocity v' >= 0 after which the planner can stop within `room`.

    The next point is first_step (default h) ahead; room is the distance to the bound left after
    the current velocity's share of that step (bound - q - first_step * v / 2). Stopping means
    the planner's discrete braking: the velocity drops by A * h per point of the grid. That
    travels g(v') = v' (h1 / 2 + h / 2 + m h) - A h^2 m (m + 1) / 2 with m = floor(v' / (A h)),
    piecewise linear in v', inverted here exactly. A negative room returns the (negative)
    velocity that lands the next point on the bound.
    """
    h1 = h if first_step is None else first_step
    with np.errstate(invalid='ignore', over='ignore'):
        safe_room = np.maximum(room, 0.0)
        m = np.floor((np.sqrt(h1 * h1 + 8.0 * safe_room / max_acceleration) - h1) / (2.0 * h))
        speed = ((safe_room + max_acceleration * h * h * m * (m + 1.0) / 2.0)
                 / (0.5 * h1 + 0.5 * h + m * h))
    speed = np.where(np.isinf(room), np.inf, speed)
    return np.where(room < 0.0, 2.0 * room / h1, speed)


def _speed_to_stop(room: float, max_acceleration: float, h: float, h1: float) -> float:
    """
    Return max_speed_to_stop for one joint, in Python floats (the tracker's inner loop).

    The same arithmetic as the array version, operation for operation, so the results are equal
    to the bit; on a handful of joints it runs ~2x faster than numpy calls, whose fixed cost
    dominates on 6-element arrays. A room so large that the square root overflows counts as
    unbounded (the array version returns NaN there).
    """
    if room < 0.0:
        return 2.0 * room / h1
    root = math.sqrt(h1 * h1 + 8.0 * room / max_acceleration)
    if not math.isfinite(root):
        return root   # inf: no bound; NaN (never from finite inputs) stays NaN, as in numpy
    m = math.floor((root - h1) / (2.0 * h))
    return ((room + max_acceleration * h * h * m * (m + 1.0) / 2.0)
            / (0.5 * h1 + 0.5 * h + m * h))


class _Segment:
    """One reference source: a chunk (blended in from `start`) or a constant position."""

    __slots__ = ('chunk', 'position', 'start')

    def __init__(self, start: float, chunk: Chunk | None = None,
                 position: np.ndarray | None = None):
        self.start = start
        self.chunk = chunk
        self.position = position

    def at(self, times: np.ndarray) -> np.ndarray:
        if self.chunk is None:
            return np.broadcast_to(self.position, (times.size, self.position.size))
        return self.chunk.sample_many(times)


class ChunkPlanner:
    """Plans the next trajectory points from action chunks within joint limits (module doc)."""

    def __init__(self, config: PlannerConfig, limits: JointLimits):
        self.config = config
        self.limits = limits
        num_points = config.points_per_message
        h = config.point_spacing
        self._grid_steps = h * np.arange(num_points, dtype=np.float64)
        self._grid_steps.setflags(write=False)
        # Speed that still allows a stop by the last point, per point index i = 1..N.
        self._horizon_speed = (limits.max_acceleration[None, :] * h
                               * (num_points - np.arange(1, num_points + 1))[:, None])
        # The speed bound of point i: the joint's limit and what still stops by the last point.
        self._speed_caps = np.minimum(limits.max_velocity[None, :], self._horizon_speed)
        self._enabled = False
        self._estopped = False
        self._is_reset = False
        self._mode = PlannerState.HOLDING
        self._hold_reason: str | None = REASON_NOT_RESET
        self._segments: list[_Segment] = []
        self._last_t0 = -math.inf
        self._time = 0.0
        self._position = np.zeros(limits.num_joints)
        self._velocity = np.zeros(limits.num_joints)
        self._grid_origin = 0.0
        self._plan: PlanPoints | None = None
        self._plan_times = self._grid_steps
        self._plan_start_position = self._position
        self._plan_start_velocity = self._velocity

    # ---------------------------------------------------------------- state and commands
    @property
    def state(self) -> PlannerState:
        """Return what the planner does now; ESTOP and DISABLED apply at once, others at step."""
        if self._estopped:
            return PlannerState.ESTOP
        if not (self._enabled and self._is_reset):
            return PlannerState.DISABLED
        return self._mode

    @property
    def hold_reason(self) -> str | None:
        """Return why the planner holds, None while following."""
        if self._estopped:
            return REASON_ESTOP
        if not self._is_reset:
            return REASON_NOT_RESET
        if not self._enabled:
            return REASON_DISABLED
        return self._hold_reason

    @property
    def commanded_position(self) -> np.ndarray:
        """Return the commanded position [J] at the last step (or reset) time."""
        return self._position.copy()

    @property
    def commanded_velocity(self) -> np.ndarray:
        """Return the commanded velocity [J] at the last step (or reset) time."""
        return self._velocity.copy()

    @property
    def effective_max_velocity(self) -> np.ndarray:
        """Return the speed the planner can reach: min(max_velocity, A * h * (N - 1))."""
        return np.minimum(self.limits.max_velocity, self._horizon_speed[0])

    def set_enabled(self, enabled: bool) -> None:
        """Enable or disable following; disabled means hold (decelerate, then stay)."""
        self._enabled = bool(enabled)

    def estop(self) -> None:
        """Latch an emergency stop: decelerate at the limit, hold until it is cleared."""
        self._estopped = True

    def clear_estop(self) -> None:
        """Release a latched e-stop; motion resumes with the next chunk added afterwards."""
        self._estopped = False

    @property
    def reset_tolerance(self) -> np.ndarray:
        """
        Return how far [J] a reset position may lie outside the position limits.

        Such a position is clipped to the limits: a rest-to-rest step of this size within one
        point spacing h (a cubic, as the controller interpolates it) peaks at the acceleration
        limit, A h^2 / 6.
        """
        return self.limits.max_acceleration * self.config.point_spacing ** 2 / 6.0

    def reset(self, position: np.ndarray, now: float, velocity: np.ndarray = None) -> None:
        """
        Start from a measured position (and velocity; at rest without one) at time now.

        A position outside the limits by at most reset_tolerance is clipped to them; further
        outside raises OutsideLimits (naming the joints) and leaves the planner as it was. A
        moving start is bounded by startable_velocity() and brakes until a chunk arrives.
        """
        position = np.asarray(position, dtype=np.float64)
        if position.shape != (self.limits.num_joints,) or not np.isfinite(position).all():
            raise ValueError(f'reset position must be {self.limits.num_joints} finite values, '
                             f'got {position!r}')
        if velocity is not None:
            velocity = np.asarray(velocity, dtype=np.float64)
            if velocity.shape != position.shape or not np.isfinite(velocity).all():
                raise ValueError(f'reset velocity must be {self.limits.num_joints} finite '
                                 f'values, got {velocity!r}')
        if not math.isfinite(now):
            raise ValueError(f'now must be finite, got {now!r}')
        clipped = self.limits.clamp_position(position)
        outside = np.flatnonzero(np.abs(position - clipped) > self.reset_tolerance)
        if outside.size:
            limits = self.limits
            raise OutsideLimits('measured position outside the position limits: ' + ', '.join(
                f'{limits.names[j]} at {position[j]:.4f} '
                f'(limits {limits.position_lower[j]:.4f} .. {limits.position_upper[j]:.4f})'
                for j in outside))
        self._is_reset = True
        moving = velocity is not None and np.any(velocity)
        self._restart(clipped, float(now), REASON_WAITING,
                      velocity=self.startable_velocity(clipped, velocity) if moving else None)

    def startable_velocity(self, position: np.ndarray, velocity: np.ndarray) -> np.ndarray:
        """
        Return a measured velocity bounded so that a plan can start from it within all limits.

        Bounds: the velocity limit, the speed every plan can stop from by its last point
        (A h (N - 1)), and the speed that braking at the acceleration limit stops from inside
        the position limits. A faster arm still gets a velocity step, the smallest one allowed.
        """
        limits, h = self.limits, self.config.point_spacing
        speed = np.minimum(limits.max_velocity,
                           limits.max_acceleration * h * (self.config.points_per_message - 1))
        up = max_speed_to_stop(limits.position_upper - position, limits.max_acceleration, h)
        down = max_speed_to_stop(position - limits.position_lower, limits.max_acceleration, h)
        return np.clip(velocity, -np.minimum(speed, np.maximum(down, 0.0)),
                       np.minimum(speed, np.maximum(up, 0.0)))

    def at_rest_from(self, now: float) -> bool:
        """
        Tell whether the commanded motion is at rest from now on.

        That is, the published plan's segment under now and every point after it have zero
        velocity: a plan just started from rest moves by its first point, although the state at
        the step that made it was at rest.
        """
        plan = self._plan
        if plan is None:
            return not np.any(self._velocity)
        index = int(np.searchsorted(self._plan_times, float(now), side='right'))
        if index >= len(self._plan_times):
            return True                                   # a plan ends at rest (JTC rule)
        start = self._plan_start_velocity if index == 0 else plan.velocities[index - 1]
        return not (np.any(start) or np.any(plan.velocities[index:]))

    @property
    def plan_end_time(self) -> float:
        """Return the time of the published plan's last point (-inf before the first plan)."""
        return float(self._plan_times[-1]) if self._plan is not None else -math.inf

    def _restart(self, position: np.ndarray, now: float, reason: str,
                 velocity: np.ndarray | None = None, grid_phase: float = 0.0) -> None:
        self._time = now
        self._grid_origin = now - grid_phase
        self._position = position
        self._velocity = np.zeros_like(position) if velocity is None else velocity
        self._plan = None
        # Moving: no reference; step() brakes (module doc). At rest: hold the position.
        self._segments = [] if velocity is not None else [_Segment(now, position=position.copy())]
        self._last_t0 = -math.inf
        self._mode = PlannerState.HOLDING
        self._hold_reason = reason

    def _restart_after_clock_jump(self, now: float) -> None:
        """
        Continue the executing plan on a new time base (the clock went back to now).

        The point grid keeps its phase relative to the continued state: braking from a point
        stops inside the position limits exactly on the grid whose points the plan's velocities
        were bounded for, and a grid shifted by a fraction of a spacing could overshoot a limit
        by up to max_acceleration h^2 / 8 (clipped: a segment beyond the acceleration limit).
        """
        continued_at = self._time + self.config.control_period
        self._state_at(continued_at)
        phase = (continued_at - self._grid_origin) % self.config.point_spacing
        self._restart(self._position.copy(), now, REASON_CLOCK, velocity=self._velocity.copy(),
                      grid_phase=phase)

    # ---------------------------------------------------------------- chunks
    def add_chunk(self, chunk: Chunk, now: float) -> AddChunkResult:
        """Blend a chunk into the reference from now on; past actions are skipped, never late."""
        if self._estopped:
            return AddChunkResult(False, 0, 'e-stop latched')
        if not self._is_reset:
            return AddChunkResult(False, 0, 'planner not reset')
        if not self._enabled:
            return AddChunkResult(False, 0, 'planner disabled')
        if chunk.num_joints != self.limits.num_joints:
            return AddChunkResult(False, 0, f'chunk has {chunk.num_joints} joints, expected '
                                            f'{self.limits.num_joints}')
        if not (math.isfinite(chunk.t0) and math.isfinite(chunk.dt) and chunk.dt > 0):
            return AddChunkResult(False, 0, f'bad chunk time base t0={chunk.t0} dt={chunk.dt}')
        if not np.isfinite(chunk.actions).all():
            return AddChunkResult(False, 0, 'chunk has non-finite actions')
        if now < self._time:
            # The clock went back; this chunk is judged on the new time base.
            self._restart_after_clock_jump(float(now))
        past = int(np.count_nonzero(chunk.t0 + chunk.dt * np.arange(chunk.horizon) < now))
        if past == chunk.horizon:
            return AddChunkResult(False, past, f'chunk wholly in the past (ends '
                                               f'{now - chunk.end_time:.3f} s before now)')
        if chunk.t0 < self._last_t0:
            return AddChunkResult(False, past, f'chunk older than the executing one '
                                               f'(t0 {chunk.t0} < {self._last_t0})')
        clamped = Chunk(chunk.t0, chunk.dt, self.limits.clamp_position(chunk.actions),
                        chunk.sequence)
        if not self._segments:
            # Holding after a stop: blend in from where the command is.
            self._segments.append(_Segment(now, position=self._position.copy()))
        self._segments.append(_Segment(float(now), chunk=clamped))
        if len(self._segments) > MAX_REFERENCE_SEGMENTS:
            del self._segments[0]
        self._last_t0 = min(chunk.t0, float(now))
        return AddChunkResult(True, past, 'accepted')

    def remaining_horizon(self, now: float) -> float:
        """Return the seconds of chunk left after now (0 without a chunk or while holding)."""
        ends = [s.chunk.end_time for s in self._segments if s.chunk is not None]
        if not ends or self.state in (PlannerState.ESTOP, PlannerState.DISABLED):
            return 0.0
        return max(0.0, max(ends) - now)

    # ---------------------------------------------------------------- reference
    def _prune(self, now: float) -> None:
        blend = self.config.blend_duration
        segments = self._segments
        if self.config.temporal_ensembling:
            newest = segments[-1]
            kept = [s for s in segments
                    if s is newest or (s.chunk is not None and s.chunk.end_time >= now)
                    or (s.chunk is None and len(segments) > 1 and now < segments[1].start + blend)]
            self._segments = kept
            return
        for index in range(len(segments) - 1, 0, -1):
            if now >= segments[index].start + blend:
                del segments[:index]
                return

    def _blend_weight(self, times: np.ndarray, start: float) -> np.ndarray:
        if self.config.blend_duration == 0.0:
            return (times >= start).astype(np.float64)
        return smootherstep((times - start) / self.config.blend_duration)

    def reference(self, times: np.ndarray) -> np.ndarray:
        """Return the blended reference positions [M, J] at the times [M] (for tests, plots)."""
        times = np.asarray(times, dtype=np.float64)
        segments = self._segments
        if self.config.temporal_ensembling:
            return self._ensemble(times, segments)
        reference = np.array(segments[0].at(times))
        for segment in segments[1:]:
            weight = self._blend_weight(times, segment.start)[:, None]
            reference += weight * (segment.at(times) - reference)
        return reference

    def _ensemble(self, times: np.ndarray, segments: list) -> np.ndarray:
        base = segments[0] if segments[0].chunk is None else None
        chunks = [s for s in segments if s.chunk is not None]
        if not chunks:
            return np.array(base.at(times))
        total = np.zeros((times.size, 1))
        weighted = np.zeros((times.size, self.limits.num_joints))
        for index, segment in enumerate(chunks):
            covered = times <= segment.chunk.end_time
            weight = (math.exp(-self.config.ensembling_decay * index) * covered
                      * self._blend_weight(times, segment.start))[:, None]
            total += weight
            weighted += weight * segment.at(times)
        newest = chunks[-1].at(times)
        with np.errstate(invalid='ignore', divide='ignore'):
            ensemble = np.where(total > 0.0, weighted / np.maximum(total, 1e-300), newest)
        if base is None:
            return ensemble
        weight = self._blend_weight(times, chunks[0].start)[:, None]
        return base.at(times) + weight * (ensemble - base.at(times))

    # ---------------------------------------------------------------- stepping
    def _state_at(self, now: float) -> None:
        """Advance the commanded state to now along the last published plan."""
        plan = self._plan
        if plan is None:
            return
        times = self._plan_times                         # absolute times of the plan's points
        index = int(np.searchsorted(times, now, side='right'))
        if index >= len(times):
            self._position = plan.positions[-1].copy()
            self._velocity = np.zeros_like(self._position)
            return
        if index == 0:
            start_time = plan.start_time
            start_q, start_v = self._plan_start_position, self._plan_start_velocity
        else:
            start_time = times[index - 1]
            start_q, start_v = plan.positions[index - 1], plan.velocities[index - 1]
        duration = times[index] - start_time
        tau = now - start_time
        acceleration = (plan.velocities[index] - start_v) / duration
        self._position = start_q + start_v * tau + 0.5 * acceleration * tau * tau
        velocity = start_v + acceleration * tau
        # Rest is exact: on a segment that ends at rest, a state taken short of its end keeps
        # a fraction of the start velocity, and tick after tick that decays without reaching 0.
        velocity[np.abs(velocity) < VELOCITY_EPSILON] = 0.0
        self._velocity = velocity

    def _point_times(self, now: float, lead: bool) -> tuple[np.ndarray, np.ndarray]:
        """
        Return the absolute times [N] of the next points (the grid after now), and from now.

        Points lie on a grid fixed at reset (origin + k h), whatever the tick jitter, so a new
        plan's points coincide with the executing plan's, and the braking invariant checked at
        the points of one plan holds for the next. The first point is (0, h] after now, or with
        lead, (FIRST_POINT_LEAD h, (1 + FIRST_POINT_LEAD) h]: a controller that receives the plan
        a little after its stamp then still finds its first point ahead (see step()).
        Also returns the times from now, computed from the tick count rather than as a
        difference of absolute times: near 1.8e9 s (ROS time) such a difference keeps only
        ~0.2 us and could round a first point to a time_from_start of zero.
        """
        h = self.config.point_spacing
        elapsed = now - self._grid_origin
        ticks = math.floor(elapsed / h + 1e-6) + 1
        if lead and h * ticks - elapsed < FIRST_POINT_LEAD * h:
            ticks += 1
        from_now = (h * ticks - elapsed) + self._grid_steps
        return self._grid_origin + h * ticks + self._grid_steps, from_now

    def step(self, now: float, hold_reason: str | None = None) -> PlanPoints:
        """
        Advance the commanded state to now and return the next points (see module doc).

        Returns an empty PlanPoints (nothing to publish) until reset() has been called.
        """
        num_joints = self.limits.num_joints
        if not self._is_reset:
            empty = np.zeros((0, num_joints))
            return PlanPoints(np.zeros(0), empty, empty.copy(), PlannerState.DISABLED,
                              REASON_NOT_RESET, float(now))
        now = float(now)
        if not math.isfinite(now):
            raise ValueError(f'now must be finite, got {now!r}')
        if now < self._time:
            self._restart_after_clock_jump(now)
        else:
            self._state_at(now)
            self._time = now

        brake_reason = None
        if self._estopped:
            brake_reason = REASON_ESTOP
        elif not self._enabled:
            brake_reason = REASON_DISABLED
        elif hold_reason is not None:
            brake_reason = str(hold_reason)
        elif not self._segments and np.any(self._velocity):
            # Moving without a reference (a hold just ended, the clock went back): brake to
            # rest rather than steer back to where the hold began; a chunk resumes following.
            brake_reason = REASON_CLOCK if self._hold_reason == REASON_CLOCK else REASON_WAITING
        if brake_reason is not None:
            self._segments = []
            self._mode = PlannerState.HOLDING
            self._hold_reason = brake_reason
        else:
            if not self._segments:
                self._segments = [_Segment(now, position=self._position.copy())]
            self._prune(now)
            chunk_ends = [s.chunk.end_time for s in self._segments if s.chunk is not None]
            if not chunk_ends:
                self._mode = PlannerState.HOLDING
                if self._hold_reason not in (REASON_CLOCK, REASON_WAITING):
                    self._hold_reason = REASON_WAITING
            elif now > max(chunk_ends):
                self._mode, self._hold_reason = PlannerState.HOLDING, REASON_EXHAUSTED
            else:
                self._mode, self._hold_reason = PlannerState.FOLLOWING, None
        # The first point a lead ahead, unless the longer first segment cannot stay inside the
        # position limits (it cannot brake as hard as a short one): then the grid point next.
        braking = brake_reason is not None
        times, from_now, positions, velocities = self._plan_points(now, braking, lead=True)
        if not self._first_segment_inside(positions[0], velocities[0], from_now[0]):
            times, from_now, positions, velocities = self._plan_points(now, braking, lead=False)

        plan = PlanPoints(from_now, positions, velocities, self.state, self.hold_reason, now)
        self._plan = plan
        self._plan_times = times
        self._plan_start_position = self._position.copy()
        self._plan_start_velocity = self._velocity.copy()
        return plan

    def _plan_points(self, now: float, braking: bool, lead: bool) -> tuple:
        """Return the points' times (absolute, from now), positions and velocities."""
        times, from_now = self._point_times(now, lead)
        if braking:
            return (times, from_now, *self._brake(from_now[0]))
        return (times, from_now, *self._track(now, times, from_now))

    def _first_segment_inside(self, position: np.ndarray, velocity: np.ndarray,
                              step: float) -> bool:
        """Return whether now -> the first point is one constant acceleration within limits."""
        q0, v0 = self._position, self._velocity
        if not np.allclose(position, q0 + 0.5 * step * (v0 + velocity), rtol=0.0, atol=1e-12):
            return False                                  # a position clipped to a limit
        acceleration = (velocity - v0) / step
        with np.errstate(divide='ignore', invalid='ignore'):
            turn = np.where(acceleration != 0.0, -v0 / acceleration, -1.0)
        apex = np.where((turn > 0.0) & (turn < step),
                        q0 + v0 * turn + 0.5 * acceleration * turn * turn, q0)
        return bool(np.all(apex <= self.limits.position_upper)
                    and np.all(apex >= self.limits.position_lower))

    def _brake(self, first_step: float) -> tuple[np.ndarray, np.ndarray]:
        h = self.config.point_spacing
        count = self.config.points_per_message
        positions = np.empty((count, self.limits.num_joints))
        velocities = np.empty_like(positions)
        q, v = self._position, self._velocity
        for index in range(count):
            step = first_step if index == 0 else h
            v_next = v - np.sign(v) * np.minimum(np.abs(v), self.limits.max_acceleration * step)
            if index == count - 1:
                v_next = np.zeros_like(v)
            q = self.limits.clamp_position(q + 0.5 * step * (v + v_next))
            positions[index], velocities[index] = q, v_next
            v = v_next
        return positions, velocities

    def _track(self, now: float, times: np.ndarray,
               from_now: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """
        Plan the next points toward the reference within all limits (module doc).

        This runs on every control tick: the loop over points and joints is in Python floats,
        which on a few joints takes half the time of numpy calls on [J] arrays (the control
        tick's latency is the node's output jitter).
        """
        h = self.config.point_spacing
        count = self.config.points_per_message
        limits = self.limits
        anchors = np.concatenate(([now], times))
        samples = self.reference((anchors[:, None] + np.array([-0.5 * h, 0.0, 0.5 * h]))
                                 .reshape(-1)).reshape(count + 1, 3, -1)
        references = samples[:, 1].tolist()              # at now and at each point
        reference_velocities = ((samples[:, 2] - samples[:, 0]) / h).tolist()
        accelerations = limits.max_acceleration.tolist()
        lower_bounds, upper_bounds = limits.position_lower.tolist(), limits.position_upper.tolist()
        speed_caps = self._speed_caps.tolist()
        # Step lengths from the times from now: differences of absolute times (~1.8e9 s on
        # the ROS clock) keep only ~0.2 us, too coarse for a first point just after now.
        steps = np.diff(from_now, prepend=0.0).tolist()
        positions, velocities = [], []
        q, v = self._position.tolist(), self._velocity.tolist()
        for index in range(1, count + 1):
            step = steps[index - 1]
            q_next, v_next = [], []
            for joint, (position, velocity, accel, lower, upper) in enumerate(
                    zip(q, v, accelerations, lower_bounds, upper_bounds)):
                error = position - references[index - 1][joint]
                relative_velocity = velocity - reference_velocities[index - 1][joint]
                # Deadbeat over this step and the next (exact after two on a constant velocity).
                desired = -(2.0 * error + step * relative_velocity) / (step + h)
                # Approach speed toward the next reference point, so that it can stop there.
                gap = references[index][joint] - position
                direction = 1.0 if gap >= 0.0 else -1.0
                approach = _speed_to_stop(abs(gap) - 0.5 * step * direction * relative_velocity,
                                          accel, h, step)
                if direction * desired > approach:
                    desired = direction * approach
                # Speed, horizon and position limits: braking from the next velocity stops inside.
                speed = speed_caps[index - 1][joint]
                # Far from a bound, braking from `speed` stops inside: that bound cannot bind
                # (min/max below give `speed` either way) and its exact speed is not computed.
                stop_room = speed * (0.5 * step + 0.5 * speed / accel) + accel * h * h / 8.0
                room = upper - position - 0.5 * step * velocity
                to_upper = (speed if room > stop_room + ROOM_MARGIN
                            else _speed_to_stop(room, accel, h, step))
                room = position - lower + 0.5 * step * velocity
                to_lower = (speed if room > stop_room + ROOM_MARGIN
                            else _speed_to_stop(room, accel, h, step))
                bounded = min(max(reference_velocities[index][joint] + desired,
                                  max(-speed, -to_lower)), min(speed, to_upper))
                # The acceleration limit wins where they disagree (only from an infeasible state).
                change = accel * step
                new_velocity = min(max(bounded, velocity - change), velocity + change)
                # The last point is at rest; the tracker's rounding residue (~1e-20 at rest) is
                # not motion: keep rest exact.
                if index == count or abs(new_velocity) < VELOCITY_EPSILON:
                    new_velocity = 0.0
                q_next.append(min(max(position + 0.5 * step * (velocity + new_velocity), lower),
                                  upper))
                v_next.append(new_velocity)
            positions.append(q_next)
            velocities.append(v_next)
            q, v = q_next, v_next
        return np.array(positions), np.array(velocities)
