# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Several arms on one engine: `ros2 launch pi0_ros fleet.launch.py robots:=arm1,arm2`.

One process (fleet_node) runs a control node per robot, each in the robot's namespace (its
cameras, joint_states, instruction, trajectory output, e-stop, ~/enable and ~/status under
/<robot>/), sharing one engine that batches their observations. params_file applies to every
robot (`/**`); fleet_params_file holds the fleet's own settings and per-robot blocks
(`/arm2/pi0_ros:`). checkpoint, device, precision and use_sim_time override both files only when
given. processes:=2 splits the robots over two such processes (an engine each, on the same GPU):
with 8 arms each process's Python runtime serves half the messages and ticks (docs/fleet.md).
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from pi0_ros.launch_arguments import (fleet_process_remaps, OVERRIDES, parameter_overrides,
                                      parse_processes, parse_robots, split_robots, UNSET_HELP)

ARGUMENTS = [
    ('robots', 'arm1,arm2', 'Robot names, separated by commas: each a namespace of its own'),
    ('processes', '1', 'Fleet processes the robots are split over, each with its own engine'),
    ('params_file', PathJoinSubstitution([FindPackageShare('pi0_ros'), 'config', 'pi0_ros.yaml']),
     "Parameters of every robot's control node"),
    ('fleet_params_file', PathJoinSubstitution([FindPackageShare('pi0_ros'), 'config',
                                                'fleet.yaml']),
     'Parameters of the fleet (batch_wait, max_batch, gpu_memory_budget) and per-robot overrides'),
    ('checkpoint', '', f'LeRobot pi0 checkpoint directory ({UNSET_HELP})'),
    ('device', '', f'Torch device: auto | cpu | cuda | cuda:N ({UNSET_HELP})'),
    ('precision', '', f'Engine precision: auto | fp32 | bf16 | fp16 ({UNSET_HELP})'),
    ('use_sim_time', '', f'Use /clock (simulation time): true | false ({UNSET_HELP})'),
    ('log_level', 'info', 'Log level: debug | info | warn | error'),
    ('trajectory_topic', 'arm_controller/joint_trajectory',
     "Each robot's joint_trajectory_controller input, relative: in the robot's namespace"),
]


def fleet_node(context):
    """Return the fleet processes, with the robots and the overrides of the arguments given."""
    given = {name: LaunchConfiguration(name).perform(context) for name in OVERRIDES}
    robots = parse_robots(LaunchConfiguration('robots').perform(context))
    groups = split_robots(robots, parse_processes(
        LaunchConfiguration('processes').perform(context), robots))
    # No name or namespace here: in a process of several nodes a __node or __ns remapping
    # would rename every one of them (fleet_process_remaps names the fleet node only).
    return [Node(
        package='pi0_ros',
        executable='fleet_node',
        output='screen',
        emulate_tty=True,
        parameters=[LaunchConfiguration('params_file'), LaunchConfiguration('fleet_params_file'),
                    {'robots': group, **parameter_overrides(given)}],
        remappings=[('joint_trajectory', LaunchConfiguration('trajectory_topic')),
                    *fleet_process_remaps(index, len(groups))],
        arguments=['--ros-args', '--log-level', LaunchConfiguration('log_level')],
    ) for index, group in enumerate(groups)]


def generate_launch_description():
    arguments = [DeclareLaunchArgument(name, default_value=default, description=description)
                 for name, default, description in ARGUMENTS]
    return LaunchDescription(arguments + [OpaqueFunction(function=fleet_node)])
