# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Example: an arm in Gazebo (gz_ros2_control + joint_trajectory_controller) driven by pi0_ros.

Not run in this repository's CI (Gazebo and ros2_control do not install from PyPI); it is written
for a ROS 2 Jazzy install with ros_gz, gz_ros2_control, ros2_controllers and xacro. Your robot's
URDF/xacro (argument `robot_description_file`) must contain a <ros2_control> block with the
`gz_ros2_control/GazeboSimSystem` hardware, position command interfaces for the joints in
config/ros2_controllers.yaml, the `gz_ros2_control-system` Gazebo plugin with that controllers
file in its <parameters> element (the controller manager runs inside Gazebo and takes its update
rate and the controllers' types from there, not from the spawners below), and three Gazebo camera
sensors whose image topics are bridged below.
"""
from launch import LaunchDescription
from launch.actions import (DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction,
                            RegisterEventHandler)
from launch.event_handlers import OnProcessExit
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import Command, LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

from pi0_ros.launch_arguments import OVERRIDES, parameter_overrides, UNSET_HELP

ARGUMENTS = [
    ('robot_description_file', '', 'URDF or xacro of the arm with a <ros2_control> block'),
    ('world', 'empty.sdf', 'Gazebo world'),
    ('controllers_file', PathJoinSubstitution([FindPackageShare('pi0_ros'), 'config',
                                               'ros2_controllers.yaml']),
     'ros2_control controller configuration'),
    ('params_file', PathJoinSubstitution([FindPackageShare('pi0_ros'), 'config', 'pi0_ros.yaml']),
     'Parameters of the pi0_ros control node'),
    ('checkpoint', '', f'LeRobot pi0 checkpoint directory ({UNSET_HELP}; its default, empty, '
                       'is the built-in random tiny model)'),
    ('device', '', f'Torch device: auto | cpu | cuda | cuda:N ({UNSET_HELP})'),
    ('precision', '', f'Engine precision: auto | fp32 | bf16 | fp16 ({UNSET_HELP})'),
]


def policy_node(context):
    """Return the control node on Gazebo's clock, with the launch arguments given."""
    given = {name: LaunchConfiguration(name).perform(context) for name in OVERRIDES
             if name != 'use_sim_time'}
    return [Node(
        package='pi0_ros', executable='control_node', name='pi0_ros', output='screen',
        parameters=[LaunchConfiguration('params_file'),
                    {**parameter_overrides(given), 'use_sim_time': True}],
        remappings=[('joint_trajectory', 'arm_controller/joint_trajectory')])]


def generate_launch_description():
    arguments = [DeclareLaunchArgument(name, default_value=default, description=description)
                 for name, default, description in ARGUMENTS]
    robot_description = ParameterValue(
        Command(['xacro ', LaunchConfiguration('robot_description_file')]), value_type=str)
    gazebo = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(PathJoinSubstitution(
            [FindPackageShare('ros_gz_sim'), 'launch', 'gz_sim.launch.py'])),
        launch_arguments={'gz_args': ['-r ', LaunchConfiguration('world')]}.items())
    state_publisher = Node(package='robot_state_publisher', executable='robot_state_publisher',
                           parameters=[{'robot_description': robot_description,
                                        'use_sim_time': True}])
    spawn = Node(package='ros_gz_sim', executable='create', output='screen',
                 arguments=['-topic', 'robot_description', '-name', 'arm'])
    joint_state_broadcaster = Node(package='controller_manager', executable='spawner',
                                   arguments=['joint_state_broadcaster'])
    arm_controller = Node(package='controller_manager', executable='spawner',
                          arguments=['arm_controller', '--param-file',
                                     LaunchConfiguration('controllers_file')])
    # Gazebo -> ROS: the clock and the three cameras (remapped to pi0_ros's camera topics).
    bridge = Node(
        package='ros_gz_bridge', executable='parameter_bridge', output='screen',
        arguments=['/clock@rosgraph_msgs/msg/Clock[gz.msgs.Clock',
                   'front/image@sensor_msgs/msg/Image[gz.msgs.Image',
                   'side/image@sensor_msgs/msg/Image[gz.msgs.Image',
                   'wrist/image@sensor_msgs/msg/Image[gz.msgs.Image'],
        remappings=[('front/image', 'camera/front/image_raw'),
                    ('side/image', 'camera/side/image_raw'),
                    ('wrist/image', 'camera/wrist/image_raw')])
    # Controllers start once the robot exists; the policy once its controller is loaded.
    return LaunchDescription(arguments + [
        gazebo, state_publisher, spawn, bridge,
        RegisterEventHandler(OnProcessExit(target_action=spawn,
                                           on_exit=[joint_state_broadcaster])),
        RegisterEventHandler(OnProcessExit(target_action=joint_state_broadcaster,
                                           on_exit=[arm_controller])),
        RegisterEventHandler(OnProcessExit(target_action=arm_controller,
                                           on_exit=[OpaqueFunction(function=policy_node)])),
    ])
