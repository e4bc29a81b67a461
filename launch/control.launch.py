# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Start the pi0_ros control node: `ros2 launch pi0_ros control.launch.py`.

The node configures itself (loads the engine, warms it up) and activates (parameter `autostart`),
then publishes JointTrajectory commands on `trajectory_topic`. checkpoint, device, precision and
use_sim_time override the params file only when given.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode
from launch_ros.substitutions import FindPackageShare

from pi0_ros.launch_arguments import OVERRIDES, parameter_overrides, UNSET_HELP

ARGUMENTS = [
    ('namespace', '', 'Namespace of the node and of its relative topics'),
    ('params_file', PathJoinSubstitution([FindPackageShare('pi0_ros'), 'config', 'pi0_ros.yaml']),
     'Parameters file of the control node'),
    ('checkpoint', '', f'LeRobot pi0 checkpoint directory ({UNSET_HELP}; its default, empty, '
                       'is the built-in random tiny model)'),
    ('device', '', f'Torch device: auto | cpu | cuda | cuda:N ({UNSET_HELP})'),
    ('precision', '', f'Engine precision: auto | fp32 | bf16 | fp16 ({UNSET_HELP})'),
    ('use_sim_time', '', f'Use /clock (simulation time): true | false ({UNSET_HELP})'),
    ('log_level', 'info', 'Log level: debug | info | warn | error'),
    ('trajectory_topic', 'arm_controller/joint_trajectory',
     "Topic of the joint_trajectory_controller's trajectory input (relative: in the namespace)"),
]


def control_node(context):
    """Return the node, with the parameter overrides of the launch arguments that were given."""
    given = {name: LaunchConfiguration(name).perform(context) for name in OVERRIDES}
    return [LifecycleNode(
        package='pi0_ros',
        executable='control_node',
        name='pi0_ros',
        namespace=LaunchConfiguration('namespace'),
        output='screen',
        emulate_tty=True,
        parameters=[LaunchConfiguration('params_file'), parameter_overrides(given)],
        remappings=[('joint_trajectory', LaunchConfiguration('trajectory_topic'))],
        arguments=['--ros-args', '--log-level', LaunchConfiguration('log_level')],
    )]


def generate_launch_description():
    arguments = [DeclareLaunchArgument(name, default_value=default, description=description)
                 for name, default, description in ARGUMENTS]
    return LaunchDescription(arguments + [OpaqueFunction(function=control_node)])
