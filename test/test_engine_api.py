# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Pi0Engine behaviour on the CPU: validation, caches, buffers, batching, failure modes."""
import numpy as np
import pytest
import torch

from pi0_ros.engine import (EngineError, EngineOptions, InferenceResult, InputError, ModelDims,
                            NonFiniteOutputError, Pi0Engine)
from pi0_ros.engine.engine import _camera_runs, batch_buckets, prompt_buckets

DIMS = ModelDims.tiny()
CPU = EngineOptions(device='cpu')


def make_engine(**options) -> Pi0Engine:
    return Pi0Engine.random(DIMS, state_dim=6, action_dim=5, num_cameras=2, seed=11,
                            options=EngineOptions(device='cpu', **options),
                            action_mean=np.arange(5, dtype=np.float32),
                            action_std=np.full(5, 2.0, np.float32))


@pytest.fixture(scope='module')
def shared_engine():
    return make_engine()


def observation(seed: int, shapes=((120, 160, 3), (224, 224, 3))):
    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in shapes]
    state = rng.normal(size=6).astype(np.float32)
    noise = rng.normal(size=(DIMS.chunk_size, DIMS.max_action_dim)).astype(np.float32)
    return frames, state, noise


def test_attributes_and_result_type(shared_engine):
    frames, state, noise = observation(0)
    result = shared_engine.infer(frames, state, 'grasp', noise=noise)
    assert isinstance(result, InferenceResult)
    assert result.actions.shape == (DIMS.chunk_size, 5)
    assert result.actions.dtype == np.float32
    assert set(result.timings_ms) == {'preprocess', 'vision', 'prefix', 'denoise', 'total'}
    assert all(value >= 0.0 for value in result.timings_ms.values())
    assert (shared_engine.chunk_size, shared_engine.action_dim, shared_engine.state_dim,
            shared_engine.num_cameras) == (DIMS.chunk_size, 5, 6, 2)
    assert shared_engine.device == torch.device('cpu')
    assert shared_engine.dtype == torch.float32  # 'auto' on the CPU
    assert set(shared_engine.stats) == {'vision_cache_hits', 'language_cache_hits', 'calls',
                                        'frames_encoded_ahead'}


def test_same_noise_same_chunk_and_fresh_noise_differs(shared_engine):
    frames, state, noise = observation(1)
    first = shared_engine.infer(frames, state, 'grasp', noise=noise).actions
    second = shared_engine.infer(frames, state, 'grasp', noise=torch.from_numpy(noise)).actions
    np.testing.assert_array_equal(first, second)
    drawn = shared_engine.infer(frames, state, 'grasp').actions
    assert np.abs(drawn - first).max() > 1e-3


