# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Real-Time Chunking in the engine against LeRobot 0.6.1's PI0Policy + RTCProcessor.

Shrunk dims, the same checkpoint, noise and previous chunk on both sides. LeRobot 0.6.1 takes
the velocity as a constant of x_t (its autograd correction is the weighted error); the
engine's default does the same, and RTCOptions(jacobian=True) is compared with LeRobot's own
RTCProcessor made to differentiate through the velocity (set_lerobot_rtc(jacobian=True)).
The `gpu` tests run where CUDA is (the device tool): graphs, allocations, GPU against LeRobot.
"""
import functools

import numpy as np
import pytest
import torch

from pi0_ros.engine import EngineOptions, InputError, ModelDims, Pi0Engine, RTCOptions, RTCRequest
from pi0_ros.engine.config import RTC_SCHEDULES
from pi0_ros.engine.lerobot_reference import (lerobot_predict, save_random_reference,
                                              set_lerobot_rtc)
from pi0_ros.engine.rtc import guidance_weights, plan_guidance, prefix_weights

DIMS = ModelDims.tiny()
STATE_DIM = 7
ACTION_DIM = 6
CAMERAS = 2
FRAME_SHAPES = [(120, 160, 3), (224, 224, 3)]
CHUNK = DIMS.chunk_size


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
    """Build a LeRobot policy, its processors and the checkpoint directory it saved."""
    return save_random_reference(tmp_path_factory.mktemp('pi0_rtc_checkpoint'), DIMS,
                                 state_dim=STATE_DIM, action_dim=ACTION_DIM,
                                 num_cameras=CAMERAS, policy_seed=5, stats_seed=17)


@pytest.fixture(scope='module')
def engines(reference):
    """Engines built from the reference checkpoint, one per (device, precision, options)."""
    built = {}

    def get(precision='fp32', jacobian=False, max_batch=1, device='cpu', **options):
        key = (precision, jacobian, max_batch, device, tuple(sorted(options.items())))
        if key not in built:
            built[key] = Pi0Engine.from_pretrained(
                reference['dir'], dims=DIMS, options=EngineOptions(
                    device=device, precision=precision, max_batch=max_batch,
                    rtc=RTCOptions(jacobian=jacobian), **options))
        return built[key]

    return get


def observation(seed: int, instruction: str = 'pick up the red block'):
    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in FRAME_SHAPES]
    state = rng.normal(size=STATE_DIM).astype(np.float32)
    noise = rng.normal(size=(CHUNK, DIMS.max_action_dim)).astype(np.float32)
    return frames, state, instruction, noise


def previous_chunk(seed: int, rows: int) -> np.ndarray:
    """Return a smooth previous chunk in the normalized action space [rows, ACTION_DIM]."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.normal(scale=0.3, size=(rows, ACTION_DIM)), axis=0).astype(np.float32)


def lerobot_guided(reference, obs, prev, delay, horizon, schedule='linear', weight=10.0,
                   jacobian=False):
    set_lerobot_rtc(reference['policy'], schedule, weight, horizon, jacobian=jacobian)
    try:
        return lerobot_predict(reference['policy'], reference['pre'], reference['post'], *obs,
                               rtc={'inference_delay': delay, 'prev_chunk_left_over': prev,
                                    'execution_horizon': horizon})
    finally:
        reference['policy'].config.rtc_config = None
        reference['policy'].init_rtc_processor()


def lerobot_plain(reference, obs):
    return lerobot_predict(reference['policy'], reference['pre'], reference['post'], *obs)


def relative(actual, expected) -> float:
    return float(np.abs(actual - expected).max() / np.abs(expected).max())


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel(), b.ravel()
    return float((a * b).sum() / (np.linalg.norm(a) * np.linalg.norm(b)))


# ------------------------------------------------------------------------------------------
# Host side: the schedule's weights and the guidance weights


