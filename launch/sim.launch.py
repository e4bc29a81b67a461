# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Simulated SO-101 (MuJoCo) driven by the pi0_ros control node.

Usage: ros2 launch pi0_ros sim.launch.py checkpoint:=/path/to/pi0 device:=cuda
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.substitutions import EnvironmentVariable, LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

from pi0_ros.launch_arguments import OVERRIDES, parameter_overrides, UNSET_HELP


def control_node(context):
    """Return the control node on the simulator's clock choice, with the arguments given."""
    given = {name: LaunchConfiguration(name).perform(context) for name in OVERRIDES}
    return [Node(
        package='pi0_ros',
        executable='control_node',
        name='pi0_ros',
        namespace=LaunchConfiguration('namespace'),
        output='screen',
        parameters=[LaunchConfiguration('params_file'), parameter_overrides(given)],
        # Cameras subscribe camera/<name>/image_raw by default, as the simulator publishes.
        remappings=[('joint_trajectory', 'arm_controller/joint_trajectory')],
        arguments=['--ros-args', '--log-level', LaunchConfiguration('log_level')],
    )]


def generate_launch_description():
    namespace = LaunchConfiguration('namespace')
    use_sim_time = LaunchConfiguration('use_sim_time')
    log_level = LaunchConfiguration('log_level')

    arguments = [
        DeclareLaunchArgument('namespace', default_value='',
                              description='Namespace of the simulator and the control node.'),
        DeclareLaunchArgument('params_file',
                              default_value=PathJoinSubstitution(
                                  [FindPackageShare('pi0_ros'), 'config', 'pi0_ros.yaml']),
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
                              description=f'LeRobot pi0 checkpoint directory ({UNSET_HELP}; '
                                          'its default, empty, is the built-in random tiny '
                                          'model).'),
        DeclareLaunchArgument('device', default_value='',
                              description=f'Torch device: auto | cpu | cuda | cuda:N '
                                          f'({UNSET_HELP}).'),
        DeclareLaunchArgument('precision', default_value='',
                              description=f'Engine precision: auto | fp32 | bf16 | fp16 '
                                          f'({UNSET_HELP}).'),
    ]

    # Both ends of the camera topics are launched here, so the package's Fast DDS profile (a
    # shared-memory segment for camera-sized frames; with the default transports most frames
    # are lost on one host) applies to both, unless the variable already names a profile.
    fastdds_profile = SetEnvironmentVariable(
        'FASTRTPS_DEFAULT_PROFILES_FILE',
        EnvironmentVariable('FASTRTPS_DEFAULT_PROFILES_FILE', default_value=PathJoinSubstitution(
            [FindPackageShare('pi0_ros'), 'config', 'fastdds_large_images.xml'])))

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

    return LaunchDescription(arguments + [fastdds_profile, simulator,
                                          OpaqueFunction(function=control_node)])
