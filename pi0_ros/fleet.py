# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Several arms from one process and one engine: `ros2 launch pi0_ros fleet.launch.py`.

Each robot is a full control node (Pi0ControlNode) in its own namespace: its cameras,
joint_states, instruction, trajectory output, e-stop, ~/enable, ~/status and diagnostics, its own
synchronizer, planner, control timer and safety state. What they share is one engine on one
inference thread (InferenceWorker with a WorkerClient per robot), which batches the observations
that are ready, oldest first, after waiting at most `batch_wait` for the other robots' to join.
An e-stop, bad input or stale camera on one robot holds that robot only; an engine failure (the
GPU) holds every robot it serves.

The engine is built from the first robot that configures, sized for `max_batch` observations per
call (default: one per robot; fewer, and the robots take turns, the longest waiting first); the
others must ask for the same engine (checkpoint, precision, device, cameras, joints, ...), or
their configure fails naming the parameter. On a GPU, configure refuses a batch size whose
estimated memory (pi0_ros.engine.memory) exceeds the free memory or `gpu_memory_budget`, and
says how many fit.
"""
from dataclasses import replace
from pathlib import Path
import sys
import threading

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.validate_namespace import validate_namespace

from pi0_ros.executors import (CallbackGroupThread, make_executor, reuse_large_allocations,
                               SharedControlTimers, spin_until_shutdown, SWITCH_INTERVAL_S,
                               ThreadBoundCallbackGroup)
from pi0_ros.launch_arguments import FLEET_NODE_NAME
from pi0_ros.node import (build_engine, close_nodes, engine_options, Pi0ControlNode,
                          worker_turn_options)
from pi0_ros.parameters import ParameterError
from pi0_ros.worker import InferenceWorker

# Settings every robot sharing the engine must agree on (the engine is built from them).
ENGINE_SETTINGS = ('checkpoint', 'tokenizer', 'random_model', 'seed', 'precision', 'device',
                   'prefix_fp8_layers', 'max_image_height', 'max_image_width',
                   'encode_frames_ahead', 'frame_graph', 'chunk_handover', 'rtc_schedule',
                   'rtc_max_guidance_weight', 'rtc_execution_horizon', 'rtc_jacobian',
                   'gpu_turns', 'gpu_turn_release')
# The random model's normalization comes from the joint limits: they must agree too.
RANDOM_MODEL_SETTINGS = ('position_lower', 'position_upper')


def fleet_batch_buckets(robots):
    """Return the batch sizes the engine captures for this many robots: powers of two, robots."""
    sizes = {robots}
    size = 1
    while size < robots:
        sizes.add(size)
        size *= 2
    return tuple(sorted(sizes))


def robots_that_fit(budget_bytes, robots, dims, num_cameras, options, dtype):
    """Return how many robots (at most `robots`) one engine can serve within budget_bytes."""
    from pi0_ros.engine.memory import estimate_memory
    for count in range(robots, 0, -1):
        candidate = replace(options, max_batch=count, batch_buckets=fleet_batch_buckets(count))
        if estimate_memory(dims, num_cameras, candidate, dtype).total <= budget_bytes:
            return count
    return 0


def _model_dims(settings):
    from pi0_ros.engine import ModelDims
    from pi0_ros.engine.loading import read_checkpoint_info
    if settings.checkpoint:
        return read_checkpoint_info(Path(settings.checkpoint), None).dims
    return ModelDims.full() if settings.random_model == 'full' else ModelDims.tiny()


class SharedEngine:
    """Gives each robot's node a WorkerClient of one InferenceWorker (its worker_provider)."""

    def __init__(self, robots, *, batch_wait_s, gpu_memory_budget_gib, logger, max_batch=0):
        self.robots = list(robots)
        # Observations per engine call: one per robot, or fewer (robots then take turns).
        self.max_batch = min(max_batch, len(self.robots)) if max_batch > 0 else len(self.robots)
        self._batch_wait_s = batch_wait_s
        self._budget_gib = gpu_memory_budget_gib
        self._logger = logger
        self._lock = threading.Lock()
        self._worker = None
        self._settings = None   # of the robot the engine was built for
        self._owner = ''

    def __call__(self, node, settings, on_result, guidance):
        """Return a client of the shared worker for this robot (raises ParameterError)."""
        name = node.get_namespace()
        with self._lock:
            if self._worker is None or (self._worker.client_count == 0
                                        and not self._worker.alive):
                options = engine_options(settings, max_batch=self.max_batch,
                                         batch_buckets=fleet_batch_buckets(self.max_batch))
                self._check_memory(settings, options)
                self._worker = self._new_worker(settings, options)
                self._settings, self._owner = settings, name
            else:
                self._check_same_engine(settings)
            return self._worker.add_client(on_result, guidance=guidance,
                                           logger=node.get_logger(), name=name)

    def _new_worker(self, settings, options):
        robots = len(self.robots)
        self._logger.info(f'one engine for {robots} robots ({", ".join(self.robots)}): '
                          f'batches of up to {self.max_batch}, batch_wait '
                          f'{self._batch_wait_s * 1e3:g} ms')
        return InferenceWorker(lambda: build_engine(settings, options), None,
                               max_consecutive_failures=settings.max_consecutive_failures,
                               logger=self._logger, niceness=settings.inference_niceness,
                               encode_frames_ahead=settings.encode_frames_ahead,
                               max_batch=self.max_batch, batch_wait_s=self._batch_wait_s,
                               **worker_turn_options(settings))

    def _check_same_engine(self, settings):
        names = ENGINE_SETTINGS + (RANDOM_MODEL_SETTINGS if not settings.checkpoint else ())
        for name in names + ('joint_names', 'camera_names'):
            mine, theirs = getattr(settings, name), getattr(self._settings, name)
            if name in ('joint_names', 'camera_names'):
                mine, theirs = len(mine), len(theirs)  # the engine's state and camera count
            if mine != theirs:
                raise ParameterError(name, getattr(settings, name),
                                     f'robots sharing one engine need the same value; '
                                     f'{self._owner} has {getattr(self._settings, name)!r}')

    def _check_memory(self, settings, options):
        """Refuse (ParameterError) a batch size (max_batch) the GPU's memory cannot hold."""
        import torch

        from pi0_ros.engine.engine import resolve_device, resolve_dtype
        from pi0_ros.engine.memory import estimate_memory, GIB
        device = resolve_device(settings.device)
        if device.type != 'cuda':
            return
        if self._budget_gib > 0:
            budget, what = int(self._budget_gib * GIB), 'gpu_memory_budget'
        else:
            budget, what = torch.cuda.mem_get_info(device)[0], f'free on {device}'
        dims = _model_dims(settings)
        cameras = len(settings.camera_names)
        dtype = resolve_dtype(settings.precision, device)
        fit = robots_that_fit(budget, self.max_batch, dims, cameras, options, dtype)
        if fit < self.max_batch:
            needed = estimate_memory(dims, cameras, options, dtype).total
            raise ParameterError(
                'robots', self.robots,
                f'batches of {self.max_batch} robots need about {needed / GIB:.2f} GiB of GPU '
                f'memory for one engine, {budget / GIB:.2f} GiB {what}: at most {fit} fit (or '
                f'set max_batch to {fit}: the robots then take turns)')


