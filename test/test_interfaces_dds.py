# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The generated interfaces travel over real DDS between two processes."""
from pathlib import Path

import pytest

from pi0_ros.msg import ActionChunk, PolicyStatus
from publish_action_chunk import build_reference_chunk, TOPIC

pytestmark = pytest.mark.integration


def test_action_chunk_round_trip_between_processes(start_process, ros_node):
    publisher = start_process(Path(__file__).with_name('publish_action_chunk.py'))
    received = ros_node.collect(ActionChunk, TOPIC)

    assert ros_node.spin_until(lambda: received, timeout=30.0, process=publisher), \
        publisher.output()

    got = received[0][1]
    expected = build_reference_chunk()
    fields = ActionChunk.get_fields_and_field_types()
    assert set(fields) == {
        'header', 'joint_names', 'dt', 'horizon', 'actions', 'sequence', 'instruction_epoch',
        'preprocess_ms', 'vision_ms', 'prefix_ms', 'denoise_ms', 'total_ms', 'vision_cache_hits'}
    for field in fields:
        value, want = getattr(got, field), getattr(expected, field)
        if field == 'actions':
            assert list(value) == list(want)
        else:
            assert value == want, field
    assert publisher.stop() == 0, publisher.output()


def test_policy_status_constants_are_generated():
    assert PolicyStatus.ENGINE_FAILED != PolicyStatus.ENGINE_RUNNING
    assert PolicyStatus.OUTPUT_ESTOP != PolicyStatus.OUTPUT_HOLDING
    status = PolicyStatus(inference_latency_p99_ms=12.5, inputs_rejected=3)
    assert status.inference_latency_p99_ms == 12.5
    assert status.inputs_rejected == 3
