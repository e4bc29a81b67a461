# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Launch files (launch_ros is not installable here): syntax, arguments and their defaults."""
import ast
import os
from pathlib import Path
import runpy
import subprocess
import sys

import pytest

from pi0_ros.launch_arguments import (fleet_process_remaps, OVERRIDES, parameter_overrides,
                                      sim_camera_settings)
from pi0_ros.parameters import ParameterError, SPECS, validate_value

LAUNCH_DIR = Path(__file__).resolve().parents[1] / 'launch'
LAUNCH_FILES = sorted(LAUNCH_DIR.glob('*.launch.py'))


def declared_arguments(path):
    """Return {name: default or None} of the arguments a file declares (each described)."""
    tree = ast.parse(path.read_text())
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, 'id', '') == 'DeclareLaunchArgument':
            keywords = {k.arg: k.value for k in node.keywords}
            assert 'description' in keywords, f'{path.name}: {ast.unparse(node.args[0])}'
            default = keywords.get('default_value')
            found[node.args[0].value if isinstance(node.args[0], ast.Constant) else None] = (
                default.value if isinstance(default, ast.Constant) else None)
        # control.launch.py / gazebo.launch.py declare theirs from (name, default, description)
        elif isinstance(node, ast.Assign) and getattr(node.targets[0], 'id', '') == 'ARGUMENTS':
            for entry in node.value.elts:
                name, default, description = entry.elts
                assert isinstance(description, (ast.Constant, ast.JoinedStr))
                found[name.value] = default.value if isinstance(default, ast.Constant) else None
    found.pop(None, None)
    return found