@pytest.mark.parametrize('schedule', RTC_SCHEDULES)
def test_prefix_weights_equal_lerobot(schedule):
    from lerobot.configs import RTCAttentionSchedule
    from lerobot.policies.rtc.configuration_rtc import RTCConfig
    from lerobot.policies.rtc.modeling_rtc import RTCProcessor
    processor = RTCProcessor(RTCConfig(
        prefix_attention_schedule=RTCAttentionSchedule[schedule.upper()]))
    for delay, horizon, rows in [(0, 10, 50), (3, 10, 50), (10, 10, 50), (15, 10, 50),
                                 (3, 10, 7), (5, 8, 3), (0, 50, 50), (50, 50, 50),
                                 (0, 1, 1), (1, 1, 1), (4, 25, 40), (49, 50, 50)]:
        # LeRobot's denoise_step cuts the horizon to the previous chunk's rows first.
        expected = processor.get_prefix_weights(delay, min(horizon, rows), CHUNK).numpy()
        actual = prefix_weights(schedule, delay, horizon, rows, CHUNK)
        assert actual.dtype == np.float32 and actual.shape == (CHUNK,)
        np.testing.assert_array_equal(actual, expected, err_msg=f'{delay} {horizon} {rows}')


def test_guidance_weights_are_capped_at_the_first_step_and_symmetric_in_time():
    weights = guidance_weights(10, 10.0)
    assert weights[0] == np.float32(10.0)  # t = 1: tau = 0, the cap
    # t and 1 - t give the same weight: (t^2 + tau^2) / (t * tau)
    np.testing.assert_allclose(weights[1:], weights[1:][::-1], rtol=1e-6)
    np.testing.assert_allclose(weights[5], 2.0, rtol=1e-6)  # t = 0.5
    assert guidance_weights(10, 1.5).max() == np.float32(1.5)


def test_plans_share_their_weights_computed_once_and_read_only():
    # The weights are computed once per setting (each computation is many tiny torch calls,
    # each a wait for the GIL beside busy threads) and shared, so nobody may change them.
    first, _ = plan_guidance(RTCRequest(previous_chunk(0, 20), 3), DIMS, ACTION_DIM,
                             RTCOptions())
    second, _ = plan_guidance(RTCRequest(previous_chunk(1, 20), 3), DIMS, ACTION_DIM,
                              RTCOptions())
    other, _ = plan_guidance(RTCRequest(previous_chunk(1, 20), 4), DIMS, ACTION_DIM,
                             RTCOptions())
    assert second.weights is first.weights and second.guidance is first.guidance
    assert other.weights is not first.weights and other.weights[3] > first.weights[3]
    for array in (first.weights, first.guidance):
        with pytest.raises(ValueError):
            array[0] = 0.5


def test_plan_pads_rows_and_action_dims_with_model_zeros():
    prev = previous_chunk(0, 12)
    plan, reason = plan_guidance(RTCRequest(prev, 2, execution_horizon=30), DIMS, ACTION_DIM,
                                 RTCOptions())
    assert reason == ''
    assert plan.prev.shape == (CHUNK, DIMS.max_action_dim)
    np.testing.assert_array_equal(plan.prev[:12, :ACTION_DIM], prev)
    # Padded dims and rows are the model's zeros, never a decoded dataset mean; rows after
    # the previous chunk weigh nothing (the horizon is cut to its 12 rows).
    assert not plan.prev[:, ACTION_DIM:].any() and not plan.prev[12:].any()
    assert not plan.weights[12:].any() and plan.weights[:2].tolist() == [1.0, 1.0]


# ------------------------------------------------------------------------------------------
# Equivalence with LeRobot


@pytest.mark.parametrize('jacobian', [False, True], ids=['lerobot', 'jacobian'])
@pytest.mark.parametrize('schedule', RTC_SCHEDULES)
def test_fp32_guided_chunk_equals_lerobot(reference, engines, schedule, jacobian):
    obs = observation(1)
    prev = previous_chunk(1, 30)
    expected = lerobot_guided(reference, obs, prev, 3, 10, schedule, jacobian=jacobian)
    pi0 = engines('fp32', jacobian)
    result = pi0.infer(*obs[:3], noise=obs[3],
                       rtc=RTCRequest(prev, 3, execution_horizon=10, schedule=schedule))
    assert result.rtc_applied and result.rtc_reason == ''
    error = relative(result.actions, expected)
    print(f'{schedule} jacobian={jacobian}: relative max error {error:.3e}')
    assert error <= 1e-4
    # The comparison can fail: guidance moves the chunk far from the unguided one.
    assert relative(lerobot_plain(reference, obs), expected) > 0.05