def test_action_unnormalization_uses_stats():
    pi0 = make_engine()
    frames, state, noise = observation(2)
    scaled = pi0.infer(frames, state, 'grasp', noise=noise).actions
    plain = Pi0Engine.random(DIMS, state_dim=6, action_dim=5, num_cameras=2, seed=11,
                             options=CPU).infer(frames, state, 'grasp', noise=noise).actions
    np.testing.assert_allclose(scaled, plain * 2.0 + np.arange(5), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('mutate, message', [
    (lambda f, s, i: (f[:1], s, i), 'expected 2 camera frames'),
    (lambda f, s, i: ([f[0].astype(np.float32), f[1]], s, i), 'uint8'),
    (lambda f, s, i: ([f[0][..., 0], f[1]], s, i), 'HxWx3'),
    (lambda f, s, i: ([np.zeros((1081, 10, 3), np.uint8), f[1]], s, i), 'larger than'),
    (lambda f, s, i: ([np.zeros((10, 1921, 3), np.uint8), f[1]], s, i), 'larger than'),
    (lambda f, s, i: (f, np.append(s, 1.0), i), 'shape (6,)'),
    (lambda f, s, i: (f, np.where(np.arange(6) == 2, np.nan, s), i), 'non-finite'),
    (lambda f, s, i: (f, np.where(np.arange(6) == 0, np.inf, s), i), 'non-finite'),
    (lambda f, s, i: (f, s, ''), 'instruction'),
    (lambda f, s, i: (f, s, '   '), 'instruction'),
    (lambda f, s, i: (f, s, None), 'instruction'),
    (lambda f, s, i: (f[0], s, i), 'sequence'),
    # Within the size limits, but resized to 224 the short side would be 0 pixels.
    (lambda f, s, i: ([np.zeros((1000, 3, 3), np.uint8), f[1]], s, i), 'too thin'),
    (lambda f, s, i: ([f[0], np.zeros((8, 1920, 3), np.uint8)], s, i), 'too thin'),
    (lambda f, s, i: (f, s.astype(str), i), 'state is not numeric'),
    (lambda f, s, i: (f, s > 0, i), 'state is not numeric'),
    # torch tensors of bools and complex numbers were converted (the imaginary part dropped).
    (lambda f, s, i: (f, torch.tensor(s) > 0, i), 'state is not numeric'),
    (lambda f, s, i: (f, torch.tensor(s, dtype=torch.complex64), i), 'state is not numeric'),
    (lambda f, s, i: (f, s, 'pick \ud800 up'), 'not valid text'),
])
def test_bad_input_raises_input_error(shared_engine, mutate, message):
    frames, state, _ = observation(3)
    calls = shared_engine.stats['calls']
    with pytest.raises(InputError, match=message.replace('(', r'\(').replace(')', r'\)')):
        shared_engine.infer(*mutate(frames, state, 'grasp'))
    assert shared_engine.stats['calls'] == calls


def test_a_frame_of_exactly_224_to_1_is_resized_and_torch_inputs_are_taken_as_values(
        shared_engine):
    frames, state, noise = observation(5)
    state_tensor = torch.tensor(state, requires_grad=True)     # e.g. from a training loop
    result = shared_engine.infer([np.zeros((1, 224, 3), np.uint8), frames[1]], state_tensor,
                                 'grasp', noise=noise)
    assert np.isfinite(result.actions).all()


def test_input_error_is_engine_error_and_value_error():
    assert issubclass(InputError, EngineError) and issubclass(InputError, ValueError)


def test_bad_noise_and_frame_keys_raise(shared_engine):
    frames, state, noise = observation(4)
    with pytest.raises(InputError, match='noise'):
        shared_engine.infer(frames, state, 'grasp', noise=noise[:, :5])
    with pytest.raises(InputError, match='frame_keys'):
        shared_engine.infer(frames, state, 'grasp', frame_keys=('a',))
    with pytest.raises(InputError, match='hashable'):
        shared_engine.infer(frames, state, 'grasp', frame_keys=(['a'], 'b'))
    # A dict or set of the right size passed the check, then failed inside the engine.
    for keys in ({'a': 1, 'b': 2}, {'a', 'b'}):
        with pytest.raises(InputError, match='frame_keys'):
            shared_engine.infer(frames, state, 'grasp', frame_keys=keys)
    with pytest.raises(InputError, match='noise is not numeric'):
        shared_engine.infer(frames, state, 'grasp', noise=torch.zeros(noise.shape, dtype=bool))


def test_vision_cache_reuses_features_and_matches_uncached():
    pi0 = make_engine()
    frames, state, noise = observation(5)
    keys = [(100, 'cam0'), (100, 'cam1')]
    first = pi0.infer(frames, state, 'grasp', frame_keys=keys, noise=noise)
    assert first.vision_cache_hits == 0
    # Same keys: features are reused even though the arrays now differ (the key is the truth).
    stale = [np.zeros_like(frame) for frame in frames]
    cached = pi0.infer(stale, state, 'grasp', frame_keys=keys, noise=noise)
    assert cached.vision_cache_hits == 2
    np.testing.assert_array_equal(cached.actions, first.actions)
    # Camera 1 changes: one hit, and the chunk equals an uncached engine's on the new frames.
    new_frames = [frames[0], observation(6)[0][1]]
    partial = pi0.infer(new_frames, state, 'grasp', frame_keys=[(100, 'cam0'), (101, 'cam1')],
                        noise=noise)
    assert partial.vision_cache_hits == 1
    fresh = make_engine().infer(new_frames, state, 'grasp', noise=noise)
    assert fresh.vision_cache_hits == 0
    np.testing.assert_allclose(partial.actions, fresh.actions, rtol=1e-5, atol=1e-5)
    # No keys: never cached.
    assert pi0.infer(frames, state, 'grasp', noise=noise).vision_cache_hits == 0
    assert pi0.stats['vision_cache_hits'] == 3


def test_frames_encoded_ahead_are_reused_by_the_observation():
    pi0 = make_engine(max_batch=2)
    frames, state, noise = observation(8)
    keys = [(200, 'cam0'), (200, 'cam1')]
    # Camera 0 arrives first and is encoded on its own; the call then encodes only camera 1.
    assert pi0.encode_frames({0: frames[0]}, {0: keys[0]}) == 1
    assert pi0.encode_frames({0: frames[0]}, {0: keys[0]}) == 0  # already encoded
    ahead = pi0.infer(frames, state, 'grasp', frame_keys=keys, noise=noise)
    assert ahead.vision_cache_hits == 1
    fresh = make_engine(max_batch=2).infer(frames, state, 'grasp', noise=noise)
    np.testing.assert_allclose(ahead.actions, fresh.actions, rtol=1e-5, atol=1e-5)
    # Both cameras ahead, into the second observation slot of a batch.
    other_frames, other_state, _ = observation(9)
    other_keys = [(300, 'cam0'), (300, 'cam1')]
    assert pi0.encode_frames(dict(enumerate(other_frames)), dict(enumerate(other_keys)),
                             slot=1) == 2
    results = pi0.infer_batch([(frames, state, 'grasp', keys, noise),
                               (other_frames, other_state, 'grasp', other_keys, noise)])
    assert [r.vision_cache_hits for r in results] == [2, 2]
    alone = make_engine().infer(other_frames, other_state, 'grasp', noise=noise)
    np.testing.assert_allclose(results[1].actions, alone.actions, rtol=1e-5, atol=1e-5)
    assert pi0.stats['frames_encoded_ahead'] == 3
    # A newer frame encoded ahead replaces the cached one: the old key no longer hits.
    newer = observation(10)[0][0]
    pi0.encode_frames({0: newer}, {0: (201, 'cam0')})
    assert pi0.infer(frames, state, 'grasp', frame_keys=keys, noise=noise).vision_cache_hits == 1


def test_encode_frames_rejects_bad_input():
    pi0 = make_engine()
    frames, _, _ = observation(11)
    with pytest.raises(InputError, match='same cameras'):
        pi0.encode_frames({0: frames[0]}, {1: 'key'})
    with pytest.raises(InputError, match='camera index'):
        pi0.encode_frames({2: frames[0]}, {2: 'key'})
    with pytest.raises(InputError, match='needs a key'):
        pi0.encode_frames({0: frames[0]}, {0: None})
    with pytest.raises(InputError, match='hashable'):
        pi0.encode_frames({0: frames[0]}, {0: ['key']})
    with pytest.raises(InputError, match='uint8'):
        pi0.encode_frames({0: frames[0].astype(np.float32)}, {0: 'key'})
    with pytest.raises(InputError, match='slot'):
        pi0.encode_frames({0: frames[0]}, {0: 'key'}, slot=1)
    with pytest.raises(InputError, match='slot must be an integer'):
        pi0.encode_frames({0: frames[0]}, {0: 'key'}, slot=0.5)
    with pytest.raises(InputError, match='too thin'):
        pi0.encode_frames({0: np.zeros((1000, 3, 3), np.uint8)}, {0: 'key'})
    assert pi0.stats['frames_encoded_ahead'] == 0
    # numpy integers are camera indices like ints (e.g. from np.arange)
    assert pi0.encode_frames({np.int64(1): frames[1]}, {np.int64(1): 'key'}) == 1


def test_first_denoising_step_in_the_prefix_stage_gives_the_same_chunk():
    frames, state, noise = observation(12)
    engines = {flag: make_engine(overlap_first_step=flag) for flag in (True, False)}
    calls = {flag: [] for flag in engines}
    for flag, engine in engines.items():
        original = engine._denoise_steps
        engine._denoise_steps = lambda batch, steps, *rest, flag=flag, run=original: (
            calls[flag].append(list(steps)) or run(batch, steps, *rest))
    a = engines[True].infer(frames, state, 'grasp', noise=noise).actions
    b = engines[False].infer(frames, state, 'grasp', noise=noise).actions
    assert calls[True] == [[0], list(range(1, DIMS.num_steps))]  # prefix stage, then the rest
    assert calls[False] == [list(range(DIMS.num_steps))]
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('overlap, tail', [(True, 0), (False, 0), (True, 3), (False, 3)])
def test_each_stage_gives_the_same_result_however_often_it_runs(overlap, tail):
    """CUDA graph capture runs a stage three times (two warm-up runs, the capture)."""
    pi0 = make_engine(overlap_first_step=overlap, denoise_tail_steps=tail)
    frames, state, noise = observation(13)
    sizes = {}
    run_stage = pi0._run_stage
    pi0._run_stage = lambda stage, size: sizes.setdefault(stage, size) and run_stage(stage, size)
    actions = pi0.infer(frames, state, 'grasp', noise=noise).actions
    once = pi0._chunk.clone()
    for stage in ('vision', 'prefix', 'denoise') + (('denoise_tail',) if tail else ()):
        size = sizes[stage]
        for _ in range(2):
            pi0._stage_function(stage, size)()
    torch.testing.assert_close(pi0._chunk, once, rtol=0, atol=0)
    np.testing.assert_array_equal(pi0.infer(frames, state, 'grasp', noise=noise).actions,
                                  actions)


def test_language_cache_counts_and_matches_uncached():
    pi0 = make_engine()
    frames, state, noise = observation(7)
    pi0.infer(frames, state, 'open the drawer', noise=noise)
    assert pi0.stats['language_cache_hits'] == 0
    pi0.infer(frames, state, 'open the drawer', noise=noise)
    assert pi0.stats['language_cache_hits'] == 1
    switched = pi0.infer(frames, state, 'close the drawer', noise=noise).actions
    assert pi0.stats['language_cache_hits'] == 1
    fresh = make_engine().infer(frames, state, 'close the drawer', noise=noise).actions
    np.testing.assert_array_equal(switched, fresh)
    assert pi0.stats['calls'] == 3


def test_warmup_resizes_a_frame_of_the_largest_size_and_leaves_no_trace(monkeypatch):
    # The resize kernel compiles on its first launch: warm-up makes it, not the first frames.
    pi0 = make_engine(max_frame_height=240, max_frame_width=320)
    prepared = []
    prepare = pi0._prepare_pixels
    monkeypatch.setattr(pi0, '_prepare_pixels',
                        lambda sizes, offset=0: prepared.append(sizes) or prepare(sizes, offset))
    frames, state, noise = observation(3)
    before = pi0.infer(frames, state, 'grasp', frame_keys=[1, 2], noise=noise).actions
    pi0.warmup()
    assert prepared[1] == [(240, 320)], prepared
    # Warm-up changes no cached frame: the same observation (its frames from the cache) gives
    # the same chunk.
    after = pi0.infer(frames, state, 'grasp', frame_keys=[1, 2], noise=noise)
    assert after.vision_cache_hits == 2
    np.testing.assert_array_equal(after.actions, before)


def test_buffers_keep_their_storage_across_calls():
    pi0 = make_engine(max_batch=2)
    pi0.warmup()
    before = pi0.buffer_pointers()
    assert len(before) >= 15
    frames, state, noise = observation(8)
    pi0.infer(frames, state, 'grasp', noise=noise)
    pi0.infer(observation(9, ((1080, 1920, 3), (10, 20, 3)))[0], state, 'release')
    pi0.infer_batch([(frames, state, 'grasp'), (frames, state, 'push', [1, 2])])
    assert pi0.buffer_pointers() == before


def test_encoded_frames_are_copied_into_the_prefix_per_run_of_a_slots_cameras():
    # (slot, cam) of the frames a call encodes, in their order: one copy per run of a slot's
    # consecutive cameras, whose image tokens are adjacent in the prefix.
    items = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 2), (2, 1), (2, 2), (0, 1)]
    assert list(_camera_runs(items)) == [(0, 3, 0, 0), (3, 4, 1, 0), (4, 5, 1, 2),
                                         (5, 7, 2, 1), (7, 8, 0, 1)]
    assert list(_camera_runs([])) == []


