# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Reading LeRobot pi0 checkpoint directories (config, weights, normalization stats)."""
from dataclasses import dataclass, replace
import json
import math
from pathlib import Path

import numpy as np
import torch

from pi0_ros.engine.config import ModelDims
from pi0_ros.engine.errors import CheckpointError
from pi0_ros.engine.model import lerobot_parameter_shapes

WEIGHTS_FILE = 'model.safetensors'
CONFIG_FILE = 'config.json'
PREPROCESSOR_FILE = 'policy_preprocessor.json'
POSTPROCESSOR_FILE = 'policy_postprocessor.json'
STATE_KEY = 'observation.state'
ACTION_KEY = 'action'
IMAGE_KEY_PREFIX = 'observation.images.'
GEMMA_VARIANTS = {
    'gemma_2b': {'width': 2048, 'depth': 18, 'mlp_dim': 16384, 'heads': 8, 'head_dim': 256},
    'gemma_300m': {'width': 1024, 'depth': 18, 'mlp_dim': 4096, 'heads': 8, 'head_dim': 256},
}
# Tensors a pi0 checkpoint holds that inference does not use: the language-model heads
# (PaliGemma's is tied to its input embedding).
UNUSED_SUFFIXES = ('paligemma.lm_head.weight', 'gemma_expert.lm_head.weight')
FLOAT_DTYPES = ('F32', 'BF16', 'F16', 'F64')
# Key renames LeRobot applies when loading older (openpi-converted) checkpoints.
KEY_ALIASES = {
    'action_time_mlp_in.': 'time_mlp_in.',
    'action_time_mlp_out.': 'time_mlp_out.',
}


@dataclass(frozen=True)
class NormStats:
    """MEAN_STD statistics of one feature: normalize (x - mean) / (std + eps), x * std + mean."""

    mean: np.ndarray
    std: np.ndarray
    eps: float

    @classmethod
    def identity(cls, size: int) -> 'NormStats':
        """Statistics that leave values unchanged."""
        return cls(np.zeros(size, np.float32), np.ones(size, np.float32), 0.0)


@dataclass
class CheckpointInfo:
    """What a checkpoint directory says about the policy."""

    dims: ModelDims
    state_dim: int
    action_dim: int
    camera_names: list
    state_stats: NormStats
    action_stats: NormStats


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f'missing {path}: expected a LeRobot pi0 checkpoint file')
    try:
        with open(path, encoding='utf-8') as stream:
            data = json.load(stream)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f'{path} is not valid JSON: {error}') from error
    if not isinstance(data, dict):
        raise CheckpointError(f'{path} must hold a JSON object, found {type(data).__name__}')
    return data


def _feature_size(config_path: Path, features: dict, key: str) -> int:
    feature = features.get(key)
    try:
        shape = feature['shape']
        if len(shape) != 1 or int(shape[0]) < 1:
            raise ValueError
        return int(shape[0])
    except (TypeError, KeyError, ValueError) as error:
        raise CheckpointError(f'{config_path}: feature {key!r} must have a shape [n] with n >= 1, '
                              f'found {feature!r}') from error


