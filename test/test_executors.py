# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The control timer's own thread, and the fleet's control timers shared per period.

The thread: only it runs its group, it stops, it reports, its priority.
"""
import ctypes
import gc
import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace
import weakref

import pytest
import rclpy
from rclpy.clock import Clock, ClockType
from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor

from pi0_ros.executors import (CallbackGroupThread, freeze_loaded_objects, MALLOC_ENVIRONMENT,
                               set_realtime_priority, SharedControlTimers, SHUTDOWN_GRACE_S,
                               spin_until_shutdown, ThreadBoundCallbackGroup,
                               unfreeze_and_collect)

PERIOD = 0.01


@pytest.fixture
def node(ros_node):
    """Yield a bare node in the test's own context (not spun by anything yet)."""
    node = rclpy.create_node('executors_test', context=ros_node.context)
    yield node
    node.destroy_node()


def spin_for(executor, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.01)


def call_log(calls):
    """Return a timer callback that records the thread it runs on."""
    return lambda: calls.append(threading.get_ident())


@pytest.mark.parametrize('executor_class', [SingleThreadedExecutor, MultiThreadedExecutor])
def test_bound_group_runs_on_its_thread_only_while_the_executor_runs_the_rest(
        node, executor_class):
    bound, other = [], []
    group = ThreadBoundCallbackGroup()
    node.create_timer(PERIOD, call_log(bound), callback_group=group)
    node.create_timer(PERIOD, call_log(other))
    executor = executor_class(context=node.context)
    executor.add_node(node)
    control = CallbackGroupThread(node, group, name='test_control')
    control.start()
    try:
        spin_for(executor, 0.5)
    finally:
        assert control.stop()
        executor.shutdown()
    assert len(bound) >= 20 and len(other) >= 20
    assert group.bound and set(bound) == {group.thread_id}
    assert group.thread_id not in other


def test_unbound_group_is_never_executed(node):
    calls = []
    node.create_timer(PERIOD, call_log(calls), callback_group=ThreadBoundCallbackGroup())
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    spin_for(executor, 0.2)
    executor.shutdown()
    assert calls == []


def test_released_group_is_an_ordinary_group_of_the_executor(node):
    calls = []
    group = ThreadBoundCallbackGroup()
    node.create_timer(PERIOD, call_log(calls), callback_group=group)
    group.release()
    assert not group.bound and group.thread_id is None
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    spin_for(executor, 0.2)
    executor.shutdown()
    assert len(calls) >= 5 and set(calls) == {threading.get_ident()}


def test_stop_ends_the_thread_and_its_callbacks(node):
    calls = []
    group = ThreadBoundCallbackGroup()
    node.create_timer(PERIOD, call_log(calls), callback_group=group)
    control = CallbackGroupThread(node, group, name='test_control')
    control.start()
    deadline = time.monotonic() + 5.0
    while len(calls) < 5 and time.monotonic() < deadline:
        time.sleep(PERIOD)
    assert control.stop(timeout=5.0)
    count = len(calls)
    time.sleep(5 * PERIOD)
    assert len(calls) == count >= 5
    assert not any(t.name == 'test_control' for t in threading.enumerate())
    assert control.stop()   # a second stop is harmless


def test_a_raising_callback_stops_the_thread_and_is_reported(node):
    reported = []
    group = ThreadBoundCallbackGroup()

    def fail():
        raise RuntimeError('tick failed')
    node.create_timer(PERIOD, fail, callback_group=group)
    control = CallbackGroupThread(node, group, name='test_control', on_error=reported.append)
    control.start()
    deadline = time.monotonic() + 5.0
    while not reported and time.monotonic() < deadline:
        time.sleep(PERIOD)
    assert [str(e) for e in reported] == ['tick failed']
    assert control.error is reported[0]
    assert control.stop(timeout=5.0)