def test_the_jacobian_changes_the_guided_chunk(reference, engines):
    obs = observation(2)
    request = RTCRequest(previous_chunk(2, 30), 3)
    a = engines('fp32', False).infer(*obs[:3], noise=obs[3], rtc=request).actions
    b = engines('fp32', True).infer(*obs[:3], noise=obs[3], rtc=request).actions
    assert relative(a, b) > 1e-3


@pytest.mark.parametrize('jacobian', [False, True], ids=['lerobot', 'jacobian'])
@pytest.mark.parametrize('schedule', RTC_SCHEDULES)
@pytest.mark.parametrize('precision', ['bf16', 'fp16'])
def test_half_precision_guided_chunk_close_to_lerobot_fp32(reference, engines, precision,
                                                           schedule, jacobian):
    obs = observation(3)
    prev = previous_chunk(3, 40)
    expected = lerobot_guided(reference, obs, prev, 4, 12, schedule, jacobian=jacobian)
    pi0 = engines(precision, jacobian)
    result = pi0.infer(*obs[:3], noise=obs[3],
                       rtc=RTCRequest(prev, 4, execution_horizon=12, schedule=schedule))
    similarity = cosine(result.actions, expected)
    print(f'{precision} {schedule} jacobian={jacobian}: cosine {similarity:.6f}')
    assert result.rtc_applied and np.isfinite(result.actions).all()
    assert similarity >= 0.999


@pytest.mark.parametrize('delay, horizon, rows', [
    (0, 10, 30),  # no delay: the ramp starts at row 0
    (10, 10, 30),  # delay == horizon: every weighted row is 1
    (15, 10, 30),  # delay > horizon: cut to the horizon
    (3, 10, 7),  # the previous chunk is shorter than the horizon
    (5, 8, 3),  # ... and than the delay
    (0, 50, 50),  # a whole chunk, horizon = chunk
    (50, 50, 50),  # delay = chunk
    (2, 1, 1),  # one row
])
@pytest.mark.parametrize('jacobian', [False, True], ids=['lerobot', 'jacobian'])
def test_delays_and_horizons_equal_lerobot(reference, engines, delay, horizon, rows, jacobian):
    obs = observation(4)
    prev = previous_chunk(4, rows)
    expected = lerobot_guided(reference, obs, prev, delay, horizon, 'exp', 7.5,
                              jacobian=jacobian)
    result = engines('fp32', jacobian).infer(
        *obs[:3], noise=obs[3],
        rtc=RTCRequest(prev, delay, execution_horizon=horizon, schedule='exp',
                       max_guidance_weight=7.5))
    assert result.rtc_applied
    assert relative(result.actions, expected) <= 1e-4


@pytest.mark.parametrize('jacobian', [False, True], ids=['lerobot', 'jacobian'])
def test_batch_guides_each_observation_as_lerobot_does_alone(reference, engines, jacobian):
    # Buckets (1, 3): a call of 2 runs in the bucket of 3 with one padding slot.
    pi0 = engines('fp32', jacobian, max_batch=3, batch_buckets=(1, 3))
    observations = [observation(5, 'stack the cups'), observation(6, 'wipe the table'),
                    observation(7, 'open the drawer')]
    cases = [(previous_chunk(5, 25), 2, 8, 'linear', 10.0),
             (previous_chunk(6, 50), 0, 20, 'exp', 5.0)]
    requests = [RTCRequest(p, d, execution_horizon=h, schedule=s, max_guidance_weight=g)
                for p, d, h, s, g in cases]
    for count in (2, 3):
        results = pi0.infer_batch([(f, s, i, None, n) for f, s, i, n in observations[:count]],
                                  rtc=(requests + [None])[:count])
        for obs, case, result in zip(observations, cases, results):
            assert result.rtc_applied
            expected = lerobot_guided(reference, obs, *case[:4], case[4], jacobian=jacobian)
            assert relative(result.actions, expected) <= 1e-4
    # The observation without a request: LeRobot's unguided chunk, and no reason given.
    assert not results[2].rtc_applied and results[2].rtc_reason == ''
    assert relative(results[2].actions, lerobot_plain(reference, observations[2])) <= 1e-4
    # A batch of 2 with the same settings for both, as LeRobot's batched RTC takes them.
    same = [RTCRequest(previous_chunk(8 + k, 20), 3, execution_horizon=10) for k in range(2)]
    results = pi0.infer_batch([(f, s, i, None, n) for f, s, i, n in observations[:2]],
                              rtc=same)
    for obs, request, result in zip(observations, same, results):
        expected = lerobot_guided(reference, obs, request.prev_chunk, 3, 10, jacobian=jacobian)
        assert relative(result.actions, expected) <= 1e-4