def test_batch_equals_single_calls():
    pi0 = make_engine(max_batch=4)
    observations = [observation(seed) for seed in (10, 11, 12)]
    instructions = ['grasp', 'push the block', 'grasp']
    batch = pi0.infer_batch([(f, s, text, None, n) for (f, s, n), text in
                             zip(observations, instructions)])
    assert len(batch) == 3
    single = make_engine()
    for result, (frames, state, noise), text in zip(batch, observations, instructions):
        expected = single.infer(frames, state, text, noise=noise).actions
        np.testing.assert_allclose(result.actions, expected, rtol=1e-5, atol=1e-5)


def test_on_gpu_tail_is_called_once_between_the_prefix_and_the_denoising(monkeypatch):
    # What ends a call's GPU turn early (gpu_turns): after the prefix, before the chunk.
    pi0 = make_engine(max_batch=2)
    order = []
    run_stage = pi0._run_stage
    monkeypatch.setattr(pi0, '_run_stage',
                        lambda stage, size: order.append(stage) or run_stage(stage, size))
    frames, state, noise = observation(30)
    plain = pi0.infer(frames, state, 'grasp', noise=noise).actions
    order.clear()
    single = pi0.infer(frames, state, 'grasp', noise=noise,
                       on_gpu_tail=lambda: order.append('prefix done'))
    assert order[-3:] == ['prefix', 'prefix done', 'denoise']
    assert order.count('prefix done') == 1
    np.testing.assert_array_equal(single.actions, plain)
    order.clear()
    pi0.infer_batch([(frames, state, 'grasp', None, noise)] * 2,
                    on_gpu_tail=lambda: order.append('prefix done'))
    assert order[-3:] == ['prefix', 'prefix done', 'denoise']
    # A call refused before its prefix does not call it.
    order.clear()
    with pytest.raises(InputError):
        pi0.infer(frames, state[:2], 'grasp', on_gpu_tail=lambda: order.append('prefix done'))
    assert 'prefix done' not in order