def test_normal_priority_unless_asked(node):
    policies = []
    group = ThreadBoundCallbackGroup()
    node.create_timer(PERIOD, lambda: policies.append(os.sched_getscheduler(0)),
                      callback_group=group)
    control = CallbackGroupThread(node, group, name='test_control', priority=0)
    control.start()
    deadline = time.monotonic() + 5.0
    while not policies and time.monotonic() < deadline:
        time.sleep(PERIOD)
    assert control.stop()
    assert control.priority_error == ''
    assert policies and set(policies) == {os.SCHED_OTHER}


def test_real_time_priority_where_permitted_and_never_inherited(node):
    seen = {}
    group = ThreadBoundCallbackGroup()

    def tick():
        if 'thread' not in seen:
            seen['thread'] = os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK
            seen['priority'] = os.sched_getparam(0).sched_priority
            child = threading.Thread(
                target=lambda: seen.setdefault('child', os.sched_getscheduler(0)))
            child.start()
            child.join()
    node.create_timer(PERIOD, tick, callback_group=group)
    control = CallbackGroupThread(node, group, name='test_control', priority=5)
    control.start()
    deadline = time.monotonic() + 5.0
    while 'child' not in seen and time.monotonic() < deadline:
        time.sleep(PERIOD)
    assert control.stop()
    if control.priority_error:
        # Not permitted here (no CAP_SYS_NICE, rtprio limit 0): the thread runs normally.
        assert 'Operation not permitted' in control.priority_error or \
            'AttributeError' in control.priority_error, control.priority_error
        assert seen['thread'] == os.SCHED_OTHER
    else:
        assert seen['thread'] == os.SCHED_FIFO and seen['priority'] == 5
    # A thread started from it never inherits a real-time policy.
    assert seen['child'] == os.SCHED_OTHER


def test_refused_priority_leaves_the_thread_at_normal_priority(node, monkeypatch):
    def refuse(*args):
        raise PermissionError(1, 'Operation not permitted')
    monkeypatch.setattr(os, 'sched_setscheduler', refuse)
    calls = []
    group = ThreadBoundCallbackGroup()
    node.create_timer(PERIOD, call_log(calls), callback_group=group)
    control = CallbackGroupThread(node, group, name='test_control', priority=50)
    control.start()
    deadline = time.monotonic() + 5.0
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(PERIOD)
    assert control.stop()
    assert control.priority_error == 'PermissionError: [Errno 1] Operation not permitted'
    assert len(calls) >= 3


def test_refused_priority_is_a_reason_not_an_exception():
    result = []
    # Priority 0 is not a valid SCHED_FIFO priority: refused by the kernel with EINVAL.
    thread = threading.Thread(target=lambda: result.append(set_realtime_priority(0)))
    thread.start()
    thread.join()
    assert result[0].startswith('OSError')


def test_spin_until_shutdown_ends_quietly_on_shutdown_races_only():
    """A signal mid-take can make rclpy raise RuntimeError just before the context goes down."""
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=0)

    def executor(error):
        def spin():
            raise error
        return SimpleNamespace(context=context, spin=spin)

    spin_until_shutdown(executor(KeyboardInterrupt()))
    start = time.monotonic()
    with pytest.raises(RuntimeError, match='take'):
        spin_until_shutdown(executor(RuntimeError('take failed')))  # the context stays up
    assert time.monotonic() - start >= SHUTDOWN_GRACE_S
    threading.Timer(0.05, context.shutdown).start()  # the signal's shutdown, a moment later
    spin_until_shutdown(executor(RuntimeError('Unable to convert call argument')))
    assert not context.ok()
    spin_until_shutdown(executor(RuntimeError('context is not valid')))  # already down


def serve(node, group, seconds):
    """Run `group` of `node` on a CallbackGroupThread for `seconds`."""
    control = CallbackGroupThread(node, group, name='test_control')
    control.start()
    time.sleep(seconds)
    assert control.stop()


