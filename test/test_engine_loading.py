# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Pi0Engine.from_pretrained: what it reads, and the CheckpointError for each broken file."""
import json
import shutil

import numpy as np
import pytest
import torch

from pi0_ros.engine import CheckpointError, EngineOptions, ModelDims, Pi0Engine
from pi0_ros.engine.lerobot_reference import (build_lerobot_policy, make_lerobot_processors,
                                              save_lerobot_checkpoint)
from pi0_ros.engine.tokenizer import build_builtin_tokenizer

DIMS = ModelDims.tiny()
CPU = EngineOptions(device='cpu')


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory):
    policy = build_lerobot_policy(DIMS, state_dim=4, action_dim=3, num_cameras=2, seed=5)
    tokenizer = build_builtin_tokenizer()
    state_stats = {'mean': np.full(4, 0.5, np.float32), 'std': np.full(4, 2.0, np.float32)}
    action_stats = {'mean': np.array([1.0, 2.0, 3.0], np.float32),
                    'std': np.full(3, 4.0, np.float32)}
    pre, post = make_lerobot_processors(policy, tokenizer, state_stats, action_stats)
    directory = tmp_path_factory.mktemp('checkpoint')
    save_lerobot_checkpoint(directory, policy, pre, post, tokenizer)
    return directory


@pytest.fixture
def copy(checkpoint, tmp_path):
    target = tmp_path / 'copy'
    shutil.copytree(checkpoint, target)
    return target


def test_reads_features_stats_and_dims(checkpoint):
    pi0 = Pi0Engine.from_pretrained(checkpoint, options=CPU, dims=DIMS)
    assert (pi0.state_dim, pi0.action_dim, pi0.num_cameras) == (4, 3, 2)
    np.testing.assert_array_equal(pi0._action_stats.mean, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(pi0._state_stats.std, np.full(4, 2.0))
    assert pi0._state_stats.eps == 1e-8


def test_separate_tokenizer_directory(checkpoint, tmp_path):
    tokenizer_dir = tmp_path / 'tok'
    build_builtin_tokenizer().save_pretrained(str(tokenizer_dir))
    Pi0Engine.from_pretrained(checkpoint, tokenizer_path=tokenizer_dir, options=CPU, dims=DIMS)


def test_full_dims_implied_by_config_do_not_fit_tiny_weights(checkpoint):
    with pytest.raises(CheckpointError, match=r'model\.safetensors.*shape'):
        Pi0Engine.from_pretrained(checkpoint, options=CPU)


def test_missing_directory():
    with pytest.raises(CheckpointError, match='config.json'):
        Pi0Engine.from_pretrained('/nonexistent/pi0', options=CPU)


@pytest.mark.parametrize('name, message', [
    ('config.json', 'missing .*config.json'),
    ('model.safetensors', 'missing .*model.safetensors'),
    ('policy_preprocessor.json', 'missing .*policy_preprocessor.json'),
    ('policy_postprocessor.json', 'missing .*policy_postprocessor.json'),
    ('policy_preprocessor_step_6_normalizer_processor.safetensors',
     'missing .*normalizer_processor.safetensors'),
    ('tokenizer.json', 'no tokenizer'),
])
def test_missing_file(copy, name, message):
    (copy / name).unlink()
    with pytest.raises(CheckpointError, match=message):
        Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)


def test_malformed_config(copy):
    (copy / 'config.json').write_text('{"type": "pi0", ')
    with pytest.raises(CheckpointError, match='config.json is not valid JSON'):
        Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)


def edit_json(path, edit):
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize('edit, message', [
    (lambda c: c.update(type='pi05'), "expected 'pi0'"),
    (lambda c: c['input_features'].pop('observation.state'), 'observation.state'),
    (lambda c: c['output_features']['action'].update(shape=[40]), 'exceed'),
    (lambda c: c.update(chunk_size='fifty'), 'chunk_size must be a finite whole number'),
    (lambda c: c.update(chunk_size=float('nan')), 'chunk_size must be a finite whole number'),
    (lambda c: c.update(chunk_size=float('inf')), 'chunk_size must be a finite whole number'),
    (lambda c: c.update(chunk_size=2.7), 'chunk_size must be a finite whole number'),
    (lambda c: c.update(min_period=float('nan')), 'min_period must be a finite number'),
    (lambda c: c.update(image_resolution=['a', 'a']), 'image_resolution must be a finite whole'),
    (lambda c: c.update(image_resolution=[None, None]), 'image_resolution must be a finite whole'),
    (lambda c: c.update(paligemma_variant='gemma_7b'), 'unknown gemma variant'),
])
def test_bad_config_values(copy, edit, message):
    edit_json(copy / 'config.json', edit)
    with pytest.raises(CheckpointError, match=message):
        Pi0Engine.from_pretrained(copy, options=CPU,
                                  dims=None if 'variant' in message else DIMS)


@pytest.mark.parametrize('edit, message', [
    (lambda c: c.update(min_period=0), '0 < min_period < max_period'),
    (lambda c: c.update(min_period=-1.0), '0 < min_period < max_period'),
    (lambda c: c.update(min_period=5.0, max_period=4.0), '0 < min_period < max_period'),
])
def test_time_embedding_periods_are_checked_at_load(copy, edit, message):
    edit_json(copy / 'config.json', edit)
    with pytest.raises(CheckpointError, match=message):
        Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)


def normalizer_step(data):
    return next(step for step in data['steps']
                if step.get('registry_name') in ('normalizer_processor', 'unnormalizer_processor'))