@pytest.mark.parametrize('path', LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_declares_described_arguments_with_valid_defaults(path):
    compile(path.read_text(), str(path), 'exec')
    arguments = declared_arguments(path)
    assert 'params_file' in arguments
    for name in ('checkpoint', 'device', 'precision'):
        assert name in arguments, f'{path.name} lacks the {name} argument'
    for name, default in arguments.items():
        if name in OVERRIDES and not (path.name == 'sim.launch.py' and name == 'use_sim_time'):
            # Empty: the params file's value (a default here would replace the user's file).
            assert default == '', f'{path.name}: {name} defaults to {default!r}'
        elif name in SPECS and default is not None:
            validate_value(name, default)  # raises ParameterError naming a bad default


@pytest.mark.parametrize('path', LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_overrides_node_parameters_only_through_parameter_overrides(path):
    tree = ast.parse(path.read_text())
    calls = [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.Call)]
    assert any(call.startswith('parameter_overrides(') for call in calls), path.name
    for name in ('checkpoint', 'device', 'precision'):
        assert not any(f"LaunchConfiguration('{name}')" in call and 'ParameterValue' in call
                       for call in calls), f'{path.name} passes {name} unconditionally'


def test_parameter_overrides_take_only_the_arguments_given():
    assert parameter_overrides({'checkpoint': '', 'device': '', 'precision': '',
                                'use_sim_time': ''}) == {}
    assert parameter_overrides({'checkpoint': '/models/pi0', 'device': 'cuda:1',
                                'use_sim_time': 'True'}) == {
        'checkpoint': '/models/pi0', 'device': 'cuda:1', 'use_sim_time': True}
    assert parameter_overrides({'use_sim_time': 'false', 'precision': ' bf16 '}) == {
        'use_sim_time': False, 'precision': 'bf16'}
    with pytest.raises(ValueError, match="use_sim_time:='yes'"):
        parameter_overrides({'use_sim_time': 'yes'})
    # launch_ros writes the dict as unquoted YAML: a relative checkpoint named y or 1e5 would
    # reach the node as a bool or a number; absolute, it stays a path string.
    for relative in ('y', '1e5', 'models/pi0'):
        path = parameter_overrides({'checkpoint': relative})['checkpoint']
        assert path == os.path.abspath(relative) and os.path.isabs(path)
    with pytest.raises(ParameterError, match='device'):
        parameter_overrides({'device': 'gpu'})


def test_control_launch_has_the_documented_arguments():
    arguments = declared_arguments(LAUNCH_DIR / 'control.launch.py')
    assert set(arguments) == {'namespace', 'params_file', 'checkpoint', 'device', 'precision',
                              'use_sim_time', 'log_level', 'trajectory_topic'}
    # Relative: a namespaced node commands the controller in its namespace.
    assert arguments['trajectory_topic'] == 'arm_controller/joint_trajectory'


class _Recorded:
    """Stands in for a launch / launch_ros class: records its arguments."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class _LaunchConfiguration(_Recorded):
    def perform(self, context):
        return context[self.args[0]]


@pytest.fixture
def launch_stand_ins(monkeypatch):
    """Install recording stand-ins for the launch and launch_ros names the files import."""
    import types
    names = {'launch': ['LaunchDescription'],
             'launch.actions': ['DeclareLaunchArgument', 'IncludeLaunchDescription',
                                'OpaqueFunction', 'RegisterEventHandler',
                                'SetEnvironmentVariable'],
             'launch.event_handlers': ['OnProcessExit'],
             'launch.launch_description_sources': ['PythonLaunchDescriptionSource'],
             'launch.substitutions': ['Command', 'EnvironmentVariable',
                                      'PathJoinSubstitution'],
             'launch_ros': [], 'launch_ros.actions': ['LifecycleNode', 'Node'],
             'launch_ros.parameter_descriptions': ['ParameterValue'],
             'launch_ros.substitutions': ['FindPackageShare']}
    for module_name, classes in names.items():
        module = types.ModuleType(module_name)
        for name in classes:
            setattr(module, name, type(name, (_Recorded,), {}))
        monkeypatch.setitem(sys.modules, module_name, module)
    sys.modules['launch.substitutions'].LaunchConfiguration = _LaunchConfiguration


@pytest.mark.parametrize('name', ['control_node', 'sim_node', 'gazebo_policy'])
def test_the_control_node_gets_only_the_launch_arguments_given(launch_stand_ins, name):
    path, function = {'control_node': ('control.launch.py', 'control_node'),
                      'sim_node': ('sim.launch.py', 'control_node'),
                      'gazebo_policy': ('gazebo.launch.py', 'policy_node')}[name]
    found = runpy.run_path(str(LAUNCH_DIR / path))
    found['generate_launch_description']()
    unset = {'checkpoint': '', 'device': '', 'precision': '', 'use_sim_time': ''}
    node = found[function](unset)[0]
    # The control node is a lifecycle node wherever it is launched with its own autostart.
    assert type(node).__name__ == ('Node' if name == 'gazebo_policy' else 'LifecycleNode')
    params_file, overrides = node.kwargs['parameters']
    assert params_file.args == ('params_file',)
    # Nothing given: the params file decides (Gazebo's node is always on its clock).
    assert overrides == ({'use_sim_time': True} if path == 'gazebo.launch.py' else {})
    given = dict(unset, checkpoint='/models/pi0', device='cuda:0', use_sim_time='true')
    overrides = found[function](given)[0].kwargs['parameters'][1]
    assert overrides == {'checkpoint': '/models/pi0', 'device': 'cuda:0', 'use_sim_time': True}


def test_the_sim_launch_gives_both_nodes_the_camera_fast_dds_profile(launch_stand_ins):
    # The simulator's cameras and the node that subscribes them are both launched there:
    # without the shared-memory profile most 640x480 frames are lost on one host.
    found = runpy.run_path(str(LAUNCH_DIR / 'sim.launch.py'))
    entities = found['generate_launch_description']().args[0]
    kinds = [type(entity).__name__ for entity in entities]
    setting = entities[kinds.index('SetEnvironmentVariable')]
    # Before the nodes (both made by OpaqueFunctions).
    assert kinds.count('OpaqueFunction') == 2
    assert kinds.index('SetEnvironmentVariable') < kinds.index('OpaqueFunction')
    name, value = setting.args
    assert name == 'FASTRTPS_DEFAULT_PROFILES_FILE'
    assert value.args == ('FASTRTPS_DEFAULT_PROFILES_FILE',)     # a profile set outside wins
    share, folder, profile = value.kwargs['default_value'].args[0]
    assert share.args == ('pi0_ros',) and (folder, profile) == ('config',
                                                                'fastdds_large_images.xml')
    assert (LAUNCH_DIR.parent / folder / profile).is_file()


def test_pytest_accepts_the_hooks_of_jazzy_launch_testing(tmp_path):
    # Jazzy's launch_testing plugin implements pytest_pycollect_makemodule(path, parent) with
    # the py.path argument that pytest 9 dropped: with it installed, a pytest that refuses the
    # hook stops every run at start-up (colcon test included).
    (tmp_path / 'jazzy_hooks.py').write_text(
        'def pytest_pycollect_makemodule(path, parent):\n    return None\n')
    (tmp_path / 'test_something.py').write_text('def test_something():\n    pass\n')
    result = subprocess.run(
        [sys.executable, '-m', 'pytest', '-p', 'jazzy_hooks', '-p', 'no:cacheprovider', '-q',
         'test_something.py'], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert '1 passed' in result.stdout


SIM_CAMERA_ARGUMENTS = {'image_width': '', 'image_height': '', 'camera_rate': ''}


@pytest.mark.parametrize('device, expected', [
    ('cpu', (320, 240, 10.0)), ('cuda', (640, 480, 15.0)), ('cuda:1', (640, 480, 15.0))])
def test_the_sim_launch_sizes_its_cameras_for_where_inference_runs(
        launch_stand_ins, device, expected):
    # 640x480 at 15 Hz on 2 CPU cores left the node holding most of the time.
    found = runpy.run_path(str(LAUNCH_DIR / 'sim.launch.py'))
    context = dict(SIM_CAMERA_ARGUMENTS, device=device, use_sim_time='true', namespace='',
                   log_level='info')
    parameters = found['simulator'](context)[0].kwargs['parameters'][0]
    assert (parameters['image_width'], parameters['image_height'],
            parameters['camera_rate']) == expected
    given = dict(context, image_width='800', camera_rate='30')
    parameters = found['simulator'](given)[0].kwargs['parameters'][0]
    assert (parameters['image_width'], parameters['image_height'],
            parameters['camera_rate']) == (800, expected[1], 30.0)
    for bad in ('wide', '0', 'nan'):
        with pytest.raises(ValueError, match='image_width'):
            found['simulator'](dict(context, image_width=bad))


def test_the_demo_and_the_sim_launch_start_the_same_cameras():
    from pi0_ros.tools.demo import camera_settings, parse_args
    for device in ('cpu', 'cuda'):
        assert camera_settings(parse_args(['--device', device])) == sim_camera_settings(
            device, SIM_CAMERA_ARGUMENTS)
    chosen = camera_settings(parse_args(['--device', 'cpu', '--image-width', '800']))
    assert chosen == {'image_width': 800, 'image_height': 240, 'camera_rate': 10.0}


def test_pytest_collects_the_launch_tests_and_skips_them_without_launch_testing():
    # `python -m pytest test/launch` runs them where launch_testing is installed; here, where
    # it is not, they are collected and skipped (not "no tests ran").
    result = subprocess.run(
        [sys.executable, '-m', 'pytest', '-q', '-rs', '-p', 'no:cacheprovider',
         str(LAUNCH_DIR.parent / 'test' / 'launch')], cwd=LAUNCH_DIR.parent,
        capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != 'PI0_ROS_LAUNCH_TESTS_RUN_SEPARATELY'})
    try:
        import launch_testing  # noqa: F401
    except ImportError:
        assert result.returncode == 0, result.stdout + result.stderr
        assert '4 skipped' in result.stdout and 'warning' not in result.stdout, result.stdout
        assert 'launch_testing is not installed' in result.stdout
    else:
        assert result.returncode == 0 and 'passed' in result.stdout, result.stdout


def test_the_fleet_launch_starts_one_process_for_the_robots_given(launch_stand_ins):
    found = runpy.run_path(str(LAUNCH_DIR / 'fleet.launch.py'))
    found['generate_launch_description']()
    context = {'robots': ' arm1, /arm2 ', 'processes': '1', 'checkpoint': '', 'device': 'cuda',
               'precision': '', 'use_sim_time': ''}
    (node,) = found['fleet_node'](context)
    assert node.kwargs['executable'] == 'fleet_node'
    # A __node or __ns remapping would rename every node of the process.
    assert 'name' not in node.kwargs and 'namespace' not in node.kwargs
    robot_params, fleet_params, given = node.kwargs['parameters']
    assert robot_params.args == ('params_file',) and fleet_params.args == ('fleet_params_file',)
    assert given == {'robots': ['arm1', 'arm2'], 'device': 'cuda'}
    assert [source for source, _ in node.kwargs['remappings']] == ['joint_trajectory']
    for bad in ('', ' , ', 'arm1,arm1'):
        with pytest.raises(ValueError, match='robots'):
            found['fleet_node'](dict(context, robots=bad))


def test_the_fleet_launch_splits_the_robots_over_the_processes_asked_for(launch_stand_ins):
    found = runpy.run_path(str(LAUNCH_DIR / 'fleet.launch.py'))
    context = {'robots': 'a1,a2,a3,a4,a5', 'processes': '2', 'checkpoint': '', 'device': '',
               'precision': '', 'use_sim_time': ''}
    nodes = found['fleet_node'](context)
    assert [node.kwargs['parameters'][2]['robots'] for node in nodes] == [
        ['a1', 'a2', 'a3'], ['a4', 'a5']]
    # Each fleet node in a namespace of its own; the robots' nodes keep theirs.
    assert [node.kwargs['remappings'][1:] for node in nodes] == [
        [('pi0_fleet:__ns', '/fleet1')], [('pi0_fleet:__ns', '/fleet2')]]
    assert len(found['fleet_node'](dict(context, processes='9'))) == 5  # one robot each at most
    for bad in ('0', 'two', '-1', ''):
        with pytest.raises(ValueError, match='processes'):
            found['fleet_node'](dict(context, processes=bad))


def test_the_fleet_params_file_sets_every_fleet_process_and_no_robot():
    # The rule and the file as the launch passes them, read by rcl in a fresh context.
    import rclpy
    from rclpy.context import Context
    context = Context()
    rclpy_args = ['--ros-args', '--params-file', str(LAUNCH_DIR.parent / 'config' / 'fleet.yaml')]
    for source, target in fleet_process_remaps(1, 2):
        rclpy_args += ['-r', f'{source}:={target}']
    rclpy.init(args=rclpy_args, context=context)
    try:
        fleet = rclpy.create_node('pi0_fleet', context=context)
        robot = rclpy.create_node('pi0_ros', namespace='/arm2', context=context)
        assert fleet.get_fully_qualified_name() == '/fleet2/pi0_fleet'
        assert robot.get_fully_qualified_name() == '/arm2/pi0_ros'
        assert fleet.declare_parameter('max_batch', -1).value == 0  # config/fleet.yaml
        assert robot.declare_parameter('max_batch', -1).value == -1
        fleet.destroy_node()
        robot.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def test_the_8_arm_fleet_file_sets_the_fleet_and_every_robot_over_the_robot_defaults():
    # As fleet.launch.py passes them: params_file (config/pi0_ros.yaml), then fleet_params_file.
    import rclpy
    from rclpy.context import Context
    from pi0_ros.parameters import SPECS
    config = LAUNCH_DIR.parent / 'config'
    context = Context()
    rclpy.init(args=['--ros-args', '--params-file', str(config / 'pi0_ros.yaml'),
                     '--params-file', str(config / 'fleet_8_arms.yaml')], context=context)
    try:
        fleet = rclpy.create_node('pi0_fleet', namespace='/fleet3', context=context)
        robot = rclpy.create_node('pi0_ros', namespace='/arm7', context=context)
        assert fleet.declare_parameter('max_batch', -1).value == 4
        values = {name: robot.declare_parameter(name, SPECS[name].default).value
                  for name in ('chunk_handover', 'prefix_fp8_layers', 'publish_on_chunk',
                               'control_rate')}
        # control_rate: config/pi0_ros.yaml's, which the file leaves as it is.
        assert values == {'chunk_handover': 'blend', 'prefix_fp8_layers': '4-16',
                          'publish_on_chunk': True, 'control_rate': 50.0}
        fleet.destroy_node()
        robot.destroy_node()
    finally:
        rclpy.shutdown(context=context)
