# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Simulated SO-101 (MuJoCo) driven by the pi0_ros control node.

Usage: ros2 launch pi0_ros sim.launch.py checkpoint:=/path/to/pi0 device:=cuda

The simulated cameras default by where inference runs (the `device` argument; empty: whether
CUDA is available): 320x240 at 10 Hz on the CPU, as `make demo` runs, 640x480 at 15 Hz on a GPU.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.substitutions import EnvironmentVariable, LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode, Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

from pi0_ros.launch_arguments import (OVERRIDES, parameter_overrides, sim_camera_settings,
                                      SIM_CAMERAS_CPU, SIM_CAMERAS_GPU, UNSET_HELP)

CAMERA_HELP = {
    name: f'{SIM_CAMERAS_CPU[name]:g} on the CPU, {SIM_CAMERAS_GPU[name]:g} on a GPU'
    for name in SIM_CAMERAS_CPU}


def simulator(context):
    """Return the simulator node, its cameras sized for where inference runs."""
    use_sim_time = LaunchConfiguration('use_sim_time')
    cameras = sim_camera_settings(
        LaunchConfiguration('device').perform(context),
        {name: LaunchConfiguration(name).perform(context) for name in SIM_CAMERAS_CPU})
    return [Node(
        package='pi0_ros',
        executable='sim_node',
        name='pi0_sim',
        namespace=LaunchConfiguration('namespace'),
        output='screen',
        parameters=[{
            'use_sim_time': ParameterValue(use_sim_time, value_type=bool),
            'publish_clock': ParameterValue(use_sim_time, value_type=bool),
            **cameras,
        }],
        arguments=['--ros-args', '--log-level', LaunchConfiguration('log_level')],
    )]


def control_node(context):
    """Return the control node (lifecycle) on the simulator's clock choice, with the arguments."""
    given = {name: LaunchConfiguration(name).perform(context) for name in OVERRIDES}
    return [LifecycleNode(
        package='pi0_ros',
        executable='control_node',
        name='pi0_ros',
        namespace=LaunchConfiguration('namespace'),
        output='screen',
        emulate_tty=True,
        parameters=[LaunchConfiguration('params_file'), parameter_overrides(given)],
        # Cameras subscribe camera/<name>/image_raw by default, as the simulator publishes.
        remappings=[('joint_trajectory', 'arm_controller/joint_trajectory')],
        arguments=['--ros-args', '--log-level', LaunchConfiguration('log_level')],
    )]


def generate_launch_description():
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
        DeclareLaunchArgument('image_width', default_value='',
                              description='Simulated camera image width in pixels (empty: '
                                          f"{CAMERA_HELP['image_width']})."),
        DeclareLaunchArgument('image_height', default_value='',
                              description='Simulated camera image height in pixels (empty: '
                                          f"{CAMERA_HELP['image_height']})."),
        DeclareLaunchArgument('camera_rate', default_value='',
                              description='Simulated camera frames per second (empty: '
                                          f"{CAMERA_HELP['camera_rate']})."),
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

    return LaunchDescription(arguments + [fastdds_profile, OpaqueFunction(function=simulator),
                                          OpaqueFunction(function=control_node)])
