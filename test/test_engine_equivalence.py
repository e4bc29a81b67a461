# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Pi0Engine against LeRobot 0.6.1's real PI0Policy (shrunk dims, same checkpoint, same noise)."""
import numpy as np
import pytest
import torch

from pi0_ros.engine import EngineOptions, ModelDims, Pi0Engine
from pi0_ros.engine.lerobot_reference import (lerobot_batch, lerobot_predict,
                                              save_random_reference)
from pi0_ros.engine.tokenizer import load_tokenizer, tokenize_prompt

DIMS = ModelDims.tiny()
STATE_DIM = 7
ACTION_DIM = 6
CAMERAS = 3
FRAME_SHAPES = [(480, 640, 3), (224, 224, 3), (300, 200, 3)]


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
    """Build a LeRobot policy, its processors and the checkpoint directory it saved."""
    return save_random_reference(tmp_path_factory.mktemp('pi0_checkpoint'), DIMS,
                                 state_dim=STATE_DIM, action_dim=ACTION_DIM,
                                 num_cameras=CAMERAS, policy_seed=3, stats_seed=7)


def observation(seed: int, instruction: str = 'pick up the red block'):
    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in FRAME_SHAPES]
    state = rng.normal(size=STATE_DIM).astype(np.float32)
    noise = rng.normal(size=(DIMS.chunk_size, DIMS.max_action_dim)).astype(np.float32)
    return frames, state, instruction, noise


def lerobot_chunk(reference, frames, state, instruction, noise):
    return lerobot_predict(reference['policy'], reference['pre'], reference['post'], frames,
                           state, instruction, noise)


def engine(reference, precision: str, max_batch: int = 1) -> Pi0Engine:
    options = EngineOptions(device='cpu', precision=precision, max_batch=max_batch)
    return Pi0Engine.from_pretrained(reference['dir'], options=options, dims=DIMS)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float((a * b).sum() / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_reference_is_sensitive_to_every_input(reference):
    """The comparison can fail: LeRobot's output moves with image, prompt, state and noise."""
    frames, state, instruction, noise = observation(1)
    base = lerobot_chunk(reference, frames, state, instruction, noise)
    other_frames = [frames[0], 255 - frames[1], frames[2]]
    stats = reference['action_stats']
    noise_only = noise[:, :ACTION_DIM] * stats['std'] + stats['mean']
    assert np.abs(base - noise_only).max() > 0.5
    assert np.abs(lerobot_chunk(reference, other_frames, state, instruction, noise)
                  - base).max() > 1e-2
    assert np.abs(lerobot_chunk(reference, frames, state, 'open the drawer', noise)
                  - base).max() > 1e-3
    assert np.abs(lerobot_chunk(reference, frames, state + 1.0, instruction, noise)
                  - base).max() > 1e-4


def test_tokenizer_matches_lerobot_processor(reference):
    tokenizer = load_tokenizer(reference['dir'])
    for text in ('pick up the red block', 'x', 'a much longer instruction ' * 6):
        batch = reference['pre'](lerobot_batch(*observation(0)[:2], text, 'cpu'))
        ids, mask = tokenize_prompt(tokenizer, text, DIMS.tokenizer_max_length)
        np.testing.assert_array_equal(ids, batch['observation.language.tokens'][0].numpy())
        np.testing.assert_array_equal(
            mask, batch['observation.language.attention_mask'][0].numpy())


def test_fp32_chunk_equals_lerobot(reference):
    pi0 = engine(reference, 'fp32')
    assert pi0.dtype == torch.float32
    for seed, instruction in ((1, 'pick up the red block'), (2, 'open the drawer')):
        frames, state, instruction, noise = observation(seed, instruction)
        expected = lerobot_chunk(reference, frames, state, instruction, noise)
        actions = pi0.infer(frames, state, instruction, noise=noise).actions
        assert actions.shape == (DIMS.chunk_size, ACTION_DIM)
        assert actions.dtype == np.float32
        relative = np.abs(actions - expected).max() / np.abs(expected).max()
        print(f'fp32 seed {seed}: relative max error {relative:.3e}')
        assert relative <= 1e-4


def test_fp32_batch_equals_lerobot_per_observation(reference):
    pi0 = engine(reference, 'fp32', max_batch=2)
    first, second = observation(3, 'stack the cups'), observation(4, 'wipe the table')
    results = pi0.infer_batch([(f, s, i, None, n) for f, s, i, n in (first, second)])
    for result, obs in zip(results, (first, second)):
        expected = lerobot_chunk(reference, *obs)
        assert np.abs(result.actions - expected).max() / np.abs(expected).max() <= 1e-4


@pytest.mark.parametrize('precision', ['bf16', 'fp16'])
def test_half_precision_close_to_fp32_reference(reference, precision):
    pi0 = engine(reference, precision)
    assert pi0.dtype == {'bf16': torch.bfloat16, 'fp16': torch.float16}[precision]
    frames, state, instruction, noise = observation(5)
    expected = lerobot_chunk(reference, frames, state, instruction, noise)
    actions = pi0.infer(frames, state, instruction, noise=noise).actions
    similarity = cosine(actions.ravel(), expected.ravel())
    print(f'{precision}: cosine {similarity:.6f}, max-abs {np.abs(actions - expected).max():.3e}')
    assert np.isfinite(actions).all()
    assert similarity >= 0.999