# ------------------------------------------------------------------------------------------
# Without guidance


def test_an_observation_without_guidance_is_unchanged_by_its_neighbours(engines):
    pi0 = engines('fp32', False, max_batch=2)
    first, second = observation(9), observation(10)
    plain = pi0.infer_batch([(f, s, i, None, n) for f, s, i, n in (first, second)])
    mixed = pi0.infer_batch([(f, s, i, None, n) for f, s, i, n in (first, second)],
                            rtc=[RTCRequest(previous_chunk(9, 30), 3), None])
    assert mixed[0].rtc_applied and not mixed[1].rtc_applied
    # Zero weights leave the velocity exactly as it is: the same chunk, bit for bit (CPU).
    np.testing.assert_array_equal(mixed[1].actions, plain[1].actions)
    assert np.abs(mixed[0].actions - plain[0].actions).max() > 1e-2


def test_zero_weights_give_the_unguided_chunk_exactly(engines):
    pi0 = engines('fp32', False)
    frames, state, instruction, noise = observation(11)
    plain = pi0.infer(frames, state, instruction, noise=noise)
    # 'zeros' with no delay weighs no row: guided in name, unguided in value.
    zero = pi0.infer(frames, state, instruction, noise=noise,
                     rtc=RTCRequest(previous_chunk(11, 30), 0, schedule='zeros'))
    assert zero.rtc_applied
    np.testing.assert_array_equal(zero.actions, plain.actions)


@pytest.mark.parametrize('overlap', [True, False])
def test_plain_calls_are_unchanged_by_guided_calls_and_warm_up(reference, overlap):
    options = {'device': 'cpu', 'precision': 'fp32', 'overlap_first_step': overlap}
    plain_engine = Pi0Engine.from_pretrained(reference['dir'], dims=DIMS,
                                             options=EngineOptions(**options))
    rtc_engine = Pi0Engine.from_pretrained(reference['dir'], dims=DIMS,
                                           options=EngineOptions(rtc=RTCOptions(), **options))
    rtc_engine.warmup()  # runs the guided stages too
    frames, state, instruction, noise = observation(12)
    before = plain_engine.infer(frames, state, instruction, noise=noise)
    assert not before.rtc_applied and before.rtc_reason == ''
    rtc_engine.infer(frames, state, instruction, noise=noise,
                     rtc=RTCRequest(previous_chunk(12, 30), 3))
    after = rtc_engine.infer(frames, state, instruction, noise=noise)
    np.testing.assert_array_equal(after.actions, before.actions)
    assert relative(before.actions, lerobot_plain(reference, observation(12))) <= 1e-4


@pytest.mark.parametrize('jacobian', [False, True], ids=['lerobot', 'jacobian'])
def test_each_guided_stage_gives_the_same_result_however_often_it_runs(engines, jacobian):
    """CUDA graph capture runs a stage three times (two warm-up runs, the capture)."""
    pi0 = engines('fp32', jacobian)
    frames, state, instruction, noise = observation(13)
    request = RTCRequest(previous_chunk(13, 30), 3)
    sizes = {}
    run_stage = pi0._run_stage
    pi0._run_stage = lambda stage, size: sizes.setdefault(stage, size) and run_stage(stage, size)
    try:
        actions = pi0.infer(frames, state, instruction, noise=noise, rtc=request).actions
        once = pi0._chunk.clone()
        assert {'prefix_rtc', 'denoise_rtc'} <= set(sizes)
        for stage in ('prefix_rtc', 'denoise_rtc'):
            for _ in range(2):
                pi0._stage_function(stage, sizes[stage])()
        torch.testing.assert_close(pi0._chunk, once, rtol=0, atol=0)
    finally:
        del pi0._run_stage
    np.testing.assert_array_equal(
        pi0.infer(frames, state, instruction, noise=noise, rtc=request).actions, actions)


