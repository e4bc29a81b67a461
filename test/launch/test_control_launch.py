# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""launch_testing test of control.launch.py, as ROS users run it under `colcon test`.

Runs with `launch_test test/launch/test_control_launch.py`, under `colcon test` (CMake's
add_launch_test) and with `python -m pytest test/launch` where a ROS 2 install provides
launch_testing and the package is built; where launch_testing is absent (the pip environment:
there the integration tests start the node as a process) its tests are collected and skipped.
"""
import os
import tempfile
import unittest

import pytest
from rcl_interfaces.srv import GetParameters
import rclpy

from pi0_ros.msg import PolicyStatus

try:
    import launch_testing
    import launch_testing.actions
    import launch_testing.asserts
    post_shutdown_test = launch_testing.post_shutdown_test
except ImportError:
    launch_testing = None

    def post_shutdown_test():
        return lambda test_case: test_case

needs_launch_testing = pytest.mark.skipif(
    launch_testing is None, reason='launch_testing is not installed (it comes with ROS 2)')

LAUNCH_FILE = os.path.join(os.path.dirname(__file__), '..', '..', 'launch', 'control.launch.py')
# A user's params file: the launch arguments not given must leave its values alone.
PARAMS_FILE = os.path.join(tempfile.mkdtemp(prefix='pi0_ros_launch_test_'), 'params.yaml')
with open(PARAMS_FILE, 'w') as params:
    params.write('/**:\n  ros__parameters:\n    device: cpu\n    precision: fp32\n')


@pytest.mark.launch_test
def generate_test_description():
    import launch
    from launch.actions import IncludeLaunchDescription
    from launch.launch_description_sources import PythonLaunchDescriptionSource

    control = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.abspath(LAUNCH_FILE)),
        launch_arguments={'namespace': 'launch_test', 'params_file': PARAMS_FILE}.items())
    return launch.LaunchDescription([control, launch_testing.actions.ReadyToTest()])


@needs_launch_testing
class TestControlLaunch(unittest.TestCase):
    """The launched node reaches active by itself and reports its status."""

    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node('control_launch_test')

    @classmethod
    def tearDownClass(cls):
        cls.node.destroy_node()
        rclpy.shutdown()

    def test_status_reports_active_lifecycle(self, proc_output):
        received = []
        self.node.create_subscription(PolicyStatus, '/launch_test/pi0_ros/status',
                                      received.append, 10)
        end = self.node.get_clock().now().nanoseconds + 120 * 10**9
        while not received and self.node.get_clock().now().nanoseconds < end:
            rclpy.spin_once(self.node, timeout_sec=0.5)
        self.assertTrue(received, 'no ~/status from the launched node within 120 s')
        self.assertEqual(received[-1].lifecycle_state, 'active')
        proc_output.assertWaitFor('engine ready', timeout=10)

    def test_params_file_values_stand_where_no_argument_overrides_them(self):
        client = self.node.create_client(GetParameters, '/launch_test/pi0_ros/get_parameters')
        self.assertTrue(client.wait_for_service(timeout_sec=120.0))
        request = GetParameters.Request(names=['device', 'precision', 'checkpoint'])
        future = client.call_async(request)
        rclpy.spin_until_future_complete(self.node, future, timeout_sec=10.0)
        values = [value.string_value for value in future.result().values]
        self.assertEqual(values, ['cpu', 'fp32', ''])

    def test_commands_go_to_the_controller_in_the_namespace(self):
        topic = '/launch_test/arm_controller/joint_trajectory'
        names = []
        end = self.node.get_clock().now().nanoseconds + 120 * 10**9
        while topic not in names and self.node.get_clock().now().nanoseconds < end:
            rclpy.spin_once(self.node, timeout_sec=0.5)
            try:
                names = [name for name, _ in self.node.get_publisher_names_and_types_by_node(
                    'pi0_ros', '/launch_test')]
            except rclpy.node.NodeNameNonExistentError:
                names = []  # not discovered yet
        self.assertIn(topic, names)


@needs_launch_testing
@post_shutdown_test()
class TestControlLaunchShutdown(unittest.TestCase):
    """The node exits cleanly when the launch is shut down."""

    def test_exit_code(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0, -2])
