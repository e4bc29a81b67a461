# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Start the pi0_ros control node: `ros2 launch pi0_ros control.launch.py`.

The node configures itself (loads the engine, warms it up) and activates (parameter `autostart`),
then publishes JointTrajectory commands on `trajectory_topic`.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

ARGUMENTS = [
    ('namespace', '', 'Namespace of the node and of its relative topics'),
    ('params_file', PathJoinSubstitution([FindPackageShare('pi0_ros'), 'config', 'pi0_ros.yaml']),
     'Parameters file of the control node'),
    ('checkpoint', '', 'LeRobot pi0 checkpoint directory; empty = built-in random tiny model'),
    ('device', 'auto', 'Torch device: auto | cpu | cuda | cuda:N'),
    ('precision', 'auto', 'Engine precision: auto | fp32 | bf16 | fp16'),
    ('use_sim_time', 'false', 'Use /clock (simulation time)'),
    ('log_level', 'info', 'Log level: debug | info | warn | error'),
    ('trajectory_topic', '/arm_controller/joint_trajectory',
     "Topic of the joint_trajectory_controller's trajectory input"),
]


def generate_launch_description():
    arguments = [DeclareLaunchArgument(name, default_value=default, description=description)
                 for name, default, description in ARGUMENTS]
    control_node = LifecycleNode(
        package='pi0_ros',
        executable='control_node',
        name='pi0_ros',
        namespace=LaunchConfiguration('namespace'),
        output='screen',
        emulate_tty=True,
        parameters=[
            LaunchConfiguration('params_file'),
            {
                'checkpoint': ParameterValue(LaunchConfiguration('checkpoint'), value_type=str),
                'device': ParameterValue(LaunchConfiguration('device'), value_type=str),
                'precision': ParameterValue(LaunchConfiguration('precision'), value_type=str),
                'use_sim_time': ParameterValue(LaunchConfiguration('use_sim_time'),
                                               value_type=bool),
            },
        ],
        remappings=[('joint_trajectory', LaunchConfiguration('trajectory_topic'))],
        arguments=['--ros-args', '--log-level', LaunchConfiguration('log_level')],
    )
    return LaunchDescription(arguments + [control_node])
