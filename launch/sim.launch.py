# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Simulated SO-101 (MuJoCo) driven by the pi0_ros control node.

Usage: ros2 launch pi0_ros sim.launch.py checkpoint:=/path/to/pi0 device:=cuda
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.descriptions import ParameterValue


def generate_launch_description():
    share = get_package_share_directory('pi0_ros')
    namespace = LaunchConfiguration('namespace')
    params_file = LaunchConfiguration('params_file')
    use_sim_time = LaunchConfiguration('use_sim_time')
    log_level = LaunchConfiguration('log_level')

    arguments = [
        DeclareLaunchArgument('namespace', default_value='',
                              description='Namespace of the simulator and the control node.'),
        DeclareLaunchArgument('params_file',
                              default_value=os.path.join(share, 'config', 'pi0_ros.yaml'),
                              description='Parameters file of the control node.'),
        DeclareLaunchArgument('use_sim_time', default_value='true',
                              description='Run both nodes on the simulator clock (/clock).'),
        DeclareLaunchArgument('log_level', default_value='info',
                              description='Log level of both nodes (debug, info, warn, error).'),
        DeclareLaunchArgument('image_width', default_value='640',
                              description='Simulated camera image width in pixels.'),
        DeclareLaunchArgument('image_height', default_value='480',
                              description='Simulated camera image height in pixels.'),
        DeclareLaunchArgument('camera_rate', default_value='15.0',
                              description='Simulated camera frames per second.'),
        DeclareLaunchArgument('checkpoint', default_value='',
                              description='Pi0 checkpoint (directory) for the control node.'),
        DeclareLaunchArgument('device', default_value='cuda',
                              description='Inference device of the control node (cuda, cpu).'),
        DeclareLaunchArgument('precision', default_value='bfloat16',
                              description='Inference precision (bfloat16, float16, float32).'),
    ]

    simulator = Node(
        package='pi0_ros',
        executable='sim_node',
        name='pi0_sim',
        namespace=namespace,
        output='screen',
        parameters=[{
            'use_sim_time': ParameterValue(use_sim_time, value_type=bool),
            'publish_clock': ParameterValue(use_sim_time, value_type=bool),
            'image_width': ParameterValue(LaunchConfiguration('image_width'), value_type=int),
            'image_height': ParameterValue(LaunchConfiguration('image_height'), value_type=int),
            'camera_rate': ParameterValue(LaunchConfiguration('camera_rate'), value_type=float),
        }],
        arguments=['--ros-args', '--log-level', log_level],
    )

    control = Node(
        package='pi0_ros',
        executable='control_node',
        name='pi0_control',
        namespace=namespace,
        output='screen',
        parameters=[params_file, {
            'use_sim_time': ParameterValue(use_sim_time, value_type=bool),
            'checkpoint': LaunchConfiguration('checkpoint'),
            'device': LaunchConfiguration('device'),
            'precision': LaunchConfiguration('precision'),
        }],
        # Cameras subscribe camera/<name>/image_raw by default, as the simulator publishes.
        remappings=[('joint_trajectory', 'arm_controller/joint_trajectory')],
        arguments=['--ros-args', '--log-level', log_level],
    )

    return LaunchDescription(arguments + [simulator, control])