def _config_number(config_path: Path, key: str, value, kind: type):
    """Return a finite number of config.json as kind (int: a whole number), or raise."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or (kind is int and value != int(value))):
        raise CheckpointError(f'{config_path}: {key} must be a finite '
                              f"{'whole ' if kind is int else ''}number, found {value!r}")
    return kind(value)


def dims_from_config(config_path: Path, config: dict, dims: ModelDims | None) -> ModelDims:
    """
    Derive ModelDims from config.json (variants, chunk, max dims, steps, image size).

    dims, where given, replaces the variants' widths and depths (a smaller model for tests);
    config.json's chunk size, max dims, steps, periods and image size apply to it either way.
    """
    if config.get('type') not in (None, 'pi0'):
        raise CheckpointError(f"{config_path}: type is {config.get('type')!r}, expected 'pi0' "
                              '(pi0.5 and pi0-FAST are different models)')
    if dims is None:
        try:
            prefix = GEMMA_VARIANTS[config.get('paligemma_variant', 'gemma_2b')]
            expert = GEMMA_VARIANTS[config.get('action_expert_variant', 'gemma_300m')]
        except KeyError as error:
            raise CheckpointError(f'{config_path}: unknown gemma variant {error}; expected one of '
                                  f'{sorted(GEMMA_VARIANTS)}') from error
        dims = replace(ModelDims.full(), prefix_width=prefix['width'],
                       prefix_depth=prefix['depth'], prefix_mlp_dim=prefix['mlp_dim'],
                       prefix_heads=prefix['heads'], expert_width=expert['width'],
                       expert_depth=expert['depth'], expert_mlp_dim=expert['mlp_dim'],
                       expert_heads=expert['heads'], head_dim=prefix['head_dim'])
    overrides = {}
    for name, key in (('chunk_size', 'chunk_size'), ('max_state_dim', 'max_state_dim'),
                      ('max_action_dim', 'max_action_dim'), ('num_steps', 'num_inference_steps'),
                      ('tokenizer_max_length', 'tokenizer_max_length'),
                      ('min_period', 'min_period'), ('max_period', 'max_period')):
        if key in config:
            overrides[name] = _config_number(config_path, key, config[key],
                                             type(getattr(dims, name)))
    resolution = config.get('image_resolution', [dims.image_size, dims.image_size])
    if (not isinstance(resolution, list) or len(resolution) != 2
            or resolution[0] != resolution[1]):
        raise CheckpointError(f'{config_path}: image_resolution must be [n, n], '
                              f'found {resolution!r}')
    overrides['image_size'] = _config_number(config_path, 'image_resolution', resolution[0], int)
    if config.get('empty_cameras', 0):
        raise CheckpointError(f'{config_path}: empty_cameras > 0 is not supported')
    if config.get('use_relative_actions', False):
        raise CheckpointError(f'{config_path}: use_relative_actions is not supported')
    try:
        return replace(dims, **overrides)
    except ValueError as error:
        raise CheckpointError(f'{config_path}: inconsistent dimensions: {error}') from error


def _normalizer_step(directory: Path, pipeline_file: str, step_name: str) -> tuple:
    """Return (path, step, its config, its norm_map) of a processor pipeline's step."""
    path = directory / pipeline_file
    pipeline = _read_json(path)
    steps = pipeline.get('steps')
    if not isinstance(steps, list):
        raise CheckpointError(f'{path}: expected a list under "steps"')
    step = next((s for s in steps if isinstance(s, dict)
                 and s.get('registry_name') == step_name), None)
    if step is None:
        raise CheckpointError(f'{path}: no {step_name!r} step (expected the normalization step '
                              'that LeRobot saves with the policy)')
    step_config = step.get('config')
    norm_map = step_config.get('norm_map') if isinstance(step_config, dict) else None
    if not isinstance(norm_map, dict):
        # LeRobot cannot build the step without one; as "no normalization" the actions would
        # reach the arm normalized (about +-2) as joint positions.
        raise CheckpointError(f'{path}: step {step_name!r} must have a "config" object with a '
                              f'"norm_map" object, found {step_config!r}')
    return path, step, step_config, norm_map


def _norm_stats(directory: Path, normalizer: tuple, feature: str, feature_type: str,
                size: int) -> NormStats:
    """MEAN_STD stats of one feature from a _normalizer_step() + its safetensors file."""
    path, step, step_config, norm_map = normalizer
    step_name = step.get('registry_name')
    mode = norm_map.get(feature_type, 'IDENTITY')
    if mode == 'IDENTITY':
        return NormStats.identity(size)
    if mode != 'MEAN_STD':
        raise CheckpointError(f'{path}: {feature_type} normalization {mode!r} is not supported '
                              '(expected MEAN_STD or IDENTITY)')
    state_file = step.get('state_file')
    if not isinstance(state_file, str):
        raise CheckpointError(f'{path}: step {step_name!r} names no state_file')
    stats_path = directory / state_file
    if not stats_path.is_file():
        raise CheckpointError(f'missing {stats_path}: expected the {step_name} statistics')
    try:
        from safetensors.numpy import load_file
        tensors = load_file(str(stats_path))
    except Exception as error:  # noqa: B902 - a corrupt file can raise many types
        raise CheckpointError(f'{stats_path} is not a valid safetensors file: {error}') from error
    mean_key, std_key = f'{feature}.mean', f'{feature}.std'
    if mean_key not in tensors and std_key not in tensors:
        # LeRobot would leave the feature unchanged; for actions that means sending normalized
        # values (about +-2) to the arm as joint positions, so it is refused here.
        raise CheckpointError(f'{stats_path}: {feature_type} normalization is MEAN_STD but '
                              f'there are no {mean_key!r}/{std_key!r} statistics (the '
                              'checkpoint was saved without dataset stats)')
    values = []
    for key in (mean_key, std_key):
        if key not in tensors:
            raise CheckpointError(f'{stats_path}: missing {key!r}')
        array = np.asarray(tensors[key], dtype=np.float32).reshape(-1)
        if array.shape != (size,):
            raise CheckpointError(f'{stats_path}: {key!r} has shape {array.shape}, expected '
                                  f'({size},)')
        if not np.isfinite(array).all():
            raise CheckpointError(f'{stats_path}: {key!r} holds non-finite values')
        values.append(array)
    eps = step_config.get('eps', 1e-8)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < math.inf:
        raise CheckpointError(f'{path}: eps must be a finite number >= 0, found {eps!r}')
    return NormStats(values[0], values[1], float(eps))


