# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
How many camera frames reach a bare subscriber from the soak's camera feeder (no control node).

    python benchmarks/control_rate/camera_intake.py [--seconds 10]

Starts `python -m pi0_ros.tools.soak --feeder cameras` (three 640x480 rgb8 cameras at 30 Hz, published
back to back) on a ROS domain of its own and counts what a best-effort subscriber with the
node's QoS (sensor data, depth 5) receives per camera, after a 3 s warm-up. The middleware
settings come from the environment, e.g. FASTRTPS_DEFAULT_PROFILES_FILE.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

CAMERAS = ('front', 'side', 'wrist')


def main():
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--seconds', type=float, default=10.0, help='counting time after warm-up')
    args = parser.parse_args()

    from pi0_ros.tools.domain import claim_domain_id, release_domain_id
    domain_id = claim_domain_id()
    os.environ['ROS_DOMAIN_ID'] = str(domain_id)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    import rclpy
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    feeder = subprocess.Popen([sys.executable, '-m', 'pi0_ros.tools.soak', '--feeder', 'cameras'],
                              start_new_session=True)
    rclpy.init()
    node = rclpy.create_node('camera_intake')
    counts = dict.fromkeys(CAMERAS, 0)

    def count(camera):
        return lambda msg: counts.__setitem__(camera, counts[camera] + 1)
    for camera in CAMERAS:
        node.create_subscription(Image, f'camera/{camera}/image_raw', count(camera),
                                 qos_profile_sensor_data)
    try:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
        start, started = dict(counts), time.monotonic()
        while time.monotonic() - started < args.seconds:
            rclpy.spin_once(node, timeout_sec=0.05)
        elapsed = time.monotonic() - started
    finally:
        feeder.send_signal(signal.SIGINT)
        feeder.wait(timeout=10.0)
        node.destroy_node()
        rclpy.try_shutdown()
        release_domain_id(domain_id)
    received = {c: round((counts[c] - start[c]) / elapsed, 1) for c in CAMERAS}
    print(json.dumps({'published_hz_per_camera': 30.0, 'received_hz': received,
                      'profiles_file': os.environ.get('FASTRTPS_DEFAULT_PROFILES_FILE')}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