def _declare_fleet_parameters(node):
    from rcl_interfaces.msg import ParameterDescriptor
    node.declare_parameter('robots', ['arm1', 'arm2'], ParameterDescriptor(
        description='Robot names: each a namespace with its own topics, e-stop and status'))
    node.declare_parameter('batch_wait', 0.005, ParameterDescriptor(
        description="Seconds the oldest ready observation waits for the other robots' to join "
                    'its batch'))
    node.declare_parameter('max_batch', 0, ParameterDescriptor(
        description='Observations per engine call: 0 = one per robot; fewer = the robots take '
                    'turns, the longest waiting first (smaller calls, so less latency per chunk '
                    'and less GPU memory, fewer chunks per robot)'))
    node.declare_parameter('gpu_memory_budget', 0.0, ParameterDescriptor(
        description='GiB of GPU memory the engine may use; 0 = the memory free when it loads'))
    node.declare_parameter('gil_switch_interval', SWITCH_INTERVAL_S, ParameterDescriptor(
        description='Seconds a Python thread may hold the GIL while another waits for it '
                    '(sys.setswitchinterval; 1e-5..0.005): shorter, and the inference and '
                    'control threads wait less behind the busy executor', read_only=True))


def start_control_thread(fleet, nodes, timers):
    """Start the one thread that runs every robot's control timer (the robots' priority)."""
    logger = fleet.get_logger()
    priority = max(node.get_parameter('control_thread_priority').value for node in nodes)

    def on_error(error):
        if fleet.context.ok():
            logger.fatal(f'control timer callback raised {type(error).__name__}: {error}; no '
                         'more commands: shutting down')
            for node in nodes:
                node.control_thread_error = error
            rclpy.try_shutdown(context=fleet.context)
    thread = CallbackGroupThread(fleet, timers.group, name='pi0_control', priority=priority,
                                 on_error=on_error, rescan_s=0.5)
    thread.start()
    logger.info(f'control timers of {len(nodes)} robots on one thread' + (
        f', SCHED_FIFO priority {priority}' if priority and not thread.priority_error else
        f' at normal priority (SCHED_FIFO refused: {thread.priority_error})'
        if thread.priority_error else ' at normal priority'))
    return thread