# ------------------------------------------------------------------------------------------
# Spaces and fallbacks


def test_normalized_actions_and_normalize_actions_are_the_same_space(engines):
    pi0 = engines('fp32', False)
    frames, state, instruction, noise = observation(14)
    result = pi0.infer(frames, state, instruction, noise=noise)
    assert result.normalized_actions.shape == (CHUNK, ACTION_DIM)
    np.testing.assert_allclose(pi0.normalize_actions(result.actions),
                               result.normalized_actions, rtol=1e-5, atol=1e-5)
    # The tail of a chunk in robot units, converted, guides like the model's own numbers.
    tail = result.actions[10:]
    a = pi0.infer(frames, state, instruction, noise=noise,
                  rtc=RTCRequest(pi0.normalize_actions(tail), 2)).actions
    b = pi0.infer(frames, state, instruction, noise=noise,
                  rtc=RTCRequest(result.normalized_actions[10:], 2)).actions
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    assert pi0.normalize_actions(torch.from_numpy(tail[0])).shape == (ACTION_DIM,)
    for bad in (tail[:, :3], np.zeros(0), 'tail'):
        with pytest.raises(InputError):
            pi0.normalize_actions(bad)


GOOD = previous_chunk(20, 30)


@pytest.mark.parametrize('request_, reason', [
    (RTCRequest(None, 3), 'no previous chunk'),
    (RTCRequest(GOOD[0], 3), 'shape (6,)'),
    (RTCRequest(GOOD[None], 3), 'shape (1, 30, 6)'),
    (RTCRequest(GOOD[:, :5], 3), 'shape (30, 5)'),
    (RTCRequest(np.zeros((0, ACTION_DIM), np.float32), 3), 'shape (0, 6)'),
    (RTCRequest(np.zeros((CHUNK + 1, ACTION_DIM), np.float32), 3), 'shape (51, 6)'),
    (RTCRequest(np.where(np.arange(ACTION_DIM) == 2, np.nan, GOOD), 3), 'non-finite'),
    (RTCRequest(np.where(np.arange(ACTION_DIM) == 0, -np.inf, GOOD), 3), 'non-finite'),
    (RTCRequest([['a'] * ACTION_DIM] * 3, 3), 'not numbers'),
    (RTCRequest(torch.ones(30, ACTION_DIM, dtype=torch.bool), 3), 'not real numbers'),
    (RTCRequest([[1.0] * ACTION_DIM, [1.0]], 3), 'not an array of numbers'),
    (RTCRequest(GOOD, -1), 'inference_delay'),
    (RTCRequest(GOOD, CHUNK + 1), 'inference_delay'),
    (RTCRequest(GOOD, 2.5), 'inference_delay'),
    (RTCRequest(GOOD, True), 'inference_delay'),
    (RTCRequest(GOOD, None), 'inference_delay'),
    (RTCRequest(GOOD, 3, execution_horizon=0), 'execution_horizon'),
    (RTCRequest(GOOD, 3, execution_horizon=CHUNK + 1), 'execution_horizon'),
    (RTCRequest(GOOD, 3, schedule='cubic'), 'schedule'),
    (RTCRequest(GOOD, 3, schedule=3), 'schedule'),
    (RTCRequest(GOOD, 3, max_guidance_weight=0.0), 'max_guidance_weight'),
    (RTCRequest(GOOD, 3, max_guidance_weight=float('nan')), 'max_guidance_weight'),
    (RTCRequest(GOOD, 3, max_guidance_weight=float('inf')), 'max_guidance_weight'),
    (RTCRequest(GOOD, 3, max_guidance_weight='10'), 'max_guidance_weight'),
    ({'prev_chunk': GOOD, 'inference_delay': 3}, 'RTCRequest'),
], ids=lambda value: value if isinstance(value, str) else None)
def test_bad_requests_run_without_guidance_and_say_why(engines, request_, reason):
    check_bad_request(engines('fp32', False, max_batch=2), request_, reason)