def test_a_denoise_tail_of_its_own_gives_the_same_chunk_and_on_gpu_tail_comes_before_it(
        monkeypatch):
    frames, state, noise = observation(31)
    plain = make_engine().infer(frames, state, 'grasp', noise=noise).actions
    for overlap in (True, False):
        pi0 = make_engine(denoise_tail_steps=3, overlap_first_step=overlap)
        warmed = []
        warm_stage = pi0._warm_stage
        monkeypatch.setattr(pi0, '_warm_stage', lambda stage, size: (
            warmed.append(stage) or warm_stage(stage, size)))
        pi0.warmup()
        assert 'denoise_tail' in warmed
        calls = []
        steps, run_stage = pi0._denoise_steps, pi0._run_stage
        monkeypatch.setattr(pi0, '_denoise_steps', lambda shape, order, *rest: (
            calls.append(list(order)) or steps(shape, order, *rest)))
        monkeypatch.setattr(pi0, '_run_stage', lambda stage, size: (
            calls.append(stage) or run_stage(stage, size)))
        tailed = pi0.infer(frames, state, 'grasp', noise=noise,
                           on_gpu_tail=lambda: calls.append('tail begins'))
        last = DIMS.num_steps
        expected = (['prefix', [0], 'denoise', list(range(1, last - 3))] if overlap
                    else ['prefix', 'denoise', list(range(last - 3))])
        expected += ['tail begins', 'denoise_tail', list(range(last - 3, last))]
        assert calls[calls.index('prefix'):] == expected
        np.testing.assert_allclose(tailed.actions, plain, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('tail', [-1, True, DIMS.num_steps - 1])
def test_a_denoise_tail_needs_a_step_before_it(tail):
    with pytest.raises(ValueError, match='denoise_tail_steps'):
        make_engine(denoise_tail_steps=tail)


def test_chosen_batch_buckets_pad_to_the_next_bucket(monkeypatch):
    pi0 = make_engine(max_batch=3, batch_buckets=(1, 3))
    sizes = []
    run_stage = pi0._run_stage
    monkeypatch.setattr(pi0, '_run_stage',
                        lambda stage, size: sizes.append((stage, size)) or run_stage(stage, size))
    observations = [observation(seed) for seed in (20, 21)]
    batch = pi0.infer_batch([(f, s, 'grasp', None, n) for f, s, n in observations])
    assert {stage for stage, size in sizes if stage != 'vision' and size[0] == 3} == {
        'prefix', 'denoise'}  # two observations, bucket 3
    single = make_engine()
    for result, (frames, state, noise) in zip(batch, observations):
        expected = single.infer(frames, state, 'grasp', noise=noise).actions
        np.testing.assert_allclose(result.actions, expected, rtol=1e-5, atol=1e-5)


def test_default_buckets_hold_every_size_up_to_8_then_multiples_of_4():
    assert batch_buckets(1) == [1]
    assert batch_buckets(6) == [1, 2, 3, 4, 5, 6]
    assert batch_buckets(16) == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16]
    assert batch_buckets(18) == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 18]
    assert batch_buckets(16, (1, 4, 16)) == [1, 4, 16]
    pi0 = make_engine(max_batch=3)
    sizes = []
    run_stage = pi0._run_stage
    pi0._run_stage = lambda stage, size: sizes.append((stage, size)) or run_stage(stage, size)
    observations = [observation(seed) for seed in (22, 23, 24)]
    pi0.infer_batch([(f, s, 'grasp', None, n) for f, s, n in observations])
    assert [size[0] for stage, size in sizes if stage == 'prefix'] == [3]  # not padded to 4


