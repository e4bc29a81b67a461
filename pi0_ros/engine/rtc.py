# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Real-Time Chunking (Black, Galliker, Levine 2025): the host side of the guidance.

At each Euler step the engine guides the velocity v of the chunk x_t towards the previous
chunk's actions that are still to be executed:

    x1 = x_t - t * v                       (the chunk the step predicts; t runs 1 -> 0)
    err = (prev - x1) * weights            (weights over the chunk's rows, below)
    v' = v - min(guidance(t), max_guidance_weight) * correction

with correction = err when v is taken as a constant of x_t (LeRobot 0.6.1), or the
vector-Jacobian product of x1 with err, err - t * J_v^T err (the paper; RTCOptions.jacobian).
The device side (the guided Euler steps) is model.denoise_forward's `guidance`.

This module turns one observation's RTCRequest into the numbers those steps read, and says
why a request cannot be used instead of raising: a bad request runs the observation without
guidance. The numerics follow LeRobot 0.6.1's RTCProcessor (same float32 operations): the
execution horizon is cut to the previous chunk's length, the delay to the horizon; the
previous chunk is padded with zeros, in the normalized action space, to the chunk's rows and
the model's padded action dims (its weights are zero past its rows, and a zero of a padded
dim is the model's own padding value, never a decoded dataset mean).
"""
from dataclasses import dataclass
import functools
import math
import operator

import numpy as np
import torch

from pi0_ros.engine.config import ModelDims, RTC_SCHEDULES, RTCOptions, RTCRequest


@dataclass
class GuidancePlan:
    """What the guided steps of one observation read (float32 host arrays)."""

    prev: np.ndarray  # [chunk, max_action_dim], zero-padded
    weights: np.ndarray  # [chunk]
    guidance: np.ndarray  # [num_steps]


# Both weight functions below are computed once per distinct argument tuple: each is a few
# dozen tiny torch operations run from Python, and beside busy threads (a fleet's executor and
# control thread) that work waits for the GIL again and again, up to the interpreter's switch
# interval each time: on a 2-core CPU one plan_guidance took 0.34 ms alone and 54.5 ms beside
# two busy Python threads, per observation of every guided call (benchmarks/gil_contention.py).
# The results are read-only, shared by the calls.
_WEIGHT_CACHE_SIZE = 4096


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@functools.lru_cache(maxsize=_WEIGHT_CACHE_SIZE)
def prefix_weights(schedule: str, delay: int, horizon: int, prev_rows: int,
                   chunk: int) -> np.ndarray:
    """
    Return the weights [chunk] of the rows of the previous chunk, as float32 (read-only).

    The horizon is cut to the rows the previous chunk has and the delay to the horizon; rows
    before the delay weigh 1 ('ones' keeps 1 up to the horizon, 'zeros' 0 after the delay),
    rows from the delay to the horizon fall from 1 towards 0 ('linear': evenly, without the
    end points; 'exp': w * (e^w - 1) / (e - 1) of the linear w), rows after the horizon 0.
    """
    end = min(horizon, prev_rows, chunk)
    start = min(delay, end)
    weights = torch.zeros(chunk, dtype=torch.float32)
    if schedule == 'ones':
        weights[:end] = 1.0
        return _read_only(weights.numpy())
    weights[:start] = 1.0
    ramp_rows = end - start
    if schedule in ('linear', 'exp') and ramp_rows > 0:
        ramp = torch.linspace(1.0, 0.0, ramp_rows + 2, dtype=torch.float32)[1:-1]
        if schedule == 'exp':
            ramp = ramp * torch.expm1(ramp).div(math.e - 1)
        weights[start:end] = ramp
    return _read_only(weights.numpy())


@functools.lru_cache(maxsize=_WEIGHT_CACHE_SIZE)
def guidance_weights(num_steps: int, max_guidance_weight: float) -> np.ndarray:
    """
    Return the guidance weight of each Euler step [num_steps], as float32 (read-only).

    With t the step's time (1 -> 0) and tau = 1 - t (the paper's time), the weight is
    t / tau * (t^2 + tau^2) / t^2, capped at max_guidance_weight (which it is at t = 1).
    """
    cap = torch.tensor(max_guidance_weight, dtype=torch.float32)
    dt = -1.0 / num_steps
    weights = np.empty(num_steps, np.float32)
    for step in range(num_steps):
        tau = torch.tensor(1.0 - (1.0 + step * dt), dtype=torch.float32)
        t_squared = (1 - tau) ** 2
        spread = (t_squared + tau ** 2) / t_squared
        ratio = torch.nan_to_num((1 - tau) / tau, posinf=max_guidance_weight)
        weight = torch.nan_to_num(ratio * spread, posinf=max_guidance_weight)
        weights[step] = torch.minimum(weight, cap).item()
    return _read_only(weights)


def _as_rows(value, action_dim: int, chunk: int) -> 'tuple[np.ndarray | None, str]':
    """Return the previous chunk as float32 [T, action_dim], or None and why not."""
    if value is None:
        return None, 'no previous chunk'
    try:
        if isinstance(value, torch.Tensor):
            if value.dtype == torch.bool or value.is_complex():
                return None, f'the previous chunk is not real numbers: dtype {value.dtype}'
            value = value.detach().to('cpu', torch.float32).numpy()
        array = np.asarray(value)
        if array.dtype.kind not in 'fiu':
            return None, f'the previous chunk is not numbers: dtype {array.dtype}'
        array = array.astype(np.float32)
    except (TypeError, ValueError, RuntimeError, OverflowError) as error:
        return None, f'the previous chunk is not an array of numbers: {error}'
    if array.ndim != 2 or array.shape[1] != action_dim or not 1 <= array.shape[0] <= chunk:
        return None, (f'the previous chunk has shape {array.shape}, expected (T, {action_dim}) '
                      f'with 1 <= T <= {chunk}')
    if not np.isfinite(array).all():
        return None, 'the previous chunk holds non-finite values'
    return array, ''


def _integer(value, low: int, high: int):
    """Return value as an int in low..high (numpy integers too), or None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        number = operator.index(value)
    except TypeError:
        return None
    return number if low <= number <= high else None


