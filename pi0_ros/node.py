# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The pi0_ros control node: synchronized observations -> inference worker -> JointTrajectory.

A lifecycle node. configure builds the engine on the worker thread (warm-up, CUDA graphs) and
creates the ROS interfaces; activate starts commanding; deactivate brakes to a hold; cleanup frees
the engine. Subscription callbacks only convert, validate and store; inference runs on the worker
thread; commands are published by a fixed-rate timer in its own callback group.
"""
from collections import deque
import dataclasses
import math
import os
import sys
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray
import numpy as np
from rcl_interfaces.msg import SetParametersResult
import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import JumpThreshold
from rclpy.duration import Duration
from rclpy.executors import ExternalShutdownException
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory

from pi0_ros import diagnostics
from pi0_ros.control import (Chunk, ChunkPlanner, JointLimits, OutsideLimits, PlannerConfig,
                             PlannerState, validate_trajectory)
from pi0_ros.conversions import build_joint_trajectory, float64_array
from pi0_ros.executors import (CallbackGroupThread, freeze_loaded_objects, make_executor,
                               reuse_large_allocations, spin_until_shutdown, SWITCH_INTERVAL_S,
                               ThreadBoundCallbackGroup, unfreeze_and_collect)
from pi0_ros.inputs import LOG_THROTTLE_S, NodeInputs
from pi0_ros.msg import ActionChunk, PolicyStatus
from pi0_ros.parameters import (check_live_change, declare_all, ParameterError, read_settings)
from pi0_ros.qos import COMMAND_QOS, NO_PUBLISHER_EVENTS, REPORT_QOS
from pi0_ros.worker import InferenceWorker, WorkerState

NODE_NAME = 'pi0_ros'
# With publish_on_chunk, a chunk that arrives less than this before the next control tick waits
# for that tick: an extra command would gain less than it costs.
CHUNK_TICK_MIN_LEAD_S = 0.002

_ENGINE_STATES = {
    WorkerState.STARTING: PolicyStatus.ENGINE_IDLE,
    WorkerState.READY: PolicyStatus.ENGINE_IDLE,
    WorkerState.RUNNING: PolicyStatus.ENGINE_RUNNING,
    WorkerState.FAILED: PolicyStatus.ENGINE_FAILED,
    WorkerState.STOPPED: PolicyStatus.ENGINE_STOPPED,
}
_OUTPUT_STATES = {
    PlannerState.DISABLED: PolicyStatus.OUTPUT_DISABLED,
    PlannerState.FOLLOWING: PolicyStatus.OUTPUT_FOLLOWING,
    PlannerState.HOLDING: PolicyStatus.OUTPUT_HOLDING,
    PlannerState.ESTOP: PolicyStatus.OUTPUT_ESTOP,
}


# gpu_turn_release denoise_tail: the Euler steps left when a call's GPU turn ends. In the fleet
# runs of record gpu-turn-release-h100 (H100, 2 processes of 4 arms) the next process's host work
# before its first launch took about 5 ms and a step of the batch-4 denoising about 1 ms, so the
# next call's first kernels come about as the last step ends (not yet measured).
GPU_TURN_TAIL_STEPS = 4


def engine_options(settings, max_batch=1, batch_buckets=()):
    """Return the EngineOptions the parameters ask for (max_batch: robots served at once)."""
    from pi0_ros.engine import EngineOptions, RTCOptions
    from pi0_ros.engine.config import parse_layer_ranges
    fp8_layers = settings.prefix_fp8_layers.strip()
    # Real-Time Chunking: its guided graphs are captured at warm-up with these defaults.
    rtc = RTCOptions(schedule=settings.rtc_schedule,
                     max_guidance_weight=settings.rtc_max_guidance_weight,
                     execution_horizon=settings.rtc_execution_horizon,
                     jacobian=settings.rtc_jacobian) if settings.chunk_handover == 'rtc' else None
    return EngineOptions(precision=settings.precision, device=settings.device,
                         max_batch=max_batch, batch_buckets=tuple(batch_buckets),
                         max_frame_height=settings.max_image_height,
                         max_frame_width=settings.max_image_width,
                         prefix_fp8=bool(fp8_layers),
                         prefix_fp8_layers=parse_layer_ranges(fp8_layers) if fp8_layers
                         else (), frame_graph=settings.frame_graph, rtc=rtc,
                         denoise_tail_steps=GPU_TURN_TAIL_STEPS if settings.gpu_turns and
                         settings.gpu_turn_release == 'denoise_tail' else 0)


def worker_turn_options(settings) -> dict:
    """Return the InferenceWorker's GPU-turn arguments the parameters ask for."""
    return {'gpu_turns': settings.gpu_turns,
            'end_turn_early': settings.gpu_turn_release != 'chunk'}