@pytest.mark.parametrize('pipeline', ['policy_preprocessor.json', 'policy_postprocessor.json'])
@pytest.mark.parametrize('edit', [
    lambda data: normalizer_step(data)['config'].update(norm_map=['ACTION', 'MEAN_STD']),
    lambda data: normalizer_step(data).update(config=['x']),
    # Read as "no normalization", these loaded and returned normalized actions (or fed the
    # model an unnormalized state); LeRobot cannot build the step from them.
    lambda data: normalizer_step(data)['config'].pop('norm_map'),
    lambda data: normalizer_step(data).update(config=None),
    lambda data: normalizer_step(data).pop('config'),
], ids=['norm_map-list', 'config-list', 'norm_map-missing', 'config-null', 'config-missing'])
def test_malformed_normalization_step_is_a_checkpoint_error(copy, edit, pipeline):
    edit_json(copy / pipeline, edit)
    with pytest.raises(CheckpointError, match='"norm_map" object'):
        Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)


def test_image_normalization_other_than_identity_is_refused(copy):
    # pi0 takes the images as they are; mean/std image statistics would be silently ignored.
    edit_json(copy / 'policy_preprocessor.json',
              lambda data: normalizer_step(data)['config']['norm_map'].update(VISUAL='MEAN_STD'))
    with pytest.raises(CheckpointError, match="VISUAL normalization 'MEAN_STD' is not supported"):
        Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)


@pytest.mark.parametrize('eps', [float('nan'), float('inf'), True, -1.0, 'small'])
def test_a_bad_normalization_eps_is_refused(copy, eps):
    # A NaN eps loaded, and every call then failed as a non-finite output (an engine failure).
    edit_json(copy / 'policy_preprocessor.json',
              lambda data: normalizer_step(data)['config'].update(eps=eps))
    with pytest.raises(CheckpointError, match='eps must be a finite number >= 0'):
        Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)


def test_action_statistics_missing_under_mean_std_are_refused(copy):
    # LeRobot would send the normalized actions (about +-2) as joint positions.
    from safetensors.numpy import load_file, save_file
    stats_file = next(copy.glob('policy_postprocessor_step_*_unnormalizer_processor.safetensors'))
    stats = {k: v for k, v in load_file(str(stats_file)).items() if not k.startswith('action.')}
    save_file(stats, str(stats_file))
    with pytest.raises(CheckpointError, match="no 'action.mean'/'action.std' statistics"):
        Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)


def test_tokenizer_without_a_pad_token_is_refused_at_load(copy):
    def edit(data):
        data['pad_token'] = None
    edit_json(copy / 'tokenizer_config.json', edit)
    with pytest.raises(CheckpointError, match='no pad token'):
        Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)


def test_unexpected_and_integer_tensors_are_refused(copy):
    from safetensors.torch import load_file, save_file
    path = str(copy / 'model.safetensors')
    tensors = load_file(path)
    extra = tensors['model.state_proj.weight'].clone()
    save_file({**tensors, 'model.state_proj_v2.weight': extra}, path)
    with pytest.raises(CheckpointError, match='tensors that pi0 does not have: '
                                              'model.state_proj_v2.weight'):
        Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)
    weight = tensors['model.action_out_proj.weight']
    save_file({**tensors, 'model.action_out_proj.weight': weight.to(torch.int8)}, path)
    with pytest.raises(CheckpointError, match='action_out_proj.weight is I8, expected '
                                              'floating point'):
        Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)


def test_unsupported_normalization(copy):
    def edit(data):
        data['steps'][0]['config']['norm_map']['ACTION'] = 'MIN_MAX'
    edit_json(copy / 'policy_postprocessor.json', edit)
    with pytest.raises(CheckpointError, match="'MIN_MAX' is not supported"):
        Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)


def test_truncated_weights(copy):
    data = (copy / 'model.safetensors').read_bytes()
    (copy / 'model.safetensors').write_bytes(data[:100])
    with pytest.raises(CheckpointError, match='model.safetensors'):
        Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)


def test_missing_tensor(copy):
    from safetensors.torch import load_file, save_file
    tensors = load_file(str(copy / 'model.safetensors'))
    del tensors['model.state_proj.weight']
    save_file(tensors, str(copy / 'model.safetensors'))
    with pytest.raises(CheckpointError, match='state_proj.weight'):
        Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)


def test_openpi_key_names_are_accepted(checkpoint, copy):
    """Older checkpoints: no 'model.' prefix, time_mlp_* names, only the tied LM head."""
    from safetensors.torch import load_file, save_file
    tensors = load_file(str(copy / 'model.safetensors'))
    renamed = {}
    for key, value in tensors.items():
        key = key.removeprefix('model.').replace('action_time_mlp_', 'time_mlp_')
        if key.endswith('language_model.embed_tokens.weight'):
            # Real PaliGemma files tie the head to the embedding; keep only the head.
            renamed['paligemma_with_expert.paligemma.lm_head.weight'] = value.contiguous()
        elif not key.endswith('paligemma.lm_head.weight'):
            renamed[key] = value.contiguous()
    save_file(renamed, str(copy / 'model.safetensors'))
    frames = [np.full((50, 60, 3), 7, np.uint8), np.full((70, 30, 3), 200, np.uint8)]
    noise = np.ones((DIMS.chunk_size, DIMS.max_action_dim), np.float32)
    original = Pi0Engine.from_pretrained(checkpoint, options=CPU, dims=DIMS)
    converted = Pi0Engine.from_pretrained(copy, options=CPU, dims=DIMS)
    np.testing.assert_array_equal(
        converted.infer(frames, np.zeros(4), 'go', noise=noise).actions,
        original.infer(frames, np.zeros(4), 'go', noise=noise).actions)