@pytest.mark.parametrize('request_, reason', [
    (RTCRequest(GOOD[:, :5], 3), 'shape (30, 5)'),
    (RTCRequest(np.where(np.arange(ACTION_DIM) == 2, np.nan, GOOD), 3), 'non-finite'),
    (RTCRequest(GOOD, CHUNK + 1), 'inference_delay'),
], ids=lambda value: value if isinstance(value, str) else None)
def test_bad_requests_run_without_the_jacobian_guidance(engines, request_, reason):
    check_bad_request(engines('fp32', True, max_batch=2), request_, reason)


def check_bad_request(pi0, request_, reason):
    frames, state, instruction, noise = observation(15)
    plain = plain_chunk(pi0, 15)
    result = pi0.infer(frames, state, instruction, noise=noise, rtc=request_)
    assert not result.rtc_applied and reason in result.rtc_reason
    np.testing.assert_array_equal(result.actions, plain)
    # In a batch, the other observation keeps its guidance.
    good = RTCRequest(GOOD, 3)
    results = pi0.infer_batch([(frames, state, instruction, None, noise)] * 2,
                              rtc=[request_, good])
    assert not results[0].rtc_applied and reason in results[0].rtc_reason
    assert results[1].rtc_applied
    np.testing.assert_allclose(results[0].actions, plain, rtol=1e-5, atol=1e-5)


def plain_chunk(pi0, seed):
    frames, state, instruction, noise = observation(seed)
    return pi0.infer(frames, state, instruction, noise=noise).actions


@pytest.mark.parametrize('rtc, reason', [
    ([RTCRequest(GOOD, 3)], '1 entries for 2 observations'),
    (RTCRequest(GOOD, 3), 'sequence of one RTCRequest'),
    (3, 'sequence of one RTCRequest'),
])
def test_a_batch_request_list_of_the_wrong_kind_runs_without_guidance(engines, rtc, reason):
    pi0 = engines('fp32', False, max_batch=2)
    frames, state, instruction, noise = observation(16)
    results = pi0.infer_batch([(frames, state, instruction, None, noise)] * 2, rtc=rtc)
    assert all(not r.rtc_applied and reason in r.rtc_reason for r in results)
    unguided = pi0.infer_batch([(frames, state, instruction, None, noise)] * 2)
    np.testing.assert_array_equal(results[1].actions, unguided[1].actions)


@pytest.mark.parametrize('jacobian', [False, True], ids=['lerobot', 'jacobian'])
def test_a_guided_chunk_that_is_not_finite_is_made_without_guidance(engines, jacobian):
    pi0 = engines('fp32', jacobian, max_batch=2)
    frames, state, instruction, noise = observation(17)
    huge = np.full((30, ACTION_DIM), 3e38, np.float32)  # finite, but the steps overflow
    result = pi0.infer(frames, state, instruction, noise=noise, rtc=RTCRequest(huge, 3))
    assert not result.rtc_applied and 'not finite' in result.rtc_reason
    np.testing.assert_array_equal(result.actions, plain_chunk(pi0, 17))
    results = pi0.infer_batch([(frames, state, instruction, None, noise)] * 2,
                              rtc=[RTCRequest(huge, 3), RTCRequest(GOOD, 3)])
    assert [r.rtc_applied for r in results] == [False, True]
    assert np.isfinite(results[0].actions).all()


def test_rtc_options_are_validated():
    for bad in ({'schedule': 'cubic'}, {'schedule': None}, {'max_guidance_weight': 0.0},
                {'max_guidance_weight': float('inf')}, {'max_guidance_weight': True},
                {'execution_horizon': 0}, {'execution_horizon': 2.0}, {'jacobian': 1}):
        with pytest.raises(ValueError):
            RTCOptions(**bad)
    with pytest.raises(ValueError):
        EngineOptions(rtc={'schedule': 'linear'})
    assert RTCOptions(schedule='EXP').schedule == 'EXP'  # LeRobot's names are taken too


def test_memory_planner_keeps_the_rtc_options():
    from pi0_ros.engine.memory import plan_max_batch
    options = EngineOptions(device='cpu', rtc=RTCOptions(jacobian=True))
    assert plan_max_batch(1 << 40, DIMS, CAMERAS, options, torch.float32, limit=4) == 4