def plan_guidance(request, dims: ModelDims, action_dim: int,
                  defaults: RTCOptions) -> 'tuple[GuidancePlan | None, str]':
    """
    Check one observation's RTCRequest; return its plan and '', or None and why not.

    None (no request) gives (None, ''). Never raises: every problem is a reason.
    """
    if request is None:
        return None, ''
    if not isinstance(request, RTCRequest):
        return None, f'rtc must be an RTCRequest, got {type(request).__name__}'
    chunk = dims.chunk_size
    prev, reason = _as_rows(request.prev_chunk, action_dim, chunk)
    if prev is None:
        return None, reason
    delay = _integer(request.inference_delay, 0, chunk)
    if delay is None:
        return None, (f'inference_delay must be an integer in 0..{chunk}, got '
                      f'{request.inference_delay!r}')
    horizon = (defaults.execution_horizon if request.execution_horizon is None
               else _integer(request.execution_horizon, 1, chunk))
    if horizon is None:
        return None, (f'execution_horizon must be an integer in 1..{chunk}, got '
                      f'{request.execution_horizon!r}')
    schedule = defaults.schedule if request.schedule is None else request.schedule
    if not isinstance(schedule, str) or schedule.lower() not in RTC_SCHEDULES:
        return None, f'schedule must be one of {RTC_SCHEDULES}, got {schedule!r}'
    weight = (defaults.max_guidance_weight if request.max_guidance_weight is None
              else request.max_guidance_weight)
    if isinstance(weight, (bool, np.bool_)) or not isinstance(weight, (int, float, np.number)) \
            or not math.isfinite(weight) or weight <= 0:
        return None, f'max_guidance_weight must be a finite number > 0, got {weight!r}'
    padded = np.zeros((chunk, dims.max_action_dim), np.float32)
    padded[:prev.shape[0], :action_dim] = prev
    return GuidancePlan(prev=padded,
                        weights=prefix_weights(schedule.lower(), delay, horizon, prev.shape[0],
                                               chunk),
                        guidance=guidance_weights(dims.num_steps, float(weight))), ''


__all__ = ['GuidancePlan', 'guidance_weights', 'plan_guidance', 'prefix_weights']
