# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Parameters of the control node: declarations with descriptors, validation, settings.

Every parameter is declared here once, with a description, a range where one makes sense and
`read_only` where a live change would not make sense (the engine, the joints, the limits). The
embedded defaults drive the SO-101 arm of the MuJoCo simulation (`pi0_ros/sim`).
"""
from dataclasses import dataclass, fields
import math

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.parameter import Parameter

SO101_JOINTS = ['shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll',
                'gripper']
# The SO-101 limits of the simulated arm (pi0_ros/sim/scene.py explains them).
SO101_POSITION_LOWER = [-1.9198, -1.7453, -1.69, -1.658, -2.7438, -0.1745]
SO101_POSITION_UPPER = [1.9198, 1.7453, 1.69, 1.658, 2.8412, 1.7453]
SO101_MAX_VELOCITY = [2.0, 2.0, 2.0, 3.0, 3.0, 3.0]
SO101_MAX_ACCELERATION = [10.0, 10.0, 10.0, 15.0, 15.0, 15.0]

PRECISIONS = ('auto', 'fp32', 'bf16', 'fp16')
RANDOM_MODELS = ('tiny', 'full')
TRANSPORTS = ('raw', 'compressed')
RELIABILITIES = ('best_effort', 'reliable')
TRIGGERS = ('continuous', 'horizon')
HANDOVERS = ('blend', 'rtc')
TURN_RELEASES = ('chunk', 'prefix', 'denoise_tail')
# pi0_ros.engine.config.RTC_SCHEDULES (not imported: the engine brings torch with it).
RTC_SCHEDULES = ('zeros', 'ones', 'linear', 'exp')


class ParameterError(ValueError):
    """A parameter value that cannot be used; the message names the parameter and the value."""

    def __init__(self, name, value, why):
        super().__init__(f"parameter '{name}' = {value!r}: {why}")
        self.name = name


@dataclass(frozen=True)
class Spec:
    """One parameter: default, description, optional numeric range, whether live-changeable."""

    default: object
    description: str
    low: float | None = None
    high: float | None = None
    dynamic: bool = False


SPECS = {
    # Engine.
    'checkpoint': Spec('', 'LeRobot pi0 checkpoint directory; empty = built-in random model '
                           '(random_model; moves the arm without purpose)'),
    'random_model': Spec('tiny', 'Size of the random-weight model used when checkpoint is empty: '
                                 "tiny (runs on a CPU) | full (Pi0's full size, about 6.5 GB in "
                                 'bf16: GPU load tests)'),
    'tokenizer': Spec('', 'Tokenizer directory; empty = the checkpoint directory'),
    'precision': Spec('auto', 'Engine precision: auto | fp32 | bf16 | fp16 (auto = bf16 on GPUs '
                              'that have it, fp16 on others, fp32 on the CPU)'),
    'device': Spec('auto', 'Torch device: auto | cpu | cuda | cuda:N'),
    'prefix_fp8_layers': Spec('', "Prefix layers whose MLP runs in FP8 (GPUs of compute "
                                  "capability 8.9+, half precision): '' = none, 'all', or "
                                  "indices and ranges such as '4-16' (faster at large "
                                  'batches, slightly less exact: benchmarks/RESULTS.md)'),
    'seed': Spec(0, 'Seed of the random model', 0, 2**31 - 1),
    'engine_ready_timeout': Spec(300.0, 'Seconds configure waits for the engine to load and warm '
                                        'up', 1.0, 3600.0),
    'max_consecutive_failures': Spec(3, 'Inference failures in a row before the engine is marked '
                                        'failed', 0, 1000),
    'inference_niceness': Spec(0, 'Scheduling niceness of the inference thread (0 = same as the '
                                  'node); higher yields the CPU to every other process too',
                               0, 19),
    'encode_frames_ahead': Spec(True, 'Encode each camera frame on the inference thread when it '
                                      'arrives and the thread is idle, so an observation only '
                                      'encodes the frames that were not yet encoded'),
    'frame_graph': Spec(True, 'On a GPU: copy the frames of an inference call in one transfer '
                              'and resize, encode and place them with one CUDA graph (off: '
                              'frame by frame, for comparison)'),
    'gpu_turns': Spec(True, "On a GPU: engine calls take turns with other processes' engine "
                            'calls on the same GPU (an exclusive file lock per call), so that '
                            'each runs as fast as alone instead of time-sliced with theirs, on '
                            'the newest observations when its turn comes'),
    'gpu_turn_release': Spec('prefix', "gpu_turns: when a call's turn ends: prefix = once the "
                                       "GPU has run its prefix, so the next process's host work "
                                       "overlaps this call's denoising; denoise_tail = once "
                                       'only the last 4 denoising steps remain (their own CUDA '
                                       'graph); chunk = once its chunk is back (each call alone '
                                       'on the GPU)'),
    # Cameras.
    'camera_names': Spec(['front', 'side', 'wrist'], 'Camera names, in the order the policy '
                                                     'expects its views'),
    'camera_topics': Spec([''], "Image topic per camera, distinct; '' = camera/<name>/image_raw "
                                '(with /compressed for the compressed transport)'),
    'camera_transports': Spec(['raw'], "Per camera: 'raw' (sensor_msgs/Image) or 'compressed' "
                                       '(sensor_msgs/CompressedImage); one entry applies to all'),
    'camera_reliability': Spec('best_effort', 'Camera subscription reliability: best_effort '
                                              '(SensorDataQoS) | reliable'),
    'max_image_width': Spec(1920, 'Wider images are rejected', 1, 16384),
    'max_image_height': Spec(1080, 'Taller images are rejected', 1, 16384),
    # Joints and limits.
    'joint_names': Spec(SO101_JOINTS, 'Joints in command order (= the policy state/action order)'),
    'joint_state_reliability': Spec('best_effort', 'joint_states subscription reliability: '
                                                   'best_effort (SensorDataQoS) | reliable'),
    'position_lower': Spec(SO101_POSITION_LOWER, 'Lower position limit per joint'),
    'position_upper': Spec(SO101_POSITION_UPPER, 'Upper position limit per joint'),
    'max_velocity': Spec(SO101_MAX_VELOCITY, 'Velocity limit per joint (> 0)'),
    'max_acceleration': Spec(SO101_MAX_ACCELERATION, 'Acceleration limit per joint (> 0)'),
    # Timing and control.
    'control_rate': Spec(50.0, 'Rate of JointTrajectory commands, Hz', 1.0, 1000.0),
    'chunk_dt': Spec(1.0 / 30.0, 'Period of the policy actions (the training data rate), s',
                     1e-3, 1.0),
    'points_per_message': Spec(10, 'Trajectory points per published message', 2, 200),
    'stamp_trajectories': Spec(True, 'Stamp each trajectory with the time its plan starts (the '
                                     'controller runs it on the node time grid and drops one '
                                     'that ends in the past; needs both on one ROS clock); '
                                     'false: stamp 0, started when it arrives'),
    'publish_on_chunk': Spec(False, 'Also publish the moment a chunk is accepted, so that its '
                                    'first command does not wait up to one control period for '
                                    'the next tick (the fixed-rate ticks go on unchanged: the '
                                    'controller then receives control_rate plus the chunk rate '
                                    'messages per second)', dynamic=True),
    'chunk_handover': Spec('rtc', 'How a new chunk takes over from the executing one: rtc = '
                                  'Real-Time Chunking: the engine makes it continue the '
                                  'executing plan (the actions of the expected inference '
                                  'delay held to it, the next rtc_execution_horizon guided '
                                  'with a decaying weight) and it takes over at once; blend = '
                                  'blended in over blend_duration (or temporal_ensembling)'),
    'rtc_execution_horizon': Spec(10, 'rtc: actions of the new chunk guided towards the '
                                      'executing plan (the delay counts in), steps', 1, 1000),
    'rtc_schedule': Spec('linear', 'rtc: guidance weight over the execution horizon after the '
                                   'delay: zeros | ones | linear | exp (LeRobot RTCConfig)'),
    'rtc_max_guidance_weight': Spec(10.0, 'rtc: upper bound of the guidance weight', 1e-3,
                                    1e4),
    'rtc_jacobian': Spec(False, "rtc: false = LeRobot 0.6.1's guidance (the velocity treated as "
                                "a constant of the noisy actions); true = the paper's "
                                'vector-Jacobian product through the action expert (one more '
                                'backward pass of the expert per step)'),
    'blend_duration': Spec(0.2, 'chunk_handover blend: seconds over which a new chunk is blended '
                                'into the executing one', 0.0, 5.0, dynamic=True),
    'temporal_ensembling': Spec(False, 'chunk_handover blend: average overlapping chunks '
                                       '(ACT-style) instead of blending at the seam'),
    'ensembling_decay': Spec(0.1, 'Temporal ensembling weight decay per action', 0.0, 10.0),
    'inference_trigger': Spec('continuous', 'continuous = infer on every synchronized '
                                            'observation (latest wins); horizon = only when the '
                                            'unexecuted plan is shorter than replan_horizon',
                              dynamic=True),
    'replan_horizon': Spec(0.5, 'Seconds of plan left below which horizon-triggered inference '
                                'runs', 0.0, 60.0, dynamic=True),
    # Synchronization and staleness.
    'sync_max_skew': Spec(0.05, 'Largest stamp difference between the cameras of one '
                                'observation, s', 1e-4, 5.0, dynamic=True),
    'sync_queue_size': Spec(10, 'Messages kept per camera while matching (>= 2: a set held '
                            'for a better match needs room for the next frame)', 2, 100),
    'joint_state_max_gap': Spec(0.1, 'Largest gap between joint states interpolated across, s',
                                1e-3, 5.0),
    'joint_state_max_extrapolation': Spec(0.1, 'How far past the newest joint state its '
                                               'position is still used (moved on with its '
                                               'velocity, at most max_velocity, where the '
                                               'joint states carry one; held otherwise), s',
                                          0.0, 5.0),
    'observation_timeout': Spec(0.5, 'Hold the arm when the newest observation is older, s',
                                0.01, 60.0, dynamic=True),
    'joint_state_timeout': Spec(0.25, 'Hold the arm when joint states are older, s', 0.01, 60.0,
                                dynamic=True),
    'max_future_stamp': Spec(0.5, 'Reject messages stamped further in the future, s',
                             0.0, 60.0, dynamic=True),
    'max_instruction_length': Spec(2000, 'Longer instructions are rejected, characters',
                                   1, 100000),
    # Node.
    'autostart': Spec(True, 'Configure and activate on start-up'),
    'executor_threads': Spec(0, '0 = single-threaded executor for the inputs (inference has '
                                'its own thread, the control timer too where it may run at '
                                'real-time priority); N = a MultiThreadedExecutor with N '
                                'threads', 0, 64),
    'status_rate': Spec(2.0, 'Rate of ~/status and /diagnostics, Hz', 0.1, 100.0),
    'control_thread_priority': Spec(10, 'SCHED_FIFO priority (1-99) of a thread of its own for '
                                        'the control timer; needs CAP_SYS_NICE or an rtprio '
                                        'limit. Refused (a warning says so) or 0: the executor '
                                        'runs the timer at normal priority', 0, 99),
}


def descriptor(name, spec):
    """Build the ParameterDescriptor of one parameter."""
    desc = ParameterDescriptor(name=name, description=spec.description,
                               read_only=not spec.dynamic)
    if spec.low is not None:
        if isinstance(spec.default, int) and not isinstance(spec.default, bool):
            desc.integer_range = [IntegerRange(from_value=int(spec.low), to_value=int(spec.high),
                                               step=1)]
        else:
            desc.floating_point_range = [FloatingPointRange(from_value=float(spec.low),
                                                            to_value=float(spec.high), step=0.0)]
    return desc


def declare_all(node):
    """Declare every parameter on the node (values from overrides, else the defaults)."""
    for name, spec in SPECS.items():
        node.declare_parameter(name, spec.default, descriptor(name, spec))


@dataclass(frozen=True)
class Settings:
    """Validated parameter values (see SPECS for each field's meaning)."""

    checkpoint: str
    random_model: str
    tokenizer: str
    precision: str
    device: str
    prefix_fp8_layers: str
    seed: int
    engine_ready_timeout: float
    max_consecutive_failures: int
    inference_niceness: int
    encode_frames_ahead: bool
    frame_graph: bool
    gpu_turns: bool
    gpu_turn_release: str
    camera_names: list
    camera_topics: list
    camera_transports: list
    camera_reliability: str
    max_image_width: int
    max_image_height: int
    joint_names: list
    joint_state_reliability: str
    position_lower: list
    position_upper: list
    max_velocity: list
    max_acceleration: list
    control_rate: float
    chunk_dt: float
    points_per_message: int
    stamp_trajectories: bool
    publish_on_chunk: bool
    chunk_handover: str
    rtc_execution_horizon: int
    rtc_schedule: str
    rtc_max_guidance_weight: float
    rtc_jacobian: bool
    blend_duration: float
    temporal_ensembling: bool
    ensembling_decay: float
    inference_trigger: str
    replan_horizon: float
    sync_max_skew: float
    sync_queue_size: int
    joint_state_max_gap: float
    joint_state_max_extrapolation: float
    observation_timeout: float
    joint_state_timeout: float
    max_future_stamp: float
    max_instruction_length: int
    autostart: bool
    executor_threads: int
    control_thread_priority: int
    status_rate: float


def _choice(name, value, choices):
    if value not in choices:
        raise ParameterError(name, value, f"must be one of {', '.join(choices)}")


def _per_camera(name, values, count, fill):
    """Expand a per-camera list: [] or [''] -> defaults, one entry -> all cameras."""
    values = list(values)
    if values in ([], ['']):
        return [fill(i) for i in range(count)]
    if len(values) == 1 and count > 1:
        return values * count
    if len(values) != count:
        raise ParameterError(name, values, f'needs one entry per camera ({count})')
    return values


def _camera_topics(topics, cameras, transports):
    """
    Return one valid, distinct topic per camera: [] or [''] -> all defaults, '' -> the default.

    Unlike the transports, one topic is not repeated for every camera: each view would then
    get the same frames.
    """
    from rclpy.exceptions import InvalidTopicNameException
    from rclpy.validate_topic_name import validate_topic_name

    topics = list(topics)
    if topics in ([], ['']):
        topics = [''] * len(cameras)
    if len(topics) != len(cameras):
        raise ParameterError('camera_topics', topics,
                             f'needs one entry per camera ({len(cameras)}), or none')
    resolved = []
    for camera, transport, topic in zip(cameras, transports, topics):
        name = 'camera_topics' if topic else 'camera_names'  # the default is built from it
        topic = topic or (f'camera/{camera}/image_raw'
                          + ('/compressed' if transport == 'compressed' else ''))
        try:
            validate_topic_name(topic)
        except InvalidTopicNameException as error:
            raise ParameterError(name, topic, f'is not a valid ROS topic: {error}') from None
        resolved.append(topic)
    if len(set(resolved)) != len(resolved):
        raise ParameterError('camera_topics', resolved, 'needs a distinct topic per camera')
    return resolved


def validate_value(name, value):
    """Check one value alone (used for live changes); raise ParameterError."""
    spec = SPECS[name]
    if isinstance(value, float) and not math.isfinite(value):
        raise ParameterError(name, value, 'must be finite')
    if spec.low is not None and not spec.low <= value <= spec.high:
        raise ParameterError(name, value, f'must be within [{spec.low}, {spec.high}]')
    if name == 'precision':
        _choice(name, value, PRECISIONS)
    elif name == 'random_model':
        _choice(name, value, RANDOM_MODELS)
    elif name == 'inference_trigger':
        _choice(name, value, TRIGGERS)
    elif name == 'chunk_handover':
        _choice(name, value, HANDOVERS)
    elif name == 'gpu_turn_release':
        _choice(name, value, TURN_RELEASES)
    elif name == 'rtc_schedule':
        _choice(name, value, RTC_SCHEDULES)
    elif name in ('camera_reliability', 'joint_state_reliability'):
        _choice(name, value, RELIABILITIES)
    elif name == 'prefix_fp8_layers' and value.strip():
        from pi0_ros.engine.config import parse_layer_ranges  # the engine (torch) only if set
        try:
            parse_layer_ranges(value)
        except ValueError as error:
            raise ParameterError(name, value, str(error)) from None
    elif name == 'device' and not (value in ('auto', 'cpu', 'cuda') or (
            value.startswith('cuda:') and value[5:].isdigit())):
        raise ParameterError(name, value, 'must be auto, cpu, cuda or cuda:N')


def read_settings(node):
    """Read and validate all parameters; raise ParameterError naming the first bad one."""
    return settings_from_values({name: node.get_parameter(name).value for name in SPECS})


def settings_from_values(values):
    """Validate a full {name: value} mapping into Settings; raise ParameterError."""
    values = dict(values)
    for name, value in values.items():
        validate_value(name, value)
    cameras = list(values['camera_names'])
    if not cameras or any(not c or '/' in c for c in cameras) or len(set(cameras)) != len(cameras):
        raise ParameterError('camera_names', cameras, 'needs unique, non-empty names without /')
    transports = _per_camera('camera_transports', values['camera_transports'], len(cameras),
                             lambda i: 'raw')
    for transport in transports:
        _choice('camera_transports', transport, TRANSPORTS)
    values['camera_transports'] = transports
    values['camera_topics'] = _camera_topics(values['camera_topics'], cameras, transports)
    joints = list(values['joint_names'])
    if not joints or any(not j for j in joints) or len(set(joints)) != len(joints):
        raise ParameterError('joint_names', joints, 'needs unique, non-empty joint names')
    for name in ('position_lower', 'position_upper', 'max_velocity', 'max_acceleration'):
        array = [float(v) for v in values[name]]
        if len(array) != len(joints):
            raise ParameterError(name, array, f'needs one value per joint ({len(joints)})')
        if not all(math.isfinite(v) for v in array):
            raise ParameterError(name, array, 'must be finite')
        if name.startswith('max_') and min(array) <= 0.0:
            raise ParameterError(name, array, 'must be > 0 for every joint')
        values[name] = array
    for joint, low, high in zip(joints, values['position_lower'], values['position_upper']):
        if not low < high:
            raise ParameterError('position_lower', values['position_lower'],
                                 f"must be below position_upper for joint '{joint}'")
    return Settings(**{f.name: values[f.name] for f in fields(Settings)})


def check_live_change(parameters):
    """Validate a set-parameters request; return None if fine, else the reason."""
    for parameter in parameters:
        if parameter.name not in SPECS:
            continue
        spec = SPECS[parameter.name]
        value = parameter.value
        if parameter.type_ == Parameter.Type.NOT_SET:
            return f"parameter '{parameter.name}' cannot be undeclared"
        if type(value) is not type(spec.default) and not (
                isinstance(spec.default, float) and isinstance(value, int)):
            return f"parameter '{parameter.name}' must be of type {type(spec.default).__name__}"
        try:
            validate_value(parameter.name, value)
        except ParameterError as error:
            return str(error)
    return None