def test_default_prompt_buckets_are_multiples_of_16_for_batches_else_the_full_length():
    assert prompt_buckets(48) == [48]
    assert prompt_buckets(48, max_batch=2) == [16, 32, 48]
    assert prompt_buckets(40, max_batch=8) == [16, 32, 40]
    assert prompt_buckets(10, max_batch=8) == [10]
    assert prompt_buckets(48, (8, 24)) == [8, 24, 48]
    assert prompt_buckets(48, (16, 48, 64), max_batch=4) == [16, 48]
    for bad in ((32, 16), (0, 16), (16, 16), (True,), (16.0,)):
        with pytest.raises(ValueError, match='prompt_buckets'):
            EngineOptions(prompt_buckets=bad)


def test_prefix_ends_after_the_prompt_bucket_with_the_same_actions():
    """Padding tokens past the longest prompt are skipped: they never reach the actions."""
    pi0 = make_engine(max_batch=2)
    full = make_engine(max_batch=2, prompt_buckets=(DIMS.tokenizer_max_length,))
    sizes = []
    run_stage = pi0._run_stage
    pi0._run_stage = lambda stage, size: sizes.append((stage, size)) or run_stage(stage, size)
    images = 2 * DIMS.tokens_per_image
    # The built-in tokenizer: one token per byte, plus <bos> and the newline.
    prompts = {'grasp': 16, 'put the red block in the bowl': 32, 'x' * 60: 48}
    (frames, state, noise), other = observation(30), observation(31)
    for prompt, bucket in prompts.items():
        sizes.clear()
        actions = pi0.infer(frames, state, prompt, noise=noise).actions
        assert [size for stage, size in sizes if stage != 'vision'] == [(1, images + bucket)] * 2
        np.testing.assert_allclose(actions, full.infer(frames, state, prompt, noise=noise)
                                   .actions, rtol=1e-5, atol=1e-5)
    # A batch runs in the bucket of its longest prompt; the short one gives what it gives alone.
    sizes.clear()
    batch = pi0.infer_batch([(frames, state, 'grasp', None, noise),
                             (other[0], other[1], 'put the red block in the bowl', None,
                              other[2])])
    assert ('prefix', (2, images + 32)) in sizes
    np.testing.assert_allclose(batch[0].actions,
                               full.infer(frames, state, 'grasp', noise=noise).actions,
                               rtol=1e-5, atol=1e-5)
    # One observation after a long prompt in slot 1: slot 1 is padding and does not count.
    sizes.clear()
    pi0.infer(frames, state, 'grasp', noise=noise)
    assert ('prefix', (1, images + 16)) in sizes


