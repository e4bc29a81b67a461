# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
QoS of the node's streams, and subscriptions that hear every publisher of a command topic.

A DDS subscription only matches publishers that offer at least what it requests: a transient-local
subscription never hears a volatile publisher (the default of rclpy, rclcpp, rqt and most safety
bridges), and a reliable one never hears a best-effort publisher. `BEST_AVAILABLE` does not help a
node that starts first: its policies are fixed when the subscription is created, from the
publishers discovered by then (none: transient local and reliable). So a command topic that must
be heard from any publisher (the e-stop, the instruction) gets one subscription per kind of
publisher, and `AnyPublisherSubscription` passes each message on once.
"""
from collections import deque

from rclpy.event_handler import PublisherEventCallbacks, SubscriptionEventCallbacks
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, qos_policy_name_from_kind,
                       qos_profile_sensor_data, QoSProfile, ReliabilityPolicy)

LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL, history=HistoryPolicy.KEEP_LAST)
COMMAND_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
REPORT_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
# What a subscription to a command topic requests, one per kind of publisher: transient local
# (its last message reaches a node started later), reliable volatile, best-effort volatile.
VOLATILE_RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                               durability=DurabilityPolicy.VOLATILE)
VOLATILE_BEST_EFFORT = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT,
                                  durability=DurabilityPolicy.VOLATILE)
# No QoS event handlers (rclpy makes two per publisher and subscription by default, to warn of an
# incompatible QoS or type). Each handler is a waitable that every wait of the executor adds,
# counts and checks: with 4 robots' nodes on one executor, rclpy's handlers were a third of its
# CPU time (benchmarks/executor_scaling.py, record executor-scaling-cpu). For subscriptions that
# some publishers cannot match by design, and for report publishers, whose subscribers warn of a
# mismatch on their side.
NO_SUBSCRIPTION_EVENTS = SubscriptionEventCallbacks(use_default_callbacks=False)
NO_PUBLISHER_EVENTS = PublisherEventCallbacks(use_default_callbacks=False)


def sensor_qos(reliability):
    """Return the QoS of a sensor stream: SensorDataQoS, or reliable keep-last 5."""
    if reliability == 'reliable':
        return QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE)
    return qos_profile_sensor_data


def warn_incompatible_publishers(logger, topic, throttle_s):
    """Return event callbacks that log (throttled) a publisher on `topic` that goes unheard."""
    def incompatible_qos(info):
        policy = qos_policy_name_from_kind(info.last_policy_kind)
        logger.warning(
            f"a publisher on '{topic}' offers a QoS this subscription cannot match ({policy}): "
            'its messages never arrive; match the publisher or the reliability parameter',
            throttle_duration_sec=throttle_s)
    return SubscriptionEventCallbacks(incompatible_qos=incompatible_qos)


class AnyPublisherSubscription:
    """
    Subscriptions to one topic that together match every publisher, each message handled once.

    A transient-local reliable publisher matches all of them, so its messages arrive up to three
    times; they are recognized by the publisher's source timestamp and sequence number and passed
    to `callback` only the first time. Reliable publishers lose nothing on their way, so their
    messages reach `callback` in publication order. `best_effort=False` leaves out the
    best-effort subscription (for a topic whose order matters, like the instruction: a message a
    best-effort reader lost could arrive later through another one). The callbacks must share a
    mutually exclusive `callback_group`. `incompatible` (event callbacks) goes to the most
    permissive subscription: a publisher that it cannot match is heard by none. The stricter ones
    have no event handlers.
    """

    REMEMBERED = 64  # recent messages recognized as duplicates

    def __init__(self, node, msg_type, topic, callback, callback_group, *, incompatible=None,
                 best_effort=True):
        self._callback = callback
        self._seen = deque(maxlen=self.REMEMBERED)
        profiles = [LATCHED, VOLATILE_RELIABLE] + ([VOLATILE_BEST_EFFORT] if best_effort else [])
        # A publisher is incompatible with the stricter ones by design: no warning for that.
        events = [NO_SUBSCRIPTION_EVENTS] * (len(profiles) - 1) \
            + [incompatible or NO_SUBSCRIPTION_EVENTS]
        self.subscriptions = [
            node.create_subscription(msg_type, topic, self._on_message, profile,
                                     callback_group=callback_group, event_callbacks=event)
            for profile, event in zip(profiles, events)]

    def _on_message(self, msg, info):
        key = (info.get('source_timestamp'), info.get('publication_sequence_number'))
        if key[0]:   # a middleware that gives no source timestamp: every copy is passed on
            if key in self._seen:
                return
            self._seen.append(key)
        self._callback(msg)
