# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Executors of the control node: one for the inputs, and a dedicated thread for the control timer.

rclcpp can hand one callback group of a node to an executor of its own
(`Executor::add_callback_group`), so that a control timer never waits behind the node's other
callbacks and its thread can run at a real-time priority. rclpy (Jazzy) has no such call: a node
belongs to one executor. `CallbackGroupThread` provides it: a thread with its own executor that
waits on the entities of one `ThreadBoundCallbackGroup` only, and that group refuses every other
thread, so whatever executor spins the node (single- or multi-threaded, `rclpy.spin`) leaves its
callbacks to the dedicated thread.
"""
import ctypes
import gc
import os
import threading
import time

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.executors import (ConditionReachedException, ExternalShutdownException,
                             MultiThreadedExecutor, ShutdownException, SingleThreadedExecutor,
                             TimeoutException)

# The GIL is handed over sooner than Python's 5 ms (sys.setswitchinterval, set by the node's and
# the fleet's main): the control thread, which the OS runs at once (real-time priority), waits at
# most about this long for the GIL held by the inference or the executor thread, at wake-up and
# while it computes a tick. Measured on 2 cores with CPU inference: 0.2 ms gave a node p99 period
# jitter of 1.3 ms, 0.5 ms 1.7 ms, 1 ms 1.6-1.8 ms (benchmarks/RESULTS.md: control-rate-cpu).
SWITCH_INTERVAL_S = 0.0002

# glibc malloc (mallopt): buffers up to MMAP_THRESHOLD_BYTES come from the heap instead of an
# mmap each, and freed memory goes back to the system only past TRIM_THRESHOLD_BYTES at the top.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES = 16 * 1024 * 1024  # a 1080p RGB frame is 6.2 MB
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024
# A process started with its own malloc settings keeps them.
MALLOC_ENVIRONMENT = ('MALLOC_MMAP_THRESHOLD_', 'MALLOC_TRIM_THRESHOLD_', 'GLIBC_TUNABLES')


def reuse_large_allocations():
    """
    Let the process reuse its large buffers (glibc malloc); return whether it took.

    Every camera message is allocated and freed several times on its way in (DDS, the C
    message, the Python one). By default glibc maps and unmaps such buffers or trims the heap
    after them, and each new buffer then faults its pages in again, while the executor holds
    the GIL. With 4 stand-in robots of 3x 640x480 cameras at 30 Hz on 2 cores (record
    executor-scaling-large-frames-cpu) it cut the process's CPU by a sixth and the messages'
    delay p99 from 17.3 to 6.1 ms. False where the C library has no mallopt (not glibc), and
    where the environment sets malloc itself (MALLOC_ENVIRONMENT): those settings win.
    """
    if any(name in os.environ for name in MALLOC_ENVIRONMENT):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
            and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1)


def freeze_loaded_objects():
    """
    Collect once, then leave every object alive now out of later collections; return how many.

    A full pass of Python's cyclic garbage collector walks every tracked object holding the GIL.
    With an engine loaded (torch, the model, rclpy) that is ~240k objects: ~105 ms on an idle
    core of a 2-core machine, more on a busy one, and the control thread waits for the GIL
    meanwhile. Frozen (gc.freeze), they are left out of every pass; reference counting still
    frees them. Call it once the engine is ready, and `unfreeze_and_collect` when it is torn down.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def unfreeze_and_collect():
    """Give the frozen objects back to the collector and collect (a torn-down engine's cycles)."""
    gc.unfreeze()
    gc.collect()


def make_executor(threads):
    """
    Return the executor for the node's inputs: single-threaded unless `executor_threads` > 0.

    Every callback here only converts, validates and stores (inference has its own thread, the
    control timer too where it may run at real-time priority, see CallbackGroupThread), so one
    executor thread is enough; on 2 cores rclpy's MultiThreadedExecutor spent ~20 % of a core
    dispatching and the control timer on it lost 8-15 % of its ticks while inference ran.
    """
    if threads > 0:
        return MultiThreadedExecutor(num_threads=threads)
    return SingleThreadedExecutor()


# How long an error raised by a spinning executor may precede the context's shutdown and still
# count as part of it (see spin_until_shutdown).
SHUTDOWN_GRACE_S = 0.5