def test_batch_limits():
    pi0 = make_engine(max_batch=2)
    frames, state, _ = observation(13)
    with pytest.raises(InputError, match='max_batch'):
        pi0.infer_batch([(frames, state, 'a')] * 3)
    with pytest.raises(InputError, match='at least one'):
        pi0.infer_batch([])


def test_non_finite_chunk_raises():
    pi0 = make_engine()
    frames, state, noise = observation(14)
    pi0.weights.action_out_b[0] = float('nan')
    with pytest.raises(NonFiniteOutputError):
        pi0.infer(frames, state, 'grasp', noise=noise)


def test_overflowing_unnormalization_raises():
    pi0 = Pi0Engine.random(DIMS, state_dim=6, action_dim=5, num_cameras=2, options=CPU,
                           action_std=np.full(5, 3e38, np.float32))
    frames, state, noise = observation(15)
    with pytest.raises(NonFiniteOutputError):
        pi0.infer(frames, state, 'grasp', noise=noise * 10)


def test_closed_engine_refuses_work():
    pi0 = make_engine()
    pi0.close()
    pi0.close()
    frames, state, _ = observation(16)
    with pytest.raises(EngineError, match='closed'):
        pi0.infer(frames, state, 'grasp')


def test_options_are_validated():
    with pytest.raises(ValueError, match='precision'):
        EngineOptions(precision='int8')
    with pytest.raises(ValueError, match='device'):
        EngineOptions(device='tpu')
    with pytest.raises(ValueError, match='max_batch'):
        EngineOptions(max_batch=0)
    # Accepted before, then a raw TypeError or RuntimeError when the engine was built.
    for bad in ({'max_batch': 2.0}, {'max_batch': True}, {'max_frame_height': 100.5},
                {'max_frame_width': 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            EngineOptions(**bad)
    with pytest.raises(ValueError, match='device'):
        EngineOptions(device='cuda:x')
    assert EngineOptions(device='cuda:1').device == 'cuda:1'
    for buckets in ((1, 2), (2, 1, 4), (0, 4), (1, 1, 4), (1.5, 4)):
        with pytest.raises(ValueError, match='batch_buckets'):
            EngineOptions(max_batch=4, batch_buckets=buckets)
    assert EngineOptions(max_batch=6, batch_buckets=(1, 3, 6)).batch_buckets == (1, 3, 6)
    with pytest.raises(ValueError, match='num_kv_heads'):
        ModelDims(num_kv_heads=2)


def test_full_dims_are_pi0():
    full = ModelDims.full()
    assert (full.vision_width, full.vision_depth, full.vision_mlp_dim, full.patch_size) == \
        (1152, 27, 4304, 14)
    assert (full.prefix_width, full.prefix_depth, full.prefix_mlp_dim) == (2048, 18, 16384)
    assert (full.expert_width, full.expert_depth, full.expert_mlp_dim) == (1024, 18, 4096)
    assert (full.head_dim, full.prefix_heads, full.num_kv_heads, full.vocab_size) == \
        (256, 8, 1, 257152)
    assert (full.chunk_size, full.num_steps, full.tokenizer_max_length, full.image_size) == \
        (50, 10, 48, 224)
    assert full.tokens_per_image == 256


def test_layer_ranges_parse_as_the_fp8_option_takes_them():
    from pi0_ros.engine.config import parse_layer_ranges
    assert parse_layer_ranges('4-16') == tuple(range(4, 17))
    assert parse_layer_ranges(' 0, 2,5-7 ,2') == (0, 2, 5, 6, 7)
    assert parse_layer_ranges('ALL') == ()  # every layer, as EngineOptions reads ()
    for bad in ('', 'x', '4-', '-3', '7-5', '1.5'):
        with pytest.raises(ValueError):
            parse_layer_ranges(bad)