# ------------------------------------------------------------------------------------------
# GPU (CUDA graphs): run with `python -m pytest -q test/test_engine_rtc.py -m gpu`


def gpu_engine(reference, **options) -> Pi0Engine:
    jacobian = options.pop('jacobian', False)
    options.setdefault('precision', 'fp32')
    return Pi0Engine.from_pretrained(reference['dir'], dims=DIMS, options=EngineOptions(
        device='cuda', rtc=RTCOptions(jacobian=jacobian), **options))


def allocation_counts(device) -> dict:
    stats = torch.cuda.memory_stats(device)
    return {key: stats.get(key, 0) for key in ('allocation.all.allocated',
                                               'segment.all.allocated',
                                               'requested_bytes.all.allocated')}


@pytest.mark.gpu
@pytest.mark.parametrize('jacobian', [False, True], ids=['lerobot', 'jacobian'])
def test_gpu_guided_graphs_equal_eager_and_lerobot(reference, jacobian):
    graphs = gpu_engine(reference, jacobian=jacobian, max_batch=2)
    eager = gpu_engine(reference, jacobian=jacobian, max_batch=2, cuda_graphs=False)
    graphs.warmup()
    assert any(stage == 'denoise_rtc' for stage, _ in graphs._graphs)
    obs = observation(30)
    prev = previous_chunk(30, 30)
    request = RTCRequest(prev, 3, execution_horizon=10, schedule='exp')
    a = graphs.infer(*obs[:3], noise=obs[3], rtc=request)
    b = eager.infer(*obs[:3], noise=obs[3], rtc=request)
    assert a.rtc_applied and b.rtc_applied
    np.testing.assert_allclose(a.actions, b.actions, rtol=1e-5, atol=1e-5)
    expected = lerobot_guided(reference, obs, prev, 3, 10, 'exp', jacobian=jacobian)
    assert relative(a.actions, expected) <= 1e-4
    batch = graphs.infer_batch([(*obs[:3], None, obs[3])] * 2, rtc=[request, None])
    np.testing.assert_allclose(batch[0].actions, a.actions, rtol=1e-5, atol=1e-5)
    assert relative(batch[1].actions, lerobot_plain(reference, obs)) <= 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize('jacobian', [False, True], ids=['lerobot', 'jacobian'])
@pytest.mark.parametrize('precision', ['bf16', 'fp16'])
def test_gpu_guided_half_precision_close_to_lerobot(reference, precision, jacobian):
    pi0 = gpu_engine(reference, jacobian=jacobian, precision=precision)
    obs = observation(31)
    prev = previous_chunk(31, 40)
    result = pi0.infer(*obs[:3], noise=obs[3], rtc=RTCRequest(prev, 4, execution_horizon=12))
    expected = lerobot_guided(reference, obs, prev, 4, 12, jacobian=jacobian)
    assert cosine(result.actions, expected) >= 0.999


@pytest.mark.gpu
@pytest.mark.parametrize('jacobian', [False, True], ids=['lerobot', 'jacobian'])
@pytest.mark.parametrize('precision', ['bf16', 'fp32'])
def test_gpu_guided_steady_state_allocates_nothing(reference, precision, jacobian):
    pi0 = gpu_engine(reference, jacobian=jacobian, precision=precision, max_batch=2)
    pi0.warmup()
    obs = observation(32)
    infer = functools.partial(pi0.infer, *obs[:3], noise=obs[3])
    requests = [RTCRequest(previous_chunk(32, rows), delay, execution_horizon=10)
                for rows, delay in ((30, 3), (7, 0), (50, 12))]
    infer(rtc=requests[0])  # first sight of the prompt may allocate (tokenizer)
    pi0.infer_batch([(*obs[:3], None, obs[3])] * 2, rtc=requests[:2])
    torch.cuda.synchronize()
    before = allocation_counts(pi0.device)
    for request in requests * 2:
        assert infer(rtc=request).rtc_applied
        infer()
        pi0.infer_batch([(*obs[:3], None, obs[3])] * 2, rtc=[request, None])
        assert not infer(rtc=RTCRequest(None, 3)).rtc_applied
    torch.cuda.synchronize()
    assert allocation_counts(pi0.device) == before