def read_robots(node):
    """Return the fleet's robot names (valid, distinct namespaces), or raise ParameterError."""
    robots = [str(name).strip().strip('/') for name in node.get_parameter('robots').value]
    if not robots or len(set(robots)) != len(robots) or not all(robots):
        raise ParameterError('robots', robots, 'needs one or more distinct, non-empty names')
    for name in robots:
        try:
            validate_namespace('/' + name)
        except Exception as error:  # noqa: B902 - rclpy's InvalidNamespaceException
            raise ParameterError('robots', robots, f'{name!r} is no valid namespace: {error}')
    return robots


def main(args=None):
    """Run one control node per robot on one engine; exit code 1 if no robot can start."""
    reuse_large_allocations()
    rclpy.init(args=args)
    fleet = executor = control = None
    nodes = []
    exit_code = 0
    try:
        fleet = rclpy.create_node(FLEET_NODE_NAME)
        _declare_fleet_parameters(fleet)
        try:
            robots = read_robots(fleet)
            batch_wait = float(fleet.get_parameter('batch_wait').value)
            budget = float(fleet.get_parameter('gpu_memory_budget').value)
            max_batch = int(fleet.get_parameter('max_batch').value)
            switch_interval = float(fleet.get_parameter('gil_switch_interval').value)
            if not 1e-5 <= switch_interval <= 0.005:
                raise ParameterError('gil_switch_interval', switch_interval, 'needs 1e-5..0.005 s')
            sys.setswitchinterval(switch_interval)  # before the worker and control threads
            if not 0.0 <= batch_wait <= 1.0 or budget < 0.0:
                raise ParameterError('batch_wait', batch_wait,
                                     'needs 0..1 s (and gpu_memory_budget >= 0)')
            if max_batch < 0:
                raise ParameterError('max_batch', max_batch, 'needs 0 (one per robot) or more')
        except ParameterError as error:
            fleet.get_logger().fatal(str(error))
            return 1
        shared = SharedEngine(robots, batch_wait_s=batch_wait, gpu_memory_budget_gib=budget,
                              logger=fleet.get_logger(), max_batch=max_batch)
        # Every robot's control timer on one thread (SCHED_FIFO where permitted), not on the
        # executor that serves every robot's cameras, and not a thread each (contending for the
        # GIL with the inference thread): record fleet-control-on-executor-h100, docs/fleet.md.
        # The robots of one control rate share one timer on the fleet node: one wake-up a
        # period for all of them (SharedControlTimers).
        timers = SharedControlTimers(fleet, ThreadBoundCallbackGroup())
        nodes = [Pi0ControlNode(worker_provider=shared, control_timers=timers, namespace=name)
                 for name in robots]
        control = start_control_thread(fleet, nodes, timers)
        executor = make_executor(max(node.get_parameter('executor_threads').value
                                     for node in nodes))
        executor.add_node(fleet)
        for node in nodes:
            executor.add_node(node)
        started = 0
        for name, node in zip(robots, nodes):
            if not node.get_parameter('autostart').value:
                continue
            if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
                if not node.context.ok():
                    return 0  # SIGINT/SIGTERM while the engine loaded: a requested exit
                node.get_logger().error(f'{name}: could not configure; the other robots go on')
                continue
            if node.trigger_activate() != TransitionCallbackReturn.SUCCESS:
                node.get_logger().error(f'{name}: could not activate; the other robots go on')
                continue
            started += 1
        if started == 0 and any(node.get_parameter('autostart').value for node in nodes):
            fleet.get_logger().fatal('no robot could start; exiting')
            return 1
        fleet.get_logger().info(f'{started} of {len(robots)} robots active')
        spin_until_shutdown(executor)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as error:  # noqa: B902 - e.g. a parameter override outside its range
        if rclpy.ok():
            print(f'[{FLEET_NODE_NAME}] fatal: {type(error).__name__}: {error}', file=sys.stderr)
            exit_code = 1
    finally:
        if control is not None:
            control.stop()
        if not close_nodes(nodes, executor):
            exit_code = 1
        if fleet is not None:
            fleet.destroy_node()
        rclpy.try_shutdown()
    return exit_code


if __name__ == '__main__':
    sys.exit(main())