def read_checkpoint_info(directory: Path, dims: ModelDims | None) -> CheckpointInfo:
    """Parse config.json and the processor files of a LeRobot pi0 checkpoint."""
    config_path = directory / CONFIG_FILE
    config = _read_json(config_path)
    model_dims = dims_from_config(config_path, config, dims)
    inputs = config.get('input_features') or {}
    outputs = config.get('output_features') or {}
    if not isinstance(inputs, dict) or not isinstance(outputs, dict):
        raise CheckpointError(f'{config_path}: input_features/output_features must be objects')
    cameras = [key for key, value in inputs.items() if key.startswith(IMAGE_KEY_PREFIX)
               or (isinstance(value, dict) and value.get('type') == 'VISUAL')]
    if not cameras:
        raise CheckpointError(f'{config_path}: input_features lists no VISUAL feature')
    state_dim = _feature_size(config_path, inputs, STATE_KEY)
    action_dim = _feature_size(config_path, outputs, ACTION_KEY)
    if state_dim > model_dims.max_state_dim or action_dim > model_dims.max_action_dim:
        raise CheckpointError(f'{config_path}: state/action dims {state_dim}/{action_dim} exceed '
                              f'max_state_dim/max_action_dim {model_dims.max_state_dim}/'
                              f'{model_dims.max_action_dim}')
    normalizer = _normalizer_step(directory, PREPROCESSOR_FILE, 'normalizer_processor')
    visual = normalizer[3].get('VISUAL', 'IDENTITY')
    if visual != 'IDENTITY':
        raise CheckpointError(f'{normalizer[0]}: VISUAL normalization {visual!r} is not '
                              'supported (pi0 takes images as they are: IDENTITY)')
    state_stats = _norm_stats(directory, normalizer, STATE_KEY, 'STATE', state_dim)
    unnormalizer = _normalizer_step(directory, POSTPROCESSOR_FILE, 'unnormalizer_processor')
    action_stats = _norm_stats(directory, unnormalizer, ACTION_KEY, 'ACTION', action_dim)
    return CheckpointInfo(model_dims, state_dim, action_dim, cameras, state_stats, action_stats)


class SafetensorsWeights:
    """Lazy reader of LeRobot-named tensors from model.safetensors, with shape checks."""

    def __init__(self, directory: Path, dims: ModelDims, device: torch.device):
        self.path = directory / WEIGHTS_FILE
        if not self.path.is_file():
            raise CheckpointError(f'missing {self.path}: expected the policy weights '
                                  '(LeRobot save_pretrained writes model.safetensors)')
        try:
            from safetensors import safe_open
            self._file = safe_open(str(self.path), framework='pt', device=str(device))
            self._keys = set(self._file.keys())
        except Exception as error:  # noqa: B902 - a corrupt file can raise many types
            raise CheckpointError(f'{self.path} is not a valid safetensors file: {error}') \
                from error
        self._shapes = lerobot_parameter_shapes(dims)
        used = set()
        for key in self._shapes:
            found = self._resolve(key)
            used.add(found)
            tensor = self._file.get_slice(found)
            shape = tuple(tensor.get_shape())
            if shape != self._shapes[key]:
                raise CheckpointError(f'{self.path}: {found} has shape {shape}, expected '
                                      f'{self._shapes[key]} (check the model dimensions)')
            if tensor.get_dtype() not in FLOAT_DTYPES:
                raise CheckpointError(f'{self.path}: {found} is {tensor.get_dtype()}, expected '
                                      f"floating point ({', '.join(FLOAT_DTYPES)})")
        unexpected = sorted(key for key in self._keys - used
                            if not key.endswith(UNUSED_SUFFIXES))
        if unexpected:
            listed = ', '.join(unexpected[:5]) + (
                f' and {len(unexpected) - 5} more' if len(unexpected) > 5 else '')
            raise CheckpointError(f'{self.path}: tensors that pi0 does not have: {listed} '
                                  '(another model, or other model dimensions)')

    def _resolve(self, key: str) -> str:
        candidates = [f'model.{key}', key]
        for new, old in KEY_ALIASES.items():
            if key.startswith(new):
                old_key = old + key[len(new):]
                candidates += [f'model.{old_key}', old_key]
        if key.endswith('language_model.embed_tokens.weight'):
            # PaliGemma ties the input embedding to the LM head; some files keep only the head.
            candidates += ['model.paligemma_with_expert.paligemma.lm_head.weight',
                           'paligemma_with_expert.paligemma.lm_head.weight']
        for candidate in candidates:
            if candidate in self._keys:
                return candidate
        raise CheckpointError(f'{self.path}: missing tensor {candidates[0]!r} '
                              f'(expected shape {self._shapes[key]})')

    def __call__(self, key: str) -> torch.Tensor:
        """Return the tensor LeRobot names ``key`` (without the 'model.' prefix)."""
        return self._file.get_tensor(self._resolve(key))