def build_engine(settings, options=None):
    """Build the engine the parameters ask for (called on the worker thread)."""
    import torch

    from pi0_ros.engine import ModelDims, Pi0Engine
    options = options or engine_options(settings)
    joints = len(settings.joint_names)
    cameras = len(settings.camera_names)
    if settings.device == 'cpu' or (settings.device == 'auto' and not torch.cuda.is_available()):
        # Leave a core to the executor: the control timer must keep its rate while inferring.
        torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    if settings.checkpoint:
        engine = Pi0Engine.from_pretrained(settings.checkpoint,
                                           tokenizer_path=settings.tokenizer or None,
                                           options=options)
        for name, have, want in (('action_dim', engine.action_dim, joints),
                                 ('state_dim', engine.state_dim, joints),
                                 ('num_cameras', engine.num_cameras, cameras)):
            if have != want:
                engine.close()
                raise ParameterError('checkpoint', settings.checkpoint,
                                     f'the policy has {name} {have}, the node is configured for '
                                     f'{want} (joint_names / camera_names)')
        return engine
    # The random model (tiny, or full size for GPU load tests): its normalization stats centre
    # actions in the joint ranges, so the demo arm moves inside its workspace (without purpose).
    lower = np.asarray(settings.position_lower)
    upper = np.asarray(settings.position_upper)
    mean, std = (lower + upper) / 2.0, (upper - lower) / 8.0
    dims = ModelDims.full() if settings.random_model == 'full' else ModelDims.tiny()
    return Pi0Engine.random(dims, state_dim=joints, action_dim=joints,
                            num_cameras=cameras, seed=settings.seed, options=options,
                            state_mean=mean, state_std=std, action_mean=mean, action_std=std)


