# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: isolated ROS 2 domains, package executables as processes, rclpy in the test."""
import os
from pathlib import Path

import pytest

from pi0_ros.executors import freeze_loaded_objects
from pi0_ros.tools.domain import claim_domain_id, release_domain_id
from rosutil import RosProcess, RosTestNode

# Tests and the processes they start discover each other on this host only.
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
os.environ.setdefault('MUJOCO_GL', 'egl')
# Fast DDS's default transports, on purpose for now: with them most 640x480 frames are lost
# (docs/reliability.md), and rarely, with a busy core, no complete camera set reaches the node for
# seconds (the node then holds: 'observation stale'). The package's shared-memory profile fixed
# that but, with the test process publishing cameras and joint states from one participant,
# starved the joint states instead (three failures in one fresh-clone run): the feeder needs its
# joint states on a participant of their own first, as the soak's feeders have.

# test/launch/ holds launch_testing tests: pytest runs them where launch_testing is installed
# (its pytest plugin) and skips them where it is not. Under `colcon test` CMake's add_launch_test
# runs them as their own test, so the pytest suite that CMake starts leaves them out.
if os.environ.get('PI0_ROS_LAUNCH_TESTS_RUN_SEPARATELY'):
    collect_ignore_glob = ['launch/*']


def _has_cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    """Skip `gpu` tests where CUDA is absent (they run on the lent GPU machine)."""
    if _has_cuda():
        return
    skip_gpu = pytest.mark.skip(reason='needs CUDA (run through the device tool)')
    for item in items:
        if 'gpu' in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def ros_domain_id():
    """Yield a ROS_DOMAIN_ID that no other test, demo or soak on this machine uses meanwhile."""
    domain_id = claim_domain_id()
    try:
        yield domain_id
    finally:
        release_domain_id(domain_id)


@pytest.fixture
def ros_node(ros_domain_id):
    """Yield an rclpy node of the test process in its own context on the test's domain."""
    # This process must take what a node publishes as it comes: commands go out with depth 1
    # (COMMAND_QOS), so while it pauses they are replaced before it reads them. Full passes of
    # its garbage collector over what the suite has loaded took 75-285 ms here with a core kept
    # busy (a fresh-clone CI run lost 0.33 s of commands): frozen out of the passes.
    freeze_loaded_objects()
    node = RosTestNode(ros_domain_id)
    try:
        yield node
    finally:
        node.close()


@pytest.fixture
def start_process(ros_domain_id, tmp_path):
    """Start package executables as separate processes; all are stopped at teardown."""
    processes = []

    def start(module, *, parameters=None, args=(), env=None, name=None):
        process = RosProcess(module, domain_id=ros_domain_id, parameters=parameters, args=args,
                             env=env, log_path=tmp_path / f'{name or Path(str(module)).stem}.log')
        processes.append(process)
        return process

    yield start
    for process in reversed(processes):
        process.stop()