def test_control_timers_of_one_period_and_clock_share_one_timer_ticking_them_in_turn(node):
    timers = SharedControlTimers(node, ThreadBoundCallbackGroup())
    calls = []
    arm1 = timers.create_timer(PERIOD, lambda: calls.append('arm1'), node.get_clock())
    arm2 = timers.create_timer(PERIOD, lambda: calls.append('arm2'), node.get_clock())
    timers.create_timer(2 * PERIOD, lambda: calls.append('slow'), node.get_clock())
    steady = Clock(clock_type=ClockType.STEADY_TIME)
    timers.create_timer(PERIOD, lambda: calls.append('steady'), steady)
    assert len(list(node.timers)) == 3  # arm1 and arm2 share one
    until = [share.time_until_next_call() for share in (arm1, arm2)]
    assert 0 <= until[0] <= PERIOD * 1e9 and abs(until[0] - until[1]) < 1e6  # ns
    serve(node, timers.group, 0.5)
    shared = [name for name in calls if name in ('arm1', 'arm2')]
    assert len(shared) >= 40
    assert shared[0::2] == ['arm1'] * len(shared[0::2])  # each tick: arm1, then arm2
    assert shared[1::2] == ['arm2'] * len(shared[1::2])
    assert calls.count('steady') >= 20 and 10 <= calls.count('slow') < calls.count('steady')


def test_destroying_a_share_leaves_the_others_ticking_and_the_last_removes_the_timer(node):
    timers = SharedControlTimers(node, ThreadBoundCallbackGroup())
    calls = []
    arm1 = timers.create_timer(PERIOD, lambda: calls.append('arm1'), node.get_clock())
    arm2 = timers.create_timer(PERIOD, lambda: calls.append('arm2'), node.get_clock())
    arrived = timers.create_guard_condition(lambda: calls.append('chunk'))
    timers.destroy(arm1)
    arrived.trigger()
    serve(node, timers.group, 0.2)
    assert calls.count('arm2') >= 10 and 'arm1' not in calls and calls.count('chunk') == 1
    timers.destroy(arm2)
    timers.destroy(arrived)
    assert list(node.timers) == [] and list(node.guards) == []
    assert arm2.time_until_next_call() is None
    timers.destroy(arm2)  # a second destroy is harmless


MAPPED_BLOCKS = """
import ctypes, sys
import numpy as np
from pi0_ros.executors import reuse_large_allocations


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        'arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks', 'fsmblks', 'uordblks',
        'fordblks', 'keepcost')]


libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] != 'plain':
    assert reuse_large_allocations() == (sys.argv[1] == 'tuned')
before = libc.mallinfo2().hblks
frame = np.ones(8_000_000, np.uint8)  # the first buffer of its size: mapped by default
print(libc.mallinfo2().hblks - before)
"""


@pytest.mark.parametrize('case, environment, mapped', [
    ('plain', {}, 1), ('tuned', {}, 0),
    # The process's own malloc settings win (here a tunable at its default value).
    ('kept', {'GLIBC_TUNABLES': 'glibc.malloc.mmap_max=65536'}, 1)])
def test_large_buffers_come_from_the_heap_once_reuse_is_set(case, environment, mapped):
    if not hasattr(ctypes.CDLL(None), 'mallinfo2'):
        pytest.skip('needs glibc 2.33 or newer')
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENVIRONMENT}
    output = subprocess.run([sys.executable, '-c', MAPPED_BLOCKS, case], capture_output=True,
                            text=True, timeout=60, check=True, env={**env, **environment}).stdout
    assert int(output.strip()) == mapped  # mmapped blocks the 8 MB frame added


class Loaded:
    """An object of a loaded engine; two of them in a cycle."""


def test_loaded_objects_are_left_out_of_collections_until_unfrozen():
    first, second = Loaded(), Loaded()
    first.other, second.other = second, first
    alive = weakref.ref(first)
    try:
        assert freeze_loaded_objects() >= 2
        # Neither walked by a pass (gc.get_objects lists what the passes walk) nor freed by one,
        # not even when only their cycle holds them.
        assert not any(o is first for o in gc.get_objects())
        del first, second
        gc.collect()
        assert alive() is not None
    finally:
        unfreeze_and_collect()
    assert alive() is None