class Pi0ControlNode(LifecycleNode):
    """Lifecycle node driving an arm with Pi0 action chunks."""

    def __init__(self, worker_provider=None, control_timers=None, **kwargs):
        """
        Create the node (configured and activated through its lifecycle).

        worker_provider: None (the node builds its own engine and worker), or a callable
        (node, settings, on_result, guidance) -> a WorkerClient of a worker shared with other
        robots (pi0_ros.fleet); it raises ParameterError where the settings cannot share it.
        control_timers: None, or a SharedControlTimers whose thread (the caller's) runs the
        control timer and the chunk-arrived guard condition (the fleet: one control thread and
        one timer for every robot).
        """
        super().__init__(NODE_NAME, **kwargs)
        self._worker_provider = worker_provider
        self._control_timers = control_timers
        declare_all(self)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._lock = threading.Lock()
        # Serializes the planner between the control timer and lifecycle transitions.
        self._output_lock = threading.Lock()
        self._settings = None
        self._worker = None
        self._lingering_worker = None  # a worker whose thread outlived its stop()
        self._control_thread = None
        self.control_thread_error = None
        self._entities = []
        self._control_entities = []  # the control timer and guard condition of control_timers
        self._control_timer = None
        self._chunk_arrived = None  # guard condition: a chunk for the control stage arrived
        # Cameras, joint states, instruction and e-stop: subscribed, converted, validated and
        # stored by NodeInputs, which tells the node through these callbacks. now goes through
        # self._now at each call (a replaced _now applies to the inputs too).
        self._inputs = NodeInputs(self, self._lock, now=lambda: self._now(),
                                  on_frame=self._offer_frame, on_observation=self._on_observation,
                                  on_epoch=self._set_worker_epoch, on_estop=self._latch_estop)
        # The operator's e-stop and disable outlive cleanup and configure, as they outlive
        # deactivate and activate: only ~/enable(true) clears them.
        self._estop_latched = False
        self._enabled = True
        self._reset_runtime_state()

    # Lifecycle -----------------------------------------------------------------------------
    def on_configure(self, state):
        try:
            settings = read_settings(self)
        except ParameterError as error:
            self.get_logger().error(f'configure failed: {error}')
            return TransitionCallbackReturn.FAILURE
        lingering = self._lingering_worker
        if lingering is not None and lingering.alive:
            self.get_logger().error('configure failed: the previous engine is still loading (its '
                                    'thread did not stop); configure again once it has finished')
            return TransitionCallbackReturn.FAILURE
        self._lingering_worker = None
        self._settings = settings
        self._reset_runtime_state()
        try:
            self._create_interfaces(settings)
        except Exception as error:  # noqa: B902 - e.g. rclpy refusing a name: say which
            self.get_logger().error(f'configure failed: {type(error).__name__}: {error}')
            self._teardown()
            return TransitionCallbackReturn.FAILURE
        self.get_logger().info(
            'loading the engine: ' + (f"checkpoint '{settings.checkpoint}'" if settings.checkpoint
                                      else f'built-in random {settings.random_model} model')
            + f', precision {settings.precision}, device {settings.device}')
        guidance = self._rtc_guidance if settings.chunk_handover == 'rtc' else None
        if self._worker_provider is None:
            self._worker = InferenceWorker(
                lambda: build_engine(settings), self._on_chunk_result,
                max_consecutive_failures=settings.max_consecutive_failures,
                logger=self.get_logger(), niceness=settings.inference_niceness,
                encode_frames_ahead=settings.encode_frames_ahead, guidance=guidance,
                **worker_turn_options(settings))
        else:
            try:
                self._worker = self._worker_provider(self, settings, self._on_chunk_result,
                                                     guidance)
            except ParameterError as error:
                self.get_logger().error(f'configure failed: {error}')
                self._teardown()
                return TransitionCallbackReturn.FAILURE
        started = time.monotonic()
        self._worker.start()
        # In short waits, so that SIGINT/SIGTERM during a long load ends the transition.
        while not self._worker.wait_ready(0.2):
            if self._worker.wait_ready(0):
                break  # became ready since the wait ended
            if self._worker.state is not WorkerState.STARTING:
                reason = self._worker.error or 'the engine did not start'
            elif not self.context.ok():
                reason = 'shutting down while the engine loaded'
            elif time.monotonic() - started >= settings.engine_ready_timeout:
                reason = f'not ready after {settings.engine_ready_timeout} s'
            else:
                continue
            self.get_logger().error(f'configure failed: {reason}')
            # Shutting down: do not wait for an engine build that cannot be interrupted (the
            # thread is a daemon and ends with the process).
            self._teardown(worker_stop_timeout=0.2 if not self.context.ok() else 5.0)
            return TransitionCallbackReturn.FAILURE
        self.get_logger().info(f'engine ready in {time.monotonic() - started:.1f} s')
        # The engine and everything loaded stay out of the garbage collector's full passes (each
        # held the GIL ~0.1 s while loading here: the control tick would wait); its pauses are
        # watched from here on.
        freeze_loaded_objects()
        diagnostics.gc_pauses()
        with self._lock:
            estop, enabled = self._estop_latched, self._enabled
        if estop or not enabled:
            self.get_logger().warning(
                f"{'E-STOP still latched' if estop else 'still disabled'}: holding until "
                '~/enable(true)')
        device = self._worker.engine_device
        self._gpu = diagnostics.GpuTelemetry(device)
        return super().on_configure(state)

    def on_activate(self, state):
        with self._lock:
            self._active = True
            # A plan still executing (re-activated while the deactivation's braking runs) is
            # continued: starting again at rest from the measured joints would stop the arm at
            # once. Otherwise start from the measured joints, as on the first activation.
            if not (self._planner_initialized and self._commanding
                    and self._now() < self._planner.plan_end_time):
                self._planner_initialized = False
            self._output_rate.reset()
        self.get_logger().info('active: commanding the arm once joint states arrive')
        return super().on_activate(state)

    def on_deactivate(self, state):
        with self._lock:
            self._active = False
        # Brake to a hold: one last trajectory that decelerates within limits and ends at rest;
        # nothing while the controller was handed over (disabled and at rest: another commander
        # may have moved the arm since the planner's last command).
        with self._output_lock:
            if self._planner_initialized and self._commanding:
                self._planner.set_enabled(False)
                self._publish_points(self._planner.step(self._now(), 'deactivated'))
        self.get_logger().info('inactive: holding')
        return super().on_deactivate(state)

    def on_cleanup(self, state):
        self._teardown()
        return super().on_cleanup(state)

    def on_shutdown(self, state):
        self._teardown()
        return super().on_shutdown(state)

    def on_error(self, state):
        self._teardown()
        return TransitionCallbackReturn.SUCCESS

    def stop_threads(self):
        """Stop the control and inference threads (used on process exit)."""
        if self._control_thread is not None:
            self._control_thread.stop()
        if self._worker is not None:
            self._worker.stop()

    # Set-up and tear-down -----------------------------------------------------------------
    def _reset_runtime_state(self):
        self._active = False
        self._planner = None
        self._planner_initialized = False
        self._inputs.reset()
        self._restart_plan = False
        self._commanding = False  # the last control tick published a command
        self._start_refused = None  # why the measured joints could not start the plan
        self._pending_results = deque(maxlen=4)  # results not yet consumed by the timer
        # Per chunk taken by the output stage (s): its observation's age when the engine call
        # began, and its wait from the call's end to the command that first uses it.
        self._call_ages_s = deque(maxlen=200)
        self._output_waits_s = deque(maxlen=200)
        # chunk_handover rtc: the chunk the plan follows (None while holding), continued by the
        # next one (_rtc_guidance).
        self._executing_chunk = None
        self._chunk_sequence = 0
        self._output_rate = diagnostics.RateMeter()
        self._gpu = diagnostics.GpuTelemetry(None)  # set to the engine's GPU once it is ready
        # The inputs count theirs (observations synced and dropped, inputs rejected).
        self._counters = {'actions_skipped': 0, 'chunks_produced': 0, 'chunks_rejected': 0,
                          'chunks_discarded': 0, 'commands_published': 0,
                          'commands_on_chunk': 0, 'commands_blocked': 0}

    @property
    def _epoch(self):
        """Return the inputs' epoch: results of an older one are dropped (read under the lock)."""
        return self._inputs.epoch

    def _create_interfaces(self, settings):
        joints = settings.joint_names
        self._limits = JointLimits(np.array(settings.position_lower),
                                   np.array(settings.position_upper),
                                   np.array(settings.max_velocity),
                                   np.array(settings.max_acceleration), names=joints)
        period = 1.0 / settings.control_rate
        self._planner = ChunkPlanner(
            PlannerConfig(control_period=period, points_per_message=settings.points_per_message,
                          point_spacing=period, blend_duration=self._blend_duration(settings),
                          # Real-Time Chunking continues the plan: a chunk takes over at once.
                          temporal_ensembling=(settings.temporal_ensembling
                                               and settings.chunk_handover != 'rtc'),
                          ensembling_decay=settings.ensembling_decay),
            self._limits)
        self._inputs.configure(settings, self._limits.max_velocity, self._entities)

        # The control timer's group gets a real-time thread of its own where permitted
        # (_start_control_thread), or the fleet's control thread serves it (control_timers).
        shared = self._control_timers
        reports = MutuallyExclusiveCallbackGroup()
        self._entities.append(self.create_service(SetBool, '~/enable', self.enable_callback,
                                                  callback_group=reports))
        self._trajectory_pub = self.create_lifecycle_publisher(JointTrajectory,
                                                               'joint_trajectory', COMMAND_QOS)
        self._chunk_pub = self.create_lifecycle_publisher(
            ActionChunk, '~/action_chunk', REPORT_QOS, event_callbacks=NO_PUBLISHER_EVENTS)
        # Status and diagnostics report in every configured state (inactive too), as a
        # diagnostics aggregator expects: plain publishers, not lifecycle ones.
        self._status_pub = self.create_publisher(PolicyStatus, '~/status', REPORT_QOS,
                                                 event_callbacks=NO_PUBLISHER_EVENTS)
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, '/diagnostics',
                                                      REPORT_QOS,
                                                      event_callbacks=NO_PUBLISHER_EVENTS)
        if shared is not None:
            self._control_timer = shared.create_timer(period, self.control_timer_callback,
                                                      self.get_clock())
            chunk_arrived = shared.create_guard_condition(self.chunk_arrived_callback)
            self._control_entities = [self._control_timer, chunk_arrived]
        else:
            output = ThreadBoundCallbackGroup()
            self._control_timer = self.create_timer(period, self.control_timer_callback,
                                                    callback_group=output)
            chunk_arrived = self.create_guard_condition(self.chunk_arrived_callback,
                                                        callback_group=output)
            self._entities += [self._control_timer, chunk_arrived]
        self._entities.append(self.create_timer(1.0 / settings.status_rate,
                                                self.status_timer_callback,
                                                callback_group=reports))
        with self._lock:
            self._chunk_arrived = chunk_arrived
        if shared is None:
            self._start_control_thread(output, settings.control_thread_priority)
        # A backward jump of the ROS clock (sim time reset) leaves every buffered input stamped
        # in the future; without a reset the node would hold until the clock passes them again.
        self._clock_jump_handle = self.get_clock().create_jump_callback(
            JumpThreshold(min_forward=None, min_backward=Duration(nanoseconds=-1),
                          on_clock_change=False),
            post_callback=self.clock_jump_callback)

    def _start_control_thread(self, group, priority):
        """
        Run the control timer on a thread of its own at a real-time priority, where permitted.

        Measured on 2 cores with CPU inference (benchmarks/RESULTS.md: control-rate-cpu): on the
        executor's thread the timer waited little behind the input callbacks (they are short),
        but after waking it often queued 1-4 ms for a CPU while other runnable threads finished
        their time slices. SCHED_FIFO removes that wait; given to the whole executor it also
        starved the DDS threads that reassemble camera frames (the camera sets taken in fell
        from ~15 % to ~3 %), so only this thread gets it: it wakes 50 times a second for well
        under a millisecond of work. At normal priority a thread of its own was worse than the
        executor's (one more thread contending for the GIL), so without the priority (refused,
        or control_thread_priority 0) the executor runs the timer, as an ordinary group.
        """
        if priority > 0:
            thread = CallbackGroupThread(self, group, name='pi0_control', priority=priority,
                                         on_error=self._on_control_thread_error)
            thread.start()
            if not thread.priority_error:
                self._control_thread = thread
                self.get_logger().info(f'control timer on its own thread at SCHED_FIFO '
                                       f'priority {priority}')
                return
            thread.stop()
            self.get_logger().warning(
                f'control thread: SCHED_FIFO priority {priority} refused '
                f'({thread.priority_error}): the control timer runs on the executor at normal '
                'priority, so its period may jitter by milliseconds on a busy CPU. Allow it with '
                'CAP_SYS_NICE or an rtprio limit (ulimit -r), or set control_thread_priority: 0 '
                'to not ask.')
        else:
            self.get_logger().info('control timer on the executor (control_thread_priority 0)')
        group.release()
        if self.executor is not None:
            self.executor.wake()   # its wait set did not hold the timer so far

    def _on_control_thread_error(self, error):
        if not self.context.ok():
            return  # SIGINT/SIGTERM shut the context down under a running tick: not a fault
        self.control_thread_error = error
        self.get_logger().fatal(f'control timer callback raised {type(error).__name__}: {error}; '
                                'no more commands: shutting down')
        rclpy.try_shutdown(context=self.context)

    def clock_jump_callback(self, jump):
        """Drop inputs and in-flight results of the old time base after a backward jump."""
        with self._lock:
            epoch = self._inputs.new_time_base()
            self._pending_results.clear()
            self._executing_chunk = None
            self._output_rate.reset()  # its stamps are on the old time base
        if self._worker is not None:
            self._worker.set_epoch(epoch)
        self.get_logger().warning(
            f'clock jumped back by {-jump.delta.nanoseconds * 1e-9:.3f} s: inputs and results '
            'of the old time base dropped')

    def _teardown(self, worker_stop_timeout=5.0):
        with self._lock:
            self._active = False
        handle, self._clock_jump_handle = getattr(self, '_clock_jump_handle', None), None
        if handle is not None:
            handle.unregister()
        if self._control_thread is not None:
            if not self._control_thread.stop():
                self.get_logger().warning('control thread did not stop within 5 s')
            self._control_thread = None
        # A tick the executor runs on another thread (executor_threads > 0, no control thread)
        # ends before the worker and the publishers it uses go.
        with self._output_lock:
            self._teardown_worker_and_interfaces(worker_stop_timeout)

    def _teardown_worker_and_interfaces(self, worker_stop_timeout):
        if self._worker is not None:
            if not self._worker.stop(worker_stop_timeout):
                self._lingering_worker = self._worker
            self._worker = None
            if self._worker_provider is None:
                # Its own engine is gone: the collector may free what of it is in cycles (a
                # fleet's shared engine stays, and so do its frozen objects).
                unfreeze_and_collect()
        with self._lock:
            self._chunk_arrived = None
        self._control_timer = None
        for entity in self._entities:
            destroy = {'Subscription': self.destroy_subscription, 'Service': self.destroy_service,
                       'Timer': self.destroy_timer,
                       'GuardCondition': self.destroy_guard_condition}[type(entity).__name__]
            destroy(entity)
        self._entities = []
        for entity in self._control_entities:
            self._control_timers.destroy(entity)
        self._control_entities = []
        for name in ('_trajectory_pub', '_chunk_pub', '_status_pub', '_diagnostics_pub'):
            publisher = getattr(self, name, None)
            if publisher is not None:
                if name in ('_status_pub', '_diagnostics_pub'):
                    self.destroy_publisher(publisher)
                else:
                    self.destroy_lifecycle_publisher(publisher)
                setattr(self, name, None)

    # Time ----------------------------------------------------------------------------------
    def _now(self):
        return self.get_clock().now().nanoseconds * 1e-9

    # Inputs (pi0_ros.inputs: convert, validate, store) -------------------------------------
    # The subscriptions call NodeInputs; these hand it a message the same way.
    def image_callback(self, index, camera, msg):
        """Handle one camera frame (NodeInputs.image_callback)."""
        self._inputs.image_callback(index, camera, msg)

    def joint_state_callback(self, msg):
        """Handle a joint-state message (NodeInputs.joint_state_callback)."""
        self._inputs.joint_state_callback(msg)

    def instruction_callback(self, msg):
        """Handle an instruction message (NodeInputs.instruction_callback)."""
        self._inputs.instruction_callback(msg)

    def estop_callback(self, msg):
        """Handle an e-stop message (NodeInputs.estop_callback)."""
        self._inputs.estop_callback(msg)

    # What the inputs tell the node (called without the lock).
    def _offer_frame(self, index, rgb, frame_key):
        worker = self._worker  # None once torn down (a callback may still be running)
        if self._active and worker is not None:
            # Encoded now if the inference thread is idle: off the critical path of the
            # observation this frame will belong to.
            worker.offer_frame(index, rgb, frame_key)

    def _on_observation(self, observation):
        # A synchronized observation: to the worker while active, when inference is wanted.
        with self._lock:
            submit = self._active and self._wants_inference()
        if submit and (worker := self._worker) is not None:
            worker.submit(observation)

    def _wants_inference(self):
        """Whether a new observation should go to the worker (called under the lock)."""
        settings = self._settings
        if settings.inference_trigger == 'continuous' or not self._planner_initialized:
            return True
        if self._worker.busy:
            return False
        return self._planner.remaining_horizon(self._now()) <= settings.replan_horizon

    def _set_worker_epoch(self, epoch):
        if (worker := self._worker) is not None:
            worker.set_epoch(epoch)

    def _latch_estop(self):
        with self._lock:
            newly = not self._estop_latched
            self._estop_latched = True
        if newly:
            self.get_logger().error('E-STOP latched: holding until ~/enable(true)')

    def enable_callback(self, request, response):
        """
        Enable or disable the output.

        Disabling brakes to rest and then stops publishing, so another commander (MoveIt) can use
        the controller. Enabling clears a latched e-stop, recovers a failed engine and restarts
        the plan from the measured joint state, so a hand-over never jumps.
        """
        with self._lock:
            # A plan that is not commanding (disabled, or held off by an e-stop) restarts from
            # the measured joints; one still commanding continues.
            if request.data:
                self._restart_plan = True
            self._enabled = bool(request.data)
            if request.data:
                self._estop_latched = False
        worker = self._worker
        response.success = True
        response.message = ('enabled' if request.data
                            else 'disabled: braking to rest, then not commanding')
        if request.data and worker is not None and worker.recover():
            self.get_logger().warning('engine failure state cleared by ~/enable')
        elif request.data and worker is not None and worker.state is WorkerState.FAILED:
            # A build that failed or a crashed thread: nothing to resume (the arm stays held).
            response.message = ('enabled, but the engine failed and cannot resume: clean up and '
                                f'configure again ({worker.error})')
            self.get_logger().error(response.message, throttle_duration_sec=LOG_THROTTLE_S)
        self.get_logger().info(f'~/enable: {response.message}')
        return response

    # Results (worker thread) ---------------------------------------------------------------
    def _on_chunk_result(self, result):
        with self._lock:
            # The worker checks the epoch too; one that changed while this result was on its
            # way (a clock jump, a new instruction) is checked here, under the node's lock.
            if result.observation.epoch != self._epoch:
                self._counters['chunks_discarded'] += 1
                return
            self._pending_results.append(result)
            if self._settings.publish_on_chunk and self._chunk_arrived is not None:
                self._chunk_arrived.trigger()  # chunk_arrived_callback, on the control thread

    # Output (timer, fixed rate) ------------------------------------------------------------
    def control_timer_callback(self):
        """Publish the next trajectory points; hold when anything is stale or unsafe."""
        with self._output_lock:
            if not self._control_tick(periodic=True):
                self._output_rate.reset()  # nothing published: no rate to report

    def chunk_arrived_callback(self):
        """
        With publish_on_chunk, publish for a chunk that just arrived, between two control ticks.

        The planner's points lie on a fixed time grid whatever the time of the step, so a step
        here continues the plan exactly as the next tick would; the ticks keep their period.
        """
        timer = self._control_timer
        if timer is None:
            return
        until_tick = timer.time_until_next_call()
        if until_tick is not None and until_tick * 1e-9 < CHUNK_TICK_MIN_LEAD_S:
            return  # the tick takes the chunk
        with self._output_lock:
            with self._lock:
                if not self._pending_results:
                    return  # a tick took it meanwhile
            if self._control_tick(periodic=False):
                with self._lock:
                    self._counters['commands_on_chunk'] += 1

    def _control_tick(self, periodic):
        """One step of the output stage; return whether a command was published."""
        now = self._now()
        with self._lock:
            if not self._active or now <= 0.0:
                return False
            # Only chunks for the current instruction and time base: one may have changed
            # since a result arrived.
            results = [result for result in self._pending_results
                       if result.observation.epoch == self._epoch]
            self._counters['chunks_discarded'] += len(self._pending_results) - len(results)
            self._pending_results.clear()
            estop, enabled = self._estop_latched, self._enabled
            latest_joint = self._inputs.joint_buffer.latest()
            observation_stamp = self._inputs.last_observation_stamp
            joint_state_time = self._inputs.last_joint_state_time
            if self._restart_plan:
                # Enabled again: a plan that stopped commanding (handed over) starts again from
                # the measured joints; one still braking continues, without a velocity step.
                self._restart_plan = False
                self._planner_initialized = self._planner_initialized and self._commanding
        if not self._planner_initialized:
            # Not while disabled or e-stopped: the controller may be another commander's (and
            # a braking command would replace its goal); ~/enable restarts from the arm.
            if not enabled or estop or not self._start_plan(now, latest_joint, joint_state_time):
                with self._lock:
                    self._counters['chunks_discarded'] += len(results)  # no plan to take them
                return False
        # Mode changes first, so a chunk arriving on the tick that enables the output is kept.
        if estop:
            if self._planner.state is not PlannerState.ESTOP:
                self._planner.estop()
        elif self._planner.state is PlannerState.ESTOP:
            self._planner.clear_estop()
        self._planner.set_enabled(enabled)
        self._record_chunk_waits(results, now)
        chunks = [self._accept_chunk(result, now) for result in results]
        # Disabled and at rest: no command, the controller is free for other commanders. An
        # e-stop latched while not commanding (handed over, or latched before a configure)
        # keeps it so until ~/enable; a hold published now would be at the planner's last
        # command, not where the arm is.
        idle = ((not enabled or (estop and not self._commanding))
                and self._planner.at_rest_from(now))
        self._commanding = not idle
        published = False
        if not idle:
            points = self._planner.step(now, self._hold_reason(now, observation_stamp,
                                                               joint_state_time))
            if points.state is not PlannerState.FOLLOWING:
                with self._lock:
                    self._executing_chunk = None  # a hold is no plan for the next to continue
            published = self._publish_points(points)
            if published and periodic:
                self._output_rate.tick(now)  # the ROS clock the timer runs on (sim time too)
        # The chunks' reports go out after the command, so that they never delay it.
        for result, chunk in chunks:
            if np.isfinite(chunk.actions).all():  # NaN/inf never goes on the wire
                self._chunk_pub.publish(self._action_chunk_msg(result, chunk))
        return published

    def _record_chunk_waits(self, results, now):
        """Record where the chunks' latency outside their engine call went (diagnostics)."""
        # The engine call is timed on the monotonic clock, the stamps are on the ROS clock: the
        # observation's age at the call's start holds where the two advance alike (wall time,
        # or a simulation at real-time speed).
        since = time.monotonic()
        for result in results:
            if result.call_started_s is None:
                continue
            since_call = since - result.call_started_s
            self._call_ages_s.append(now - result.observation.stamp - since_call)
            self._output_waits_s.append(since_call - result.latency_s)

    def _start_plan(self, now, latest_joint, joint_state_time):
        """Start the plan from the measured joints; False (publish nothing) where it cannot."""
        # Only from a fresh measured position: never command an arm whose position is unknown
        # or old (it may have been moved by someone else meanwhile).
        if (latest_joint is None or joint_state_time is None
                or now - joint_state_time > self._settings.joint_state_timeout):
            return False
        _, measured, velocity = latest_joint
        # Where the arm is now, extrapolated with its measured velocity (within
        # joint_state_max_extrapolation): an arm still moving is continued and braked, not
        # stopped within one point. Beyond that, at rest from the last measurement.
        position = self._inputs.joint_buffer.at(now)
        if position is None:
            position, velocity = measured, None
        elif np.array_equal(self._limits.clamp_position(measured), measured):
            position = self._limits.clamp_position(position)  # measured inside: clip, not refuse
        try:
            self._planner.reset(position, now, velocity)
        except OutsideLimits as error:
            # Commanding it inside at once would be a jump: nothing is published until the
            # arm is back within its limits (or the limits are corrected).
            self._start_refused = str(error)
            self.get_logger().error(f'not commanding: {error}; move the arm inside its '
                                    'limits or correct the joint limit parameters',
                                    throttle_duration_sec=LOG_THROTTLE_S)
            return False
        self._start_refused = None
        self._planner.set_enabled(True)
        self._planner_initialized = True
        self._output_rate.reset()
        return True

    @staticmethod
    def _blend_duration(settings):
        """Return the planner's blend: none with Real-Time Chunking (chunks continue the plan)."""
        return 0.0 if settings.chunk_handover == 'rtc' else settings.blend_duration

    def _rtc_guidance(self, observation, expected_latency_s):
        """
        Return the Real-Time Chunking input of a call that starts now (on the worker thread).

        The plan that executes while the call runs, at the new chunk's action times (stamp +
        k chunk_dt, as far as the executing chunk reaches), and the delay: the actions of the
        new chunk already due when it arrives (now + the expected latency), which the planner
        skips. None while no chunk is followed (holding, before the first): a plain call.

        A chunk that arrived but that the control tick has not taken yet is the plan to
        continue: it takes over before this call's chunk arrives (the worker starts the next
        call as soon as it delivers a chunk, up to a control period before the tick).
        """
        with self._lock:
            settings = self._settings
            arrived = [result for result in self._pending_results
                       if result.observation.epoch == self._epoch]
            executing = self._followed_chunk(arrived[-1]) if arrived else self._executing_chunk
        if executing is None:
            return None
        dt = settings.chunk_dt
        times = observation.stamp + dt * np.arange(executing.horizon)
        covered = int(np.count_nonzero(times <= executing.end_time + 1e-9))
        if covered == 0:
            return None
        arrival = self._now() + (expected_latency_s or 0.0)
        delay = min(executing.horizon,
                    max(0, math.ceil((arrival - observation.stamp) / dt - 1e-9)))
        return executing.sample_many(times[:covered]), delay

    def _followed_chunk(self, result):
        """Return the Chunk the plan follows once it takes a result: as the planner clamps it."""
        return Chunk(result.observation.stamp, self._settings.chunk_dt,
                     self._limits.clamp_position(result.actions))

    def _hold_reason(self, now, observation_stamp, joint_state_time):
        settings = self._settings
        if self._worker.state is WorkerState.FAILED:
            return 'engine failed'
        if joint_state_time is None or now - joint_state_time > settings.joint_state_timeout:
            return 'joint states stale'
        if observation_stamp is None:
            return 'waiting for the first observation'
        if now - observation_stamp > settings.observation_timeout:
            return 'observation stale'
        return None

    def _accept_chunk(self, result, now):
        """Offer a result to the planner; return (result, chunk) for its ~/action_chunk report."""
        settings = self._settings
        self._chunk_sequence += 1
        chunk = Chunk(t0=result.observation.stamp, dt=settings.chunk_dt, actions=result.actions,
                      sequence=self._chunk_sequence)
        outcome = self._planner.add_chunk(chunk, now)
        with self._lock:
            self._counters['actions_skipped'] += outcome.skipped_actions
            self._counters['chunks_produced' if outcome.accepted else 'chunks_rejected'] += 1
            if outcome.accepted and settings.chunk_handover == 'rtc':
                self._executing_chunk = self._followed_chunk(result)
        if not outcome.accepted:
            self.get_logger().warning(f'chunk {chunk.sequence} rejected: {outcome.reason}',
                                      throttle_duration_sec=LOG_THROTTLE_S)
        return result, chunk

    def _action_chunk_msg(self, result, chunk):
        timings = result.timings_ms
        msg = ActionChunk(joint_names=list(self._settings.joint_names), dt=chunk.dt,
                          horizon=int(chunk.actions.shape[0]),
                          actions=float64_array(chunk.actions.ravel()),
                          sequence=chunk.sequence, instruction_epoch=result.observation.epoch,
                          preprocess_ms=float(timings.get('preprocess', 0.0)),
                          vision_ms=float(timings.get('vision', 0.0)),
                          prefix_ms=float(timings.get('prefix', 0.0)),
                          denoise_ms=float(timings.get('denoise', 0.0)),
                          total_ms=float(timings.get('total', result.latency_s * 1e3)),
                          vision_cache_hits=int(result.vision_cache_hits))
        stamp_ns = result.observation.stamp_ns
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
        msg.header.frame_id = self._settings.camera_names[0]
        return msg

    def _publish_points(self, points):
        problems = validate_trajectory(points.times_from_start, points.positions,
                                       points.velocities, len(self._settings.joint_names))
        limits = self._limits
        if not problems and (np.any(points.positions < limits.position_lower - 1e-9)
                             or np.any(points.positions > limits.position_upper + 1e-9)):
            problems = ['a point leaves the position limits']
        if problems:
            with self._lock:
                self._counters['commands_blocked'] += 1
            self.get_logger().error(f'trajectory not published: {"; ".join(problems)}',
                                    throttle_duration_sec=LOG_THROTTLE_S)
            return False
        self._trajectory_pub.publish(build_joint_trajectory(
            self._settings.joint_names, points, self._settings.stamp_trajectories))
        with self._lock:
            self._counters['commands_published'] += 1
        return True

    # Status and diagnostics ----------------------------------------------------------------
    def status_timer_callback(self):
        """Publish ~/status and /diagnostics."""
        # One snapshot: a cleanup on another executor thread may clear them meanwhile.
        worker, status_pub, diagnostics_pub = (self._worker, self._status_pub,
                                               self._diagnostics_pub)
        if worker is None or self._planner is None or None in (status_pub, diagnostics_pub):
            return
        status = self._build_status(self._now(), worker)
        status_pub.publish(status)
        diagnostics_pub.publish(self._build_diagnostics(status, worker))

    def _build_status(self, now, worker):
        settings = self._settings
        with self._lock:
            counters = {**self._counters, **self._inputs.counters}
            observation_stamp = self._inputs.last_observation_stamp
            estop, enabled = self._estop_latched, self._enabled
        # A latched e-stop or a disable shows before the planner has taken it (no plan started
        # yet: the planner still says 'not reset').
        output_state = (PolicyStatus.OUTPUT_ESTOP if estop
                        else PolicyStatus.OUTPUT_DISABLED if not enabled
                        else _OUTPUT_STATES[self._planner.state])
        # list() copies the deque in one step; iterating it in Python while the worker thread
        # appends could raise 'deque mutated during iteration'.
        latencies_ms = [s * 1e3 for s in list(worker.latencies_s)]
        rate = self._output_rate.rate()
        engine_stats = worker.engine_stats()
        memory_used, memory_total, utilization = self._gpu.read()
        status = PolicyStatus(
            lifecycle_state='active' if self._active else 'inactive',
            engine_state=_ENGINE_STATES[worker.state], engine_detail=worker.error,
            output_state=output_state,
            hold_reason=(self._planner.hold_reason or '') if self._planner_initialized
            or self._start_refused is None else self._start_refused,
            inference_latency_p50_ms=diagnostics.percentile(latencies_ms, 50),
            inference_latency_p99_ms=diagnostics.percentile(latencies_ms, 99),
            observation_age_s=(-1.0 if observation_stamp is None else now - observation_stamp),
            control_rate_hz=rate, control_rate_target_hz=settings.control_rate,
            control_rate_error=(rate - settings.control_rate) / settings.control_rate,
            gpu_memory_used_bytes=memory_used, gpu_memory_total_bytes=memory_total,
            gpu_utilization_percent=utilization,
            vision_cache_hits=int(engine_stats.get('vision_cache_hits', 0)),
            language_cache_hits=int(engine_stats.get('language_cache_hits', 0)),
            chunks_produced=counters['chunks_produced'],
            chunks_discarded=(worker.counters['discarded'] + counters['chunks_discarded']
                              + counters['chunks_rejected']),
            observations_synced=counters['observations_synced'],
            observations_dropped=counters['observations_dropped'] + worker.counters['dropped'],
            actions_skipped=counters['actions_skipped'],
            inputs_rejected=counters['inputs_rejected'] + worker.counters['inputs_rejected'])
        status.header.stamp = self.get_clock().now().to_msg()
        return status

    def _build_diagnostics(self, status, worker):
        inputs = self._inputs
        with self._lock:
            rejections = dict(inputs.rejections)
            skews = list(inputs.skews)
            counters = {**self._counters, **inputs.counters}
        call_ages_s, output_waits_s = list(self._call_ages_s), list(self._output_waits_s)
        # The newest rejection, the node's own (messages) or the engine's (observations).
        age = time.monotonic() - max(inputs.last_rejection, worker.last_input_rejection)
        return diagnostics.node_diagnostics(
            self.get_fully_qualified_name(), status, worker, counters, rejections, skews,
            last_rejection_age_s=age, jitter_s=self._output_rate.jitter(),
            call_ages_s=call_ages_s, output_waits_s=output_waits_s)

    # Parameters ----------------------------------------------------------------------------
    def _on_set_parameters(self, parameters):
        reason = check_live_change(parameters)
        configured = bool(self._entities)  # interfaces exist from configure to cleanup
        if reason is None and configured and any(
                p.name == 'use_sim_time' and p.value != self.get_parameter(p.name).value
                for p in parameters):
            # Buffered inputs, their stamps and the plan are on the current clock; switching
            # it (no jump callback for a clock change) would leave every watchdog off.
            reason = 'use_sim_time cannot change while configured: clean up first'
        if reason is not None:
            return SetParametersResult(successful=False, reason=reason)
        if self._settings is not None:
            changes = {p.name: p.value for p in parameters if hasattr(self._settings, p.name)}
            self._apply_live_changes(changes)
        return SetParametersResult(successful=True)

    def _apply_live_changes(self, changes):
        with self._lock:
            self._settings = dataclasses.replace(self._settings, **changes)
            self._inputs.update_settings(self._settings)
        if ('blend_duration' in changes and self._planner is not None
                and self._settings.chunk_handover != 'rtc'):
            self._planner.config = dataclasses.replace(self._planner.config,
                                                       blend_duration=changes['blend_duration'])


