# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""AnyPublisherSubscription: which subscriptions it makes, and each message handled once."""
from rclpy.qos import DurabilityPolicy, ReliabilityPolicy
from std_msgs.msg import Bool

from pi0_ros.qos import AnyPublisherSubscription


class RecordingNode:
    """Stands in for a node: records the subscriptions asked for."""

    def __init__(self):
        self.created = []

    def create_subscription(self, msg_type, topic, callback, qos, *, callback_group,
                            event_callbacks):
        self.created.append((topic, qos, event_callbacks))
        return callback


def info(source_timestamp, sequence):
    return {'source_timestamp': source_timestamp, 'publication_sequence_number': sequence,
            'received_timestamp': 0, 'reception_sequence_number': None}


def test_every_kind_of_publisher_has_a_subscription_it_matches():
    node = RecordingNode()
    AnyPublisherSubscription(node, Bool, '~/estop', print, None, incompatible='warn')
    kinds = [(qos.reliability, qos.durability) for _, qos, _ in node.created]
    assert kinds == [(ReliabilityPolicy.RELIABLE, DurabilityPolicy.TRANSIENT_LOCAL),
                     (ReliabilityPolicy.RELIABLE, DurabilityPolicy.VOLATILE),
                     (ReliabilityPolicy.BEST_EFFORT, DurabilityPolicy.VOLATILE)]
    # Only the most permissive one reports a publisher nothing can hear.
    assert [events for _, _, events in node.created][-1] == 'warn'
    assert all(events != 'warn' for _, _, events in node.created[:-1])
    ordered = RecordingNode()
    AnyPublisherSubscription(ordered, Bool, 'instruction', print, None, best_effort=False)
    assert [qos.reliability for _, qos, _ in ordered.created] == [ReliabilityPolicy.RELIABLE] * 2


def test_a_message_heard_through_several_subscriptions_is_handled_once():
    node = RecordingNode()
    handled = []
    subscription = AnyPublisherSubscription(node, Bool, '~/estop', handled.append, None)
    first, second = Bool(data=True), Bool(data=False)
    for deliver in subscription.subscriptions:          # a latched publisher matches all three
        deliver(first, info(100, 1))
    for deliver in subscription.subscriptions[1:]:
        deliver(second, info(200, 2))
    subscription.subscriptions[0](second, info(200, 2))
    assert handled == [first, second]
    # Another publisher's message with the same sequence number is a different message.
    subscription.subscriptions[1](first, info(150, 1))
    assert handled == [first, second, first]


def test_without_a_source_timestamp_every_copy_is_handled():
    node = RecordingNode()
    handled = []
    subscription = AnyPublisherSubscription(node, Bool, '~/estop', handled.append, None)
    for deliver in subscription.subscriptions:
        deliver(Bool(data=True), info(0, None))
    assert len(handled) == 3
