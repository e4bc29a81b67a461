# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Parameter validation and the shipped parameter files."""
from pathlib import Path

import pytest
import yaml

from pi0_ros.parameters import (ParameterError, settings_from_values, SO101_JOINTS,
                                SO101_MAX_ACCELERATION, SO101_MAX_VELOCITY, SO101_POSITION_LOWER,
                                SO101_POSITION_UPPER, SPECS)
from pi0_ros.sim.scene import joint_limits

CONFIG = Path(__file__).resolve().parents[1] / 'config'


def defaults(**changes):
    values = {name: spec.default for name, spec in SPECS.items()}
    values.update(changes)
    return values


def file_parameters(name):
    return yaml.safe_load((CONFIG / name).read_text())['/**']['ros__parameters']


def test_defaults_validate_and_expand_per_camera_lists():
    settings = settings_from_values(defaults())
    assert settings.camera_topics == ['camera/front/image_raw', 'camera/side/image_raw',
                                      'camera/wrist/image_raw']
    assert settings.camera_transports == ['raw', 'raw', 'raw']
    compressed = settings_from_values(defaults(camera_transports=['raw', 'raw', 'compressed']))
    assert compressed.camera_topics[2] == 'camera/wrist/image_raw/compressed'


def test_shipped_parameter_file_matches_the_declared_defaults():
    parameters = file_parameters('pi0_ros.yaml')
    assert set(parameters) == set(SPECS)
    for name, value in parameters.items():
        assert value == SPECS[name].default, name
        assert type(value) is type(SPECS[name].default), name


def test_example_arm_file_is_valid():
    parameters = file_parameters('example_arm.yaml')
    assert set(parameters) <= set(SPECS)
    settings = settings_from_values(defaults(**parameters))
    assert len(settings.joint_names) == 7
    assert settings.camera_transports == ['compressed'] * 3


def test_default_limits_are_the_simulated_arms():
    limits = joint_limits()
    assert list(limits.names) == SO101_JOINTS
    assert list(limits.position_lower) == SO101_POSITION_LOWER
    assert list(limits.position_upper) == SO101_POSITION_UPPER
    assert list(limits.max_velocity) == SO101_MAX_VELOCITY
    assert list(limits.max_acceleration) == SO101_MAX_ACCELERATION


@pytest.mark.parametrize('name, value, fragment', [
    ('precision', 'fp8', 'precision'),
    ('device', 'gpu0', 'device'),
    ('camera_transports', ['raw', 'h264', 'raw'], 'camera_transports'),
    ('camera_topics', ['a', 'b'], 'camera_topics'),
    # One topic for three cameras gave every view the same frames; topics must differ.
    ('camera_topics', ['cameras/front/image_raw'], 'camera_topics'),
    ('camera_topics', ['a', 'a', 'b'], 'camera_topics'),
    ('camera_topics', ['a', 'side/img', 'bad topic'], 'camera_topics'),
    # A default topic built from a name that is no valid ROS name failed at configure,
    # without a reason.
    ('camera_names', ['cam-1', 'cam-2', 'cam-3'], 'camera_names'),
    ('camera_names', ['front', 'front', 'wrist'], 'camera_names'),
    ('joint_names', ['a', 'a'], 'joint_names'),
    ('position_lower', [0.0] * 5, 'position_lower'),
    ('position_lower', [2.0] * 6, 'position_lower'),
    ('max_velocity', [1.0] * 5 + [0.0], 'max_velocity'),
    ('max_acceleration', [1.0] * 5 + [float('nan')], 'max_acceleration'),
    ('control_rate', 0.0, 'control_rate'),
    ('inference_trigger', 'sometimes', 'inference_trigger'),
    ('camera_reliability', 'maybe', 'camera_reliability'),
    ('random_model', 'huge', 'random_model'),
    ('prefix_fp8_layers', '4-', 'prefix_fp8_layers'),
    ('prefix_fp8_layers', '16-4', 'prefix_fp8_layers'),
    ('gpu_turn_release', 'denoise', 'gpu_turn_release'),
])
def test_bad_values_name_the_parameter(name, value, fragment):
    with pytest.raises(ParameterError) as error:
        settings_from_values(defaults(**{name: value}))
    assert f"'{fragment}'" in str(error.value)
    assert error.value.name == fragment


def test_an_empty_camera_topic_among_given_ones_is_that_cameras_default():
    settings = settings_from_values(defaults(camera_topics=['', 'side/img', 'wrist/img']))
    assert settings.camera_topics == ['camera/front/image_raw', 'side/img', 'wrist/img']


def test_random_model_picks_the_size_of_the_random_engine(monkeypatch):
    from pi0_ros.engine import ModelDims, Pi0Engine
    from pi0_ros.node import build_engine
    built = []
    # Record what the node would build instead of building it (the full model takes ~13 GB in
    # fp32); device 'cuda' only names the device here, nothing is allocated.
    monkeypatch.setattr(Pi0Engine, 'random',
                        classmethod(lambda cls, dims, **kwargs: built.append((dims, kwargs))))
    for size in ('tiny', 'full'):
        build_engine(settings_from_values(defaults(random_model=size, device='cuda')))
    assert [dims for dims, _ in built] == [ModelDims.tiny(), ModelDims.full()]
    assert all(kwargs['state_dim'] == kwargs['action_dim'] == len(SO101_JOINTS)
               and kwargs['num_cameras'] == 3 for _, kwargs in built)


def test_prefix_fp8_layers_reach_the_engine_options(monkeypatch):
    from pi0_ros.engine import Pi0Engine
    from pi0_ros.node import build_engine
    built = []
    monkeypatch.setattr(Pi0Engine, 'random',
                        classmethod(lambda cls, dims, **kwargs: built.append(kwargs['options'])))
    for text in ('', 'all', ' 4-6, 9 '):
        build_engine(settings_from_values(defaults(prefix_fp8_layers=text, device='cuda')))
    assert [(o.prefix_fp8, o.prefix_fp8_layers) for o in built] == [
        (False, ()), (True, ()), (True, (4, 5, 6, 9))]


def test_the_denoise_tail_turn_release_gives_the_engine_a_denoise_tail():
    from pi0_ros.node import engine_options, GPU_TURN_TAIL_STEPS
    tails = [engine_options(settings_from_values(defaults(gpu_turn_release=release,
                                                          gpu_turns=turns))).denoise_tail_steps
             for release, turns in (('prefix', True), ('chunk', True), ('denoise_tail', True),
                                    ('denoise_tail', False))]
    assert tails == [0, 0, GPU_TURN_TAIL_STEPS, 0]
    assert GPU_TURN_TAIL_STEPS > 0


def test_frame_graph_reaches_the_engine_options(monkeypatch):
    from pi0_ros.engine import Pi0Engine
    from pi0_ros.node import build_engine
    built = []
    monkeypatch.setattr(Pi0Engine, 'random',
                        classmethod(lambda cls, dims, **kwargs: built.append(kwargs['options'])))
    for flag in (True, False):
        build_engine(settings_from_values(defaults(frame_graph=flag, device='cuda')))
    assert [o.frame_graph for o in built] == [True, False]