def spin_until_shutdown(executor):
    """
    Spin until Ctrl-C or the context's shutdown, both of which end it quietly.

    A SIGINT or SIGTERM that arrives while the executor takes a message or is between two
    waits can make rclpy raise RCLError or RuntimeError instead of ExternalShutdownException;
    if the context goes down within SHUTDOWN_GRACE_S of such an error (rclpy's signal handler
    shuts it down, at times just after), it counts as shutdown too. Any other error propagates.
    """
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:  # noqa: B902 - re-raised unless the context is being shut down
        deadline = time.monotonic() + SHUTDOWN_GRACE_S
        while executor.context.ok():
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def set_realtime_priority(priority):
    """
    Run the calling thread under SCHED_FIFO at `priority` (1-99); return '' or why not.

    Threads it starts later begin with the normal policy (SCHED_RESET_ON_FORK), so a real-time
    priority never spreads to, say, DDS or torch threads by inheritance. Needs CAP_SYS_NICE or
    an rtprio limit (`ulimit -r`, /etc/security/limits.conf), as for ros2_control's
    controller_manager; without them the thread keeps its normal priority.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                              os.sched_param(priority))
    except (AttributeError, OSError) as error:  # AttributeError: not Linux
        return f'{type(error).__name__}: {error}'
    return ''


class ThreadBoundCallbackGroup(MutuallyExclusiveCallbackGroup):
    """
    A mutually exclusive callback group whose callbacks run on one thread only (`bind`).

    Before `bind` no thread runs them; after `release` any thread does (an ordinary mutually
    exclusive group, served by whatever executor spins the node).
    """

    _ANY = object()

    def __init__(self):
        super().__init__()
        self._thread_id = None

    def bind(self, thread_id):
        """Let only the thread `thread_id` (threading.get_ident()) run the callbacks."""
        self._thread_id = thread_id

    def release(self):
        """Let any thread run the callbacks."""
        self._thread_id = self._ANY

    @property
    def thread_id(self):
        """Return the thread that runs the callbacks (None: none yet or any, see `bound`)."""
        return None if self._thread_id is self._ANY else self._thread_id

    @property
    def bound(self):
        """Return whether one thread only runs the callbacks."""
        return self._thread_id is not None and self._thread_id is not self._ANY

    def _allowed(self):
        return self._thread_id is self._ANY or threading.get_ident() == self._thread_id

    def can_execute(self, entity):
        return self._allowed() and super().can_execute(entity)

    def beginning_execution(self, entity):
        return self._allowed() and super().beginning_execution(entity)


class _GroupExecutor(SingleThreadedExecutor):
    """Waits on the entities of one callback group of the nodes it is given."""

    def __init__(self, group, *, context):
        super().__init__(context=context)
        self._group = group

    def can_execute(self, entity):
        return entity.callback_group is self._group and super().can_execute(entity)


class CallbackGroupThread:
    """
    A named thread that executes the callbacks of one ThreadBoundCallbackGroup of a node.

    `node` may be a list of nodes whose entities share the group (the fleet's control timers);
    then entities created after the thread started are found within `rescan_s` seconds.

    With priority > 0 the thread asks for SCHED_FIFO at that priority; `priority_error` says why
    it was refused ('' when granted or not asked for). A callback that raises stops the thread:
    the exception is kept in `error` and `on_error(exception)` is called. The group stays bound
    to the stopped thread, so its callbacks do not run again (the node shuts down on it).
    """

    def __init__(self, node, group, *, name, priority=0, on_error=None, rescan_s=None):
        self._nodes = list(node) if isinstance(node, (list, tuple)) else [node]
        self._group = group
        self._rescan_s = rescan_s
        self._name = name
        self._priority = priority
        self._on_error = on_error
        self._executor = _GroupExecutor(group, context=self._nodes[0].context)
        self._stop = threading.Event()
        self._started = threading.Event()
        self._thread = None
        self.priority_error = ''
        self.native_id = None
        self.error = None

    def start(self):
        """Start the thread; return once it is bound to the group (and its priority set)."""
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        self._started.wait()

    def stop(self, timeout=5.0):
        """Stop the thread (a running callback finishes first); False if it did not exit."""
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        self._stop.set()
        try:
            self._executor.wake()
        except Exception:  # noqa: B902 - the context is shut down: the thread has left already
            pass
        thread.join(timeout)
        if thread.is_alive():
            return False
        self._executor.shutdown()
        return True

    def _run(self):
        self._group.bind(threading.get_ident())
        self.native_id = threading.get_native_id()
        if self._priority > 0:
            self.priority_error = set_realtime_priority(self._priority)
        self._started.set()
        wait_arguments = (self._rescan_s, self._nodes, self._stop.is_set)  # timeout, nodes, until
        try:
            while True:
                try:
                    handler, _, _ = self._executor.wait_for_ready_callbacks(*wait_arguments)
                except TimeoutException:
                    continue  # the next wait collects the nodes' entities again
                handler()
                if handler.exception() is not None:
                    raise handler.exception()
        except (ConditionReachedException, ShutdownException, ExternalShutdownException):
            pass
        except Exception as error:  # noqa: B902 - reported to the owner, not lost in a thread
            self.error = error
            if self._on_error is not None:
                self._on_error(error)


class SharedControlTimers:
    """
    The control timers of several nodes, as one rclpy timer per period on one node.

    Every rclpy timer keeps the phase of its creation, so N robots' timers wake the thread that
    serves them N times a period, and each wake collects the entities of every node that thread
    waits on. Here the robots of one period share a timer that calls their callbacks in turn
    (in the order they joined), and their guard conditions live on the same node, so the control
    thread waits on that node only. Measured with 8 stand-in robots at 100 Hz on 2 CPU cores:
    the control thread used 0.44 CPU s/s with a timer each, 0.085 with one shared timer (record
    executor-scaling-control-cpu in benchmarks/RESULTS.md).
    """

    def __init__(self, node, group):
        self.node = node
        self.group = group
        self._lock = threading.Lock()
        self._timers = {}  # SharedTimer.key -> _PeriodTimer

    def create_timer(self, period_s, callback, clock):
        """
        Call `callback` on every tick of the shared timer of `period_s`; return its handle.

        `clock` is the calling node's: robots share a timer only where their clocks run on the
        same time (system, steady, ROS time, or simulation time from /clock).
        """
        key = (round(period_s * 1e9), clock.clock_type,
               getattr(clock, 'ros_time_is_active', False))
        with self._lock:
            shared = self._timers.get(key)
            if shared is None:
                shared = self._timers[key] = _PeriodTimer()
                shared.timer = self.node.create_timer(key[0] * 1e-9, shared.tick,
                                                      callback_group=self.group, clock=clock)
            shared.callbacks += (callback,)
        return SharedTimer(self, key, callback)

    def create_guard_condition(self, callback):
        """Return a guard condition whose callback runs on the control thread."""
        return self.node.create_guard_condition(callback, callback_group=self.group)

    def destroy(self, entity):
        """Destroy a SharedTimer (the rclpy timer goes with its last one) or guard condition."""
        if not isinstance(entity, SharedTimer):
            self.node.destroy_guard_condition(entity)
            return
        with self._lock:
            shared = self._timers.get(entity.key)
            if shared is None or entity.callback not in shared.callbacks:
                return
            callbacks = list(shared.callbacks)
            callbacks.remove(entity.callback)
            shared.callbacks = tuple(callbacks)
            if not callbacks:
                del self._timers[entity.key]
                self.node.destroy_timer(shared.timer)

    def timer(self, key):
        """Return the rclpy timer of a SharedTimer's key (None once its last one is destroyed)."""
        shared = self._timers.get(key)
        return None if shared is None else shared.timer


class _PeriodTimer:
    """One rclpy timer and the callbacks it calls on each tick."""

    def __init__(self):
        self.timer = None
        self.callbacks = ()  # replaced, never changed in place: a tick iterates its own copy

    def tick(self):
        for callback in self.callbacks:
            callback()


class SharedTimer:
    """One node's share of a SharedControlTimers timer (what `create_timer` would return)."""

    def __init__(self, owner, key, callback):
        self._owner = owner
        self.key = key  # (period in ns, clock type, simulation time)
        self.callback = callback

    def time_until_next_call(self):
        """Return the nanoseconds until the shared timer's next tick (None once destroyed)."""
        timer = self._owner.timer(self.key)
        return None if timer is None else timer.time_until_next_call()
