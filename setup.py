# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""pip route for pi0_ros; colcon builds the package with CMakeLists.txt (ament_cmake)."""
from setuptools import find_packages, setup

setup(
    name='pi0_ros',
    version='0.1.0',
    description='Real-time Pi0 vision-language-action control for ROS 2 arms.',
    license='Apache-2.0',
    python_requires='>=3.12,<3.13',
    packages=find_packages(include=['pi0_ros', 'pi0_ros.*']),
    # The simulator's MJCF model, meshes and their license.
    package_data={'pi0_ros.sim': ['assets/*', 'assets/*/*', 'assets/*/*/*']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/pi0_ros']),
        ('share/pi0_ros', ['package.xml']),
        ('share/pi0_ros/launch', ['launch/control.launch.py', 'launch/fleet.launch.py',
                                  'launch/sim.launch.py', 'launch/gazebo.launch.py']),
        ('share/pi0_ros/config', ['config/pi0_ros.yaml', 'config/fleet.yaml',
                                  'config/fleet_8_arms.yaml', 'config/example_arm.yaml',
                                  'config/ros2_controllers.yaml',
                                  'config/fastdds_large_images.xml']),
    ],
    zip_safe=False,
    entry_points={
        'console_scripts': [
            'pi0-ros-control = pi0_ros.node:main',
            'pi0-ros-fleet = pi0_ros.fleet:main',
            'pi0-ros-sim = pi0_ros.sim.node:main',
            'pi0-ros-bench = pi0_ros.tools.bench:main',
            'pi0-ros-demo = pi0_ros.tools.demo:main',
            'pi0-ros-recorder = pi0_ros.tools.record:main',
            'pi0-ros-collect = pi0_ros.tools.collect:main',
        ],
    },
)