def main(args=None):
    """Run the control node; exit code 1 if it cannot be configured."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    reuse_large_allocations()
    rclpy.init(args=args)
    node = executor = None
    exit_code = 0
    try:
        node = Pi0ControlNode()
        executor = make_executor(node.get_parameter('executor_threads').value)
        executor.add_node(node)
        if node.get_parameter('autostart').value:
            if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
                if not node.context.ok():
                    return 0  # SIGINT/SIGTERM while the engine loaded: a requested exit
                node.get_logger().fatal('could not configure; exiting')
                return 1
            if node.trigger_activate() != TransitionCallbackReturn.SUCCESS:
                node.get_logger().fatal('could not activate; exiting')
                return 1
        spin_until_shutdown(executor)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as error:  # noqa: B902 - e.g. a parameter override outside its range
        if node is not None and not rclpy.ok():
            # SIGINT/SIGTERM shut the context down while the node was being configured.
            pass
        else:
            print(f'[{NODE_NAME}] fatal: {type(error).__name__}: {error}', file=sys.stderr)
            exit_code = 1
    finally:
        if not close_nodes([node] if node is not None else [], executor):
            exit_code = 1
        rclpy.try_shutdown()
    return exit_code


def close_nodes(nodes, executor):
    """
    Stop the control nodes' threads, destroy them and shut the executor down (process exit).

    Return False if a node's control thread had failed (the process exits with code 1).
    """
    failed = False
    for node in nodes:
        node.stop_threads()
        failed = failed or node.control_thread_error is not None
        if executor is not None:
            executor.remove_node(node)
        node.destroy_node()
    if executor is not None:
        executor.shutdown()
    return not failed


if __name__ == '__main__':
    sys.exit(main())
