# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Where the control node's inference milliseconds go (issue 30), measured in one process.

The control node (pi0_ros.node.Pi0ControlNode, unchanged) runs in this process; timing wrappers
are monkeypatched around methods of the worker, the engine and the node (no product file is
changed). The soak's own feeder processes (python -m pi0_ros.tools.soak --feeder
cameras|joints) feed it. Phases, in this order (each skipped when the time budget is spent):
  A_all3         the bench's batch-1 call (python -m pi0_ros.tools.bench's time_engine: new frames,
                 all 3 encoded in the call) on the node's own engine, back to back, no feeders
  A_last_cam     2 cameras encoded ahead (encode_frames), the last in the call (the node's case)
  A_all_ahead    every camera encoded ahead, none in the call
  A_paced        A_last_cam paced at the camera rate, GPU idle in between (clocks, idle effects)
  B_soak         the GPU soak's load: 3 x 640x480 rgb8 at 30 Hz, joint states at 500 Hz
  B_on_chunk     the same with publish_on_chunk: a chunk's first command goes out when it
                 arrives instead of at the next control tick (reaction)
  B_pyspy        the same while py-spy samples this process (all / active / GIL-holding stacks)
  B_niceflip     the same with the inference thread's niceness flipped: 0 -> 10, or any
                 other value -> 0 (the node's inference_niceness; default 0 since 2f669fa)
  B_switch5ms    the same with sys.setswitchinterval(0.005) (the node sets 0.0002)
  C_joints50     cameras 30 Hz, joint states 50 Hz (a tenth of the executor's callbacks)
  C_cams5        cameras 5 Hz, joint states 500 Hz (a sixth of the image traffic)
  C_inject_j500  no camera feeder: observations injected at the camera rate straight into the
                 worker (offer_frame x3, then submit, as image_callback does), joints 500 Hz
  C_inject_quiet the same with no feeder at all
Per inference: wait (observation handed to the worker -> infer starts), host segments (validate,
state/noise, frame upload, resize launch, graph launches, the final synchronize, result
handling), GPU time from CUDA events (the engine's stage events and, per graph replay, an event
pair around it: pure GPU time, so span - pure = GPU idle waiting for the host), whether the GPU
had already drained when the host launched the next stage, and the reaction: camera stamp of the
set's last frame -> first joint_trajectory published after the chunk was accepted.
Writes summary.json, table.txt, records.jsonl.gz and pyspy.tar.gz (raw stacks) into --out.
"""
import argparse
from collections import Counter, defaultdict, OrderedDict
import gzip
import json
import os
from pathlib import Path
import re
import subprocess
import sys
import tarfile
import threading
import time
import traceback

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository root (pi0_ros)

INSTRUCTION = 'pick up the red block and put it in the bowl'  # pi0_ros.tools.bench.INSTRUCTION
PHASES = ('A_all3', 'A_last_cam', 'A_all_ahead', 'A_paced', 'B_soak', 'B_on_chunk', 'B_pyspy',
          'B_niceflip', 'B_switch5ms', 'C_joints50', 'C_cams5', 'C_inject_j500', 'C_inject_quiet')
MS = 1e3


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--out', default='reports/node_gap')
    parser.add_argument('--device', default='cuda')
    parser.add_argument('--random-model', default='full', choices=('tiny', 'full'))
    parser.add_argument('--precision', default='bf16')
    parser.add_argument('--budget', type=float, default=420.0,
                        help='seconds this script may take; phases that do not fit are skipped')
    parser.add_argument('--bench-json', default='',
                        help="python -m pi0_ros.tools.bench's bench.json")
    parser.add_argument('--pyspy', default='', help='py-spy binary (else a Python sampler)')
    parser.add_argument('--phases', default=','.join(PHASES))
    parser.add_argument('--camera-rate', type=float, default=30.0)
    parser.add_argument('--joint-rate', type=float, default=500.0)
    parser.add_argument('--low-camera-rate', type=float, default=5.0)
    parser.add_argument('--low-joint-rate', type=float, default=50.0)
    parser.add_argument('--image-width', type=int, default=640)
    parser.add_argument('--image-height', type=int, default=480)
    parser.add_argument('--iters', type=int, default=150, help='calls per A phase')
    parser.add_argument('--scale', type=float, default=1.0, help='multiplies every phase length')
    parser.add_argument('--pyspy-rate', type=int, default=250)
    parser.add_argument('--node-parameter', action='append', default=[], metavar='NAME:=VALUE')
    parser.add_argument('--dry-run', action='store_true',
                        help='CPU, tiny model, low rates, short phases (a check of this script)')
    args = parser.parse_args(argv)
    if args.dry_run:
        args.device, args.random_model, args.precision = 'cpu', 'tiny', 'auto'
        args.camera_rate, args.joint_rate = 10.0, 100.0
        args.low_camera_rate, args.low_joint_rate = 3.0, 20.0
        args.iters = min(args.iters, 12)
        args.scale = min(args.scale, 0.2)
        args.pyspy_rate = min(args.pyspy_rate, 100)
    return args


def seconds(args, name):
    """Length of a measured phase (s)."""
    base = {'warm': 10, 'B_soak': 45, 'B_on_chunk': 30, 'B_pyspy': 15, 'B_niceflip': 20,
            'B_switch5ms': 15, 'C_joints50': 20, 'C_cams5': 30, 'C_inject_j500': 20,
            'C_inject_quiet': 15, 'settle': 4}[name]
    return max(2.0 if name == 'settle' else 3.0, base * args.scale)


def pct(values):
    values = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if not values.size:
        return None
    return {'p50': round(float(np.percentile(values, 50)), 3),
            'p90': round(float(np.percentile(values, 90)), 3),
            'p99': round(float(np.percentile(values, 99)), 3),
            'mean': round(float(values.mean()), 3), 'n': int(values.size)}


# ------------------------------------------------------------------------------------------
# The instrumentation
class Probe:
    """Timing records of the worker, the engine and the node, by phase."""

    def __init__(self):
        self.phase = 'startup'
        self.tls = threading.local()
        self.lock = threading.Lock()
        self.records = []                    # finished inference records (dicts)
        self.encodes = defaultdict(list)     # phase -> encode-ahead records
        self.submits = OrderedDict()         # id(observation) -> (perf, replaced)
        self.by_result = OrderedDict()       # id(ChunkResult) -> record
        self.arrivals = OrderedDict()        # (camera index, stamp_ns) -> (wall ns, perf)
        self.callbacks = defaultdict(lambda: defaultdict(list))  # phase -> kind -> durations s
        self.lags = defaultdict(list)        # phase -> image callback start - stamp (ms)
        self.counts = defaultdict(Counter)   # phase -> counter
        self.last_encode = (0.0, 0.0)
        self.worker_tid = None
        self.executor_tid = None
        self.cuda = False
        self.stage_events = None
        self.torch = None

    # -- records ---------------------------------------------------------------------------
    def begin_infer(self, kind, observation=None, t_submit=None):
        now = time.perf_counter()
        rec = {'phase': self.phase, 'kind': kind, 't_start': now, 'seg': Counter(),
               'marks': {}, 'starved': {}}
        if observation is not None:
            rec['stamp_ns'] = observation.stamp_ns
            if t_submit is not None:
                rec['wait_ms'] = (now - t_submit) * MS
                enc0, enc1 = self.last_encode
                rec['wait_in_encode_ms'] = max(0.0, min(now, enc1) - max(t_submit, enc0)) * MS
            arrivals = [self.arrivals.get((key[0], key[1])) if isinstance(key, tuple) else None
                        for key in observation.frame_keys]
            arrivals = [a for a in arrivals if a is not None]
            if arrivals and t_submit is not None:
                last_wall, last_perf = max(arrivals, key=lambda a: a[1])
                rec['dds_ms'] = (last_wall - observation.stamp_ns) / 1e6
                rec['callback_to_submit_ms'] = (t_submit - last_perf) * MS
        self.tls.rec = rec
        return rec

    def end_infer(self, rec, output):
        """Close a record: engine timings, GPU events, derived segments."""
        self.tls.rec = None
        now = time.perf_counter()
        rec['t_end'] = now
        if output is None:
            with self.lock:
                self.counts[rec['phase']]['failed_or_rejected'] += 1
            return
        timings = dict(output.timings_ms)
        rec['engine_total_ms'] = timings.get('total')
        rec['hits'] = int(output.vision_cache_hits)
        for stage in ('preprocess', 'vision', 'prefix', 'denoise'):
            rec[f'gpu_span_{stage}_ms'] = timings.get(stage) if self.cuda else None
        if self.cuda:
            rec['gpu_span_ms'] = sum(timings[s] for s in ('preprocess', 'vision', 'prefix',
                                                          'denoise'))
            pure = 0.0
            for stage, (start, end) in self.stage_events.items():
                if rec['marks'].get(f'{stage}0') is not None:
                    value = start.elapsed_time(end)
                    rec[f'gpu_pure_{stage}_ms'] = value
                    pure += value
            rec['gpu_pure_ms'] = pure
            rec['gpu_idle_est_ms'] = sum(
                (timings[s] - rec.get(f'gpu_pure_{s}_ms', 0.0)) for s in ('vision', 'prefix',
                                                                          'denoise')
                if f'gpu_pure_{s}_ms' in rec)
        m = rec['marks']
        seg = rec.pop('seg')

        def span(a, b):
            return (m[b] - m[a]) * MS if a in m and b in m else None

        rec['pending'] = rec.get('pending', 0)
        rec['validate_ms'] = seg['validate'] * MS
        rec['lock_wait_ms'] = (span('engine0', 'locked0') or 0.0) - rec['validate_ms']
        rec['host_prep_ms'] = span('locked0', 'enc0')
        rec['upload_ms'] = seg['upload'] * MS
        rec['resize_launch_ms'] = seg['resize'] * MS
        rec['vision_launch_ms'] = seg['launch_vision'] * MS
        enc = span('enc0', 'enc1')
        rec['encode_other_ms'] = None if enc is None else enc - (
            seg['upload'] + seg['resize'] + seg['launch_vision']) * MS
        rec['to_prefix_ms'] = span('enc1', 'prefix0')
        rec['prefix_launch_ms'] = seg['launch_prefix'] * MS
        rec['denoise_launch_ms'] = seg['launch_denoise'] * MS
        rec['to_sync_ms'] = span('denoise1', 'sync0')
        rec['sync_ms'] = seg['sync'] * MS if 'sync0' in m else None
        rec['post_engine_ms'] = span('sync1' if 'sync1' in m else 'denoise1', 'engine1')
        rec['host_to_prefix_ms'] = span('engine0', 'prefix0')
        rec['engine_wall_ms'] = span('engine0', 'engine1')
        rec['pre_engine_ms'] = (m['engine0'] - rec['t_start']) * MS if 'engine0' in m else None
        rec['post_worker_ms'] = (now - m['engine1']) * MS if 'engine1' in m else None
        rec['worker_ms'] = (now - rec['t_start']) * MS
        rec['starved_prefix'] = rec['starved'].get('prefix')
        rec['starved_denoise'] = rec['starved'].get('denoise')
        rec['starved_vision'] = rec['starved'].get('vision')
        rec['t_rel_ms'] = {k: round((v - rec['t_start']) * MS, 3) for k, v in m.items()}
        del rec['marks'], rec['starved']
        with self.lock:
            self.records.append(rec)

    # -- hooks -----------------------------------------------------------------------------
    def install(self):
        """Monkeypatch the product classes (before the node is created)."""
        import torch

        from pi0_ros.engine.engine import Pi0Engine
        from pi0_ros.inputs import NodeInputs
        from pi0_ros.node import Pi0ControlNode
        from pi0_ros.worker import InferenceWorker
        self.torch = torch
        probe = self

        def timed(cls, name, label=None, mark=None):
            original = getattr(cls, name)

            def wrapper(self, *args, **kwargs):
                rec = getattr(probe.tls, 'rec', None)
                if rec is None:
                    return original(self, *args, **kwargs)
                start = time.perf_counter()
                if mark:
                    rec['marks'].setdefault(mark + '0', start)
                try:
                    return original(self, *args, **kwargs)
                finally:
                    end = time.perf_counter()
                    if label:
                        rec['seg'][label] += end - start
                    if mark:
                        rec['marks'][mark + '1'] = end
            wrapper.__wrapped__ = original
            setattr(cls, name, wrapper)

        # Engine: the call, validation, lock, frames, launches.
        timed(Pi0Engine, '_infer', mark='engine')
        timed(Pi0Engine, '_validate', label='validate')
        timed(Pi0Engine, '_infer_locked', mark='locked')
        timed(Pi0Engine, '_upload', label='upload')
        timed(Pi0Engine, '_prepare_pixels', label='resize')
        original_encode_pending = Pi0Engine._encode_pending

        def encode_pending(self, pending, preprocessed):
            rec = getattr(probe.tls, 'rec', None)
            if rec is None:
                return original_encode_pending(self, pending, preprocessed)
            rec['pending'] = rec.get('pending', 0) + len(pending)
            rec['marks'].setdefault('enc0', time.perf_counter())
            try:
                return original_encode_pending(self, pending, preprocessed)
            finally:
                rec['marks']['enc1'] = time.perf_counter()
        Pi0Engine._encode_pending = encode_pending

        original_run_stage = Pi0Engine._run_stage
        previous_event = {'vision': 'preprocess', 'prefix': 'vision', 'denoise': 'prefix'}

        def run_stage(self, stage, size):
            rec = getattr(probe.tls, 'rec', None)
            if rec is None:
                return original_run_stage(self, stage, size)
            # Real-Time Chunking's guided stages are timed as the plain ones they replace, and
            # the frames graph (upload's table, resize, vision, placement) as vision.
            name = stage.removesuffix('_rtc')
            name = 'vision' if name == 'frames' else name
            gpu = probe.cuda and rec['kind'] == 'infer'
            if gpu:
                # Had the GPU already run everything queued before this launch? (idle: starved)
                rec['starved'].setdefault(name, bool(self._events[previous_event[name]]
                                                     .query()))
                probe.stage_events[name][0].record()
            start = time.perf_counter()
            rec['marks'].setdefault(name + '0', start)
            try:
                return original_run_stage(self, stage, size)
            finally:
                end = time.perf_counter()
                if gpu:
                    probe.stage_events[name][1].record()
                rec['seg']['launch_' + name] += end - start
                rec['marks'][name + '1'] = end
        Pi0Engine._run_stage = run_stage

        original_sync = torch.cuda.Stream.synchronize

        def synchronize(self):
            rec = getattr(probe.tls, 'rec', None)
            if rec is None:
                return original_sync(self)
            start = time.perf_counter()
            rec['marks'].setdefault('sync0', start)
            try:
                return original_sync(self)
            finally:
                end = time.perf_counter()
                rec['seg']['sync'] += end - start
                rec['marks']['sync1'] = end
        torch.cuda.Stream.synchronize = synchronize

        # Worker: hand-over, the call, encoding ahead.
        original_submit_for = InferenceWorker.submit_for

        def submit_for(self, client, observation):
            waiting = client.slot is not None
            with probe.lock:
                probe.submits[id(observation)] = (time.perf_counter(), waiting)
                while len(probe.submits) > 64:
                    probe.submits.popitem(last=False)
                probe.counts[probe.phase]['submitted'] += 1
                if waiting:
                    probe.counts[probe.phase]['replaced_in_slot'] += 1
            return original_submit_for(self, client, observation)
        InferenceWorker.submit_for = submit_for

        original_worker_infer = InferenceWorker._infer

        def worker_infer(self, batch, observations, requests=None):
            # The probe drives one robot: a batch of one observation.
            (observation,) = observations
            probe.worker_tid = threading.get_native_id()
            with probe.lock:
                t_submit, _ = probe.submits.pop(id(observation), (None, None))
            rec = probe.begin_infer('infer', observation, t_submit)
            result = None
            try:
                (result,) = original_worker_infer(self, batch, observations, requests)
            finally:
                probe.end_infer(rec, result)  # a ChunkResult: timings_ms, vision_cache_hits
            if result is not None:
                rec['latency_s_worker_ms'] = result.latency_s * MS
                with probe.lock:
                    probe.by_result[id(result)] = rec
                    while len(probe.by_result) > 64:
                        probe.by_result.popitem(last=False)
            return [result]
        InferenceWorker._infer = worker_infer

        original_encode_ahead = InferenceWorker._encode_ahead

        def encode_ahead(self, client, camera, frame, key):
            rec = {'phase': probe.phase, 'kind': 'encode', 'seg': Counter(), 'marks': {},
                   'starved': {}}
            probe.tls.rec = rec
            start = time.perf_counter()
            try:
                return original_encode_ahead(self, client, camera, frame, key)
            finally:
                end = time.perf_counter()
                probe.tls.rec = None
                probe.last_encode = (start, end)
                seg = rec['seg']
                with probe.lock:
                    probe.encodes[rec['phase']].append(
                        {'ms': (end - start) * MS, 'upload_ms': seg['upload'] * MS,
                         'sync_ms': seg['sync'] * MS,
                         'observation_waiting': client.slot is not None})
        InferenceWorker._encode_ahead = encode_ahead

        # Node: callbacks, result hand-over, the control tick that takes the chunk.
        original_image_callback = NodeInputs.image_callback

        def image_callback(self, index, camera, msg):
            wall, start = time.time_ns(), time.perf_counter()
            stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            with probe.lock:
                probe.arrivals[(camera, stamp_ns)] = (wall, start)
                while len(probe.arrivals) > 256:
                    probe.arrivals.popitem(last=False)
            try:
                return original_image_callback(self, index, camera, msg)
            finally:
                phase = probe.phase
                probe.callbacks[phase]['image'].append(time.perf_counter() - start)
                probe.lags[phase].append((wall - stamp_ns) / 1e6)
        NodeInputs.image_callback = image_callback

        def count_duration(cls, name, kind):
            original = getattr(cls, name)

            def wrapper(self, *args, **kwargs):
                start = time.perf_counter()
                try:
                    return original(self, *args, **kwargs)
                finally:
                    probe.callbacks[probe.phase][kind].append(time.perf_counter() - start)
            setattr(cls, name, wrapper)

        count_duration(NodeInputs, 'joint_state_callback', 'joint')
        count_duration(Pi0ControlNode, 'status_timer_callback', 'status')

        original_on_result = Pi0ControlNode._on_chunk_result

        def on_chunk_result(self, result):
            start = time.perf_counter()
            try:
                return original_on_result(self, result)
            finally:
                end = time.perf_counter()
                rec = probe.by_result.get(id(result))
                if rec is not None:
                    rec['on_result_ms'] = (end - start) * MS
                    rec['t_result'] = end
        Pi0ControlNode._on_chunk_result = on_chunk_result

        original_tick = Pi0ControlNode._control_tick

        def control_tick(self, *args, **kwargs):
            probe.tls.tick = []
            start = time.perf_counter()
            try:
                return original_tick(self, *args, **kwargs)
            finally:
                probe.callbacks[probe.phase]['control_tick'].append(time.perf_counter() - start)
                probe.tls.tick = None
        Pi0ControlNode._control_tick = control_tick

        original_accept = Pi0ControlNode._accept_chunk

        def accept_chunk(self, result, now):
            before = self._counters['chunks_produced']
            out = original_accept(self, result, now)
            with probe.lock:
                rec = probe.by_result.pop(id(result), None)
            if rec is not None:
                rec['t_accept'] = time.perf_counter()
                rec['accepted'] = self._counters['chunks_produced'] > before
                if 't_result' in rec:
                    rec['result_to_accept_ms'] = (rec['t_accept'] - rec['t_result']) * MS
                tick = getattr(probe.tls, 'tick', None)
                if tick is not None and rec['accepted']:
                    tick.append(rec)
            return out
        Pi0ControlNode._accept_chunk = accept_chunk

        original_publish = Pi0ControlNode._publish_points

        def publish_points(self, points):
            published = original_publish(self, points)
            tick = getattr(probe.tls, 'tick', None)
            if published and tick:
                wall, now = time.time_ns(), time.perf_counter()
                for rec in tick:
                    if 'stamp_ns' in rec:
                        rec['reaction_ms'] = (wall - rec['stamp_ns']) / 1e6
                    rec['accept_to_publish_ms'] = (now - rec['t_accept']) * MS
                tick.clear()
            return published
        Pi0ControlNode._publish_points = publish_points

    def make_events(self, device):
        import torch
        self.cuda = device.type == 'cuda'
        if self.cuda:
            self.stage_events = {stage: (torch.cuda.Event(enable_timing=True),
                                         torch.cuda.Event(enable_timing=True))
                                 for stage in ('vision', 'prefix', 'denoise')}


# ------------------------------------------------------------------------------------------
# Threads' CPU time and GPU clocks
def thread_cpu():
    """{native thread id: (comm, cpu seconds)} of this process."""
    ticks = os.sysconf('SC_CLK_TCK')
    out = {}
    for tid in os.listdir('/proc/self/task'):
        try:
            with open(f'/proc/self/task/{tid}/stat') as handle:
                fields = handle.read().rsplit(')', 1)[1].split()
            with open(f'/proc/self/task/{tid}/comm') as handle:
                comm = handle.read().strip()
        except OSError:
            continue
        out[int(tid)] = (comm, (int(fields[11]) + int(fields[12])) / ticks)
    return out


class GpuClock:
    """SM clock, power and utilization through NVML (None without it)."""

    def __init__(self, device):
        self.samples = []
        self.handle = None
        try:
            from pi0_ros import nvml
            found = nvml.device_handle(device)
            if found is not None:
                self.nvml, self.handle = found
        except Exception:  # noqa: B902 - no NVML: no clocks
            self.handle = None

    def sample(self, phase):
        if self.handle is None:
            return
        try:
            n = self.nvml
            self.samples.append((phase, n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_SM),
                                 n.nvmlDeviceGetPowerUsage(self.handle) / 1e3,
                                 n.nvmlDeviceGetUtilizationRates(self.handle).gpu))
        except Exception:  # noqa: B902 - a transient NVML error: no sample
            pass

    def summary(self, phase):
        rows = [s for s in self.samples if s[0] == phase]
        if not rows:
            return None
        return {'sm_clock_mhz_p50': float(np.median([r[1] for r in rows])),
                'power_w_p50': round(float(np.median([r[2] for r in rows])), 1),
                'utilization_p50': float(np.median([r[3] for r in rows])), 'n': len(rows)}


# ------------------------------------------------------------------------------------------
# py-spy
def run_pyspy(binary, pid, seconds, rate, out_dir):
    """Three concurrent samplers (--idle: all, default: active, --gil: GIL holder)."""
    files, procs = {}, []
    for mode, flags in (('all', ['--idle']), ('active', []), ('gil', ['--gil'])):
        path = out_dir / f'pyspy_{mode}.txt'
        files[mode] = path
        command = [binary, 'record', '--pid', str(pid), '--rate', str(rate), '--duration',
                   str(int(round(seconds))), '--format', 'raw', '--threads', '--nonblocking',
                   '-o', str(path), *flags]
        procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL))
    logs = []
    for proc in procs:
        try:
            logs.append(proc.communicate(timeout=seconds + 30)[0].decode(errors='replace'))
        except subprocess.TimeoutExpired:
            proc.kill()
            logs.append('timed out')
    return files, logs


class PythonSampler:
    """Fallback without py-spy: sys._current_frames() of the worker thread (takes the GIL)."""

    def __init__(self, rate):
        self.rate = rate
        self.stacks = Counter()
        self._stop = threading.Event()
        self._thread = None

    def start(self, ident):
        def loop():
            period = 1.0 / self.rate
            while not self._stop.wait(period):
                frame = sys._current_frames().get(ident)
                stack = []
                while frame is not None:
                    code = frame.f_code
                    stack.append(f'{code.co_qualname} ({Path(code.co_filename).name}:'
                                 f'{frame.f_lineno})')
                    frame = frame.f_back
                self.stacks[';'.join(reversed(stack))] += 1
        self._thread = threading.Thread(target=loop, name='probe_sampler', daemon=True)
        self._thread.start()

    def stop(self, path):
        self._stop.set()
        self._thread.join()
        with open(path, 'w') as handle:
            for stack, count in self.stacks.items():
                handle.write(f'thread (0): pi0_inference;{stack} {count}\n')


def parse_collapsed(path):
    """{(tid, name): Counter(stack tuple -> samples)} of a py-spy raw file."""
    threads = defaultdict(Counter)
    if not Path(path).exists():
        return threads
    for line in Path(path).read_text(errors='replace').splitlines():
        stack, _, count = line.rpartition(' ')
        if not stack or not count.isdigit():
            continue
        parts = stack.split(';')
        match = re.match(r'thread \(([^)]*)\)(?::\s*(.*))?$', parts[0])
        if match is None:
            continue
        threads[(match.group(1), (match.group(2) or '').strip())][tuple(parts[1:])] += int(count)
    return threads


PRODUCT_FILES = ('engine.py', 'worker.py', 'model.py', 'kernels.py', 'preprocess.py', 'gemm.py',
                 'attention.py', 'node.py', 'conversions.py', 'sync.py')


def worker_state(stack):
    text = ';'.join(stack)
    if 'InferenceWorker._infer ' in text or 'worker_infer ' in text:
        return 'infer'
    if '_encode_ahead' in text or 'encode_ahead ' in text:
        return 'encode_ahead'
    if 'Condition.wait' in text:
        return 'idle_waiting_for_work'
    return 'other'


def product_frame(stack):
    """Return the deepest frame of product code (the line whose host cost this is)."""
    for frame in reversed(stack):
        if any(f'{name}:' in frame for name in PRODUCT_FILES):
            return frame
    return stack[-1] if stack else '?'


def summarize_pyspy(files, rate, inferences, worker_tid):
    """GIL share per thread; the worker's time per inference by state and top product lines."""
    data = {mode: parse_collapsed(path) for mode, path in files.items()}
    everything = data.get('all', {})
    if not everything:
        return {'error': 'no samples'}
    totals = {key: sum(c.values()) for key, c in everything.items()}
    ticks = max(totals.values())
    gil = data.get('gil', {})
    gil_share = sorted(((f'{name or "?"} ({tid})', round(100.0 * sum(c.values()) / ticks, 1))
                        for (tid, name), c in gil.items()), key=lambda x: -x[1])
    active = data.get('active', {})
    active_share = sorted(((f'{name or "?"} ({tid})', round(100.0 * sum(c.values()) / ticks, 1))
                           for (tid, name), c in active.items()), key=lambda x: -x[1])

    def worker_key(threads):
        for key in threads:
            if key[1] == 'pi0_inference' or (worker_tid and key[0] == str(worker_tid)):
                return key
        return None
    key = worker_key(everything)
    out = {'rate_hz': rate, 'ticks': ticks, 'seconds': round(ticks / rate, 1),
           'inferences_in_window': inferences,
           'gil_share_pct_by_thread': gil_share[:10],
           'on_cpu_pct_by_thread': active_share[:10]}
    if key is None:
        out['error'] = 'inference thread not found in the samples'
        return out
    per_inf = 1e3 / rate / max(1, inferences)  # ms of wall per sample, per inference
    states = Counter()
    lines = defaultdict(Counter)
    leaves = defaultdict(Counter)
    for mode in ('all', 'active', 'gil'):
        threads = data.get(mode, {})
        wkey = worker_key(threads)
        if wkey is None:
            continue
        for stack, count in threads[wkey].items():
            state = worker_state(stack)
            if mode == 'all':
                states[state] += count
            if state == 'infer':
                line = product_frame(stack)
                lines[line][mode] += count
                if mode == 'all':
                    leaves[line][stack[-1] if stack else '?'] += count
    out['worker_ms_per_inference_by_state'] = {s: round(c * per_inf, 3)
                                               for s, c in states.most_common()}
    top = sorted(lines.items(), key=lambda item: -item[1]['all'])[:15]
    out['worker_infer_top_lines'] = [
        {'line': line, 'ms_per_inference': round(c['all'] * per_inf, 3),
         'on_cpu_ms': round(c['active'] * per_inf, 3),
         'holding_gil_ms': round(c['gil'] * per_inf, 3),
         'off_cpu_ms': round(max(0, c['all'] - c['active']) * per_inf, 3),
         'top_leaf': leaves[line].most_common(1)[0][0] if leaves[line] else None}
        for line, c in top]
    return out


# ------------------------------------------------------------------------------------------
# Summaries
REC_FIELDS = ('wait_ms', 'wait_in_encode_ms', 'validate_ms', 'lock_wait_ms', 'host_prep_ms',
              'upload_ms', 'resize_launch_ms', 'vision_launch_ms', 'encode_other_ms',
              'to_prefix_ms', 'prefix_launch_ms', 'denoise_launch_ms', 'to_sync_ms', 'sync_ms',
              'post_engine_ms', 'post_worker_ms', 'on_result_ms', 'host_to_prefix_ms',
              'engine_total_ms', 'engine_wall_ms', 'worker_ms', 'gpu_span_ms',
              'gpu_span_preprocess_ms', 'gpu_span_vision_ms', 'gpu_span_prefix_ms',
              'gpu_span_denoise_ms', 'gpu_pure_ms', 'gpu_pure_vision_ms', 'gpu_pure_prefix_ms',
              'gpu_pure_denoise_ms', 'gpu_idle_est_ms', 'dds_ms', 'callback_to_submit_ms',
              'result_to_accept_ms', 'accept_to_publish_ms', 'reaction_ms')


def summarize_records(records):
    out = {'n': len(records)}
    for field in REC_FIELDS:
        stats = pct([r.get(field) for r in records])
        if stats is not None:
            out[field] = stats
    out['pending_mean'] = round(float(np.mean([r['pending'] for r in records])), 3) \
        if records else None
    for stage in ('vision', 'prefix', 'denoise'):
        flags = [r.get(f'starved_{stage}') for r in records
                 if r.get(f'starved_{stage}') is not None]
        if flags:
            out[f'starved_before_{stage}_pct'] = round(100.0 * sum(flags) / len(flags), 1)
    by_pending = defaultdict(list)
    for r in records:
        by_pending[r['pending']].append(r)
    out['by_frames_in_call'] = {
        str(k): {'n': len(v), 'engine_total_ms': pct([r.get('engine_total_ms') for r in v]),
                 'gpu_span_ms': pct([r.get('gpu_span_ms') for r in v]),
                 'gpu_pure_ms': pct([r.get('gpu_pure_ms') for r in v]),
                 'host_to_prefix_ms': pct([r.get('host_to_prefix_ms') for r in v])}
        for k, v in sorted(by_pending.items())}
    return out


class Runner:
    """Starts the node in this process and runs the phases."""

    def __init__(self, args):
        self.args = args
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self.probe = Probe()
        self.summary = {'phases': {}, 'skipped': [], 'errors': [], 'notes': []}
        self.feeders = {}
        self.phases = [p for p in args.phases.split(',') if p]
        self.cpu_mark = None
        self.phase_started = None

    def left(self):
        return self.args.budget - (time.monotonic() - self.started)

    def log(self, text):
        print(f'[node_gap {time.monotonic() - self.started:6.1f} s] {text}', flush=True)

    # -- set-up --------------------------------------------------------------------------
    def start_node(self):
        from pi0_ros.tools.domain import claim_domain_id
        from pi0_ros.tools.processes import (copy_to_environ, fastdds_profile_env,
                                             FASTDDS_PROFILE_VARIABLE, ros_args)
        args = self.args
        self.env = dict(os.environ, ROS_DOMAIN_ID=str(claim_domain_id()), PYTHONUNBUFFERED='1')
        self.env.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
        self.summary['fastdds_profile'] = fastdds_profile_env(self.env, None)
        copy_to_environ(self.env, ('ROS_DOMAIN_ID', 'ROS_AUTOMATIC_DISCOVERY_RANGE',
                                   FASTDDS_PROFILE_VARIABLE))
        parameters = {'checkpoint': '', 'random_model': args.random_model,
                      'device': args.device, 'precision': args.precision,
                      'control_rate': 50.0, 'status_rate': 2.0,
                      'max_image_width': max(args.image_width, 64),
                      'max_image_height': max(args.image_height, 64)}
        for item in args.node_parameter:  # as pi0_ros.tools.soak --node-parameter
            from pi0_ros.tools.soak import node_parameter
            name, value = node_parameter(item)
            parameters[name] = value
        self.summary['node_parameters'] = parameters
        self.probe.install()
        import rclpy
        from rclpy.lifecycle import TransitionCallbackReturn

        from pi0_ros.executors import make_executor, SWITCH_INTERVAL_S
        from pi0_ros.node import Pi0ControlNode
        sys.setswitchinterval(SWITCH_INTERVAL_S)  # as pi0_ros.node.main
        self.rclpy = rclpy
        rclpy.init(args=['node_gap_probe'] + ros_args(parameters))
        self.node = Pi0ControlNode()
        self.executor = make_executor(self.node.get_parameter('executor_threads').value)
        self.executor.add_node(self.node)
        self.log('configuring (engine build + warm-up on the inference thread)')
        start = time.monotonic()
        if self.node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            raise RuntimeError('the node could not be configured')
        self.summary['engine_ready_s'] = round(time.monotonic() - start, 1)
        self.worker = self.node._worker
        self.engine = self.worker._engine
        self.settings = self.node._settings
        self.probe.make_events(self.engine.device)
        self.gpu = GpuClock(self.engine.device)
        control = self.node._control_thread
        self.control_tid = getattr(control, 'native_id', None)
        self.summary['control_thread'] = ('SCHED_FIFO thread' if control is not None
                                          else 'on the executor')
        self.summary['inference_niceness'] = self.settings.inference_niceness
        self.summary['executor_threads'] = self.settings.executor_threads
        self.summary['engine'] = {
            'device': str(self.engine.device), 'dtype': str(self.engine.dtype),
            'options': {k: str(v) for k, v in vars(self.engine.options).items()}
            if hasattr(self.engine.options, '__dict__') else str(self.engine.options),
            'state_dim': self.engine.state_dim, 'num_cameras': self.engine.num_cameras}
        self.log(f'engine ready in {self.summary["engine_ready_s"]} s on {self.engine.device}')

    def spin(self):
        def run():
            self.probe.executor_tid = threading.get_native_id()
            try:
                self.executor.spin()
            except Exception:  # noqa: B902 - shutdown
                pass
        self.spinner = threading.Thread(target=run, name='ros_executor', daemon=True)
        self.spinner.start()

    def feeder(self, role, rate):
        """Run the soak's feeder `role` (cameras | joints) at `rate` Hz (restart if another)."""
        from pi0_ros.tools.processes import Process
        args = self.args
        running = self.feeders.get(role)
        if running is not None and running[1] == rate and running[0].alive():
            return
        self.stop_feeder(role)
        rates = {'cameras': ['--camera-rate', str(rate), '--joint-rate', str(args.joint_rate)],
                 'joints': ['--camera-rate', str(args.camera_rate), '--joint-rate', str(rate)]}
        process = Process(f'node_gap_feeder_{role}', [
            sys.executable, '-m', 'pi0_ros.tools.soak', '--feeder', role,
            '--feeder-stats', f'/tmp/node_gap_feeder_{role}.json', *rates[role],
            '--image-width', str(args.image_width), '--image-height', str(args.image_height),
            '--instruction-period', '5.0'], self.env, Path('/tmp'))
        self.feeders[role] = (process, rate, time.monotonic())
        self.log(f'feeder {role} started at {rate} Hz')

    def stop_feeder(self, role):
        running = self.feeders.pop(role, None)
        if running is None:
            return
        process, rate, started = running
        code = process.stop(timeout=5.0)
        stats_path = Path(f'/tmp/node_gap_feeder_{role}.json')
        stats = json.loads(stats_path.read_text()) if stats_path.exists() else None
        stats_path.unlink(missing_ok=True)
        self.summary.setdefault('feeders', []).append(
            {'role': role, 'rate_hz': rate, 'ran_s': round(time.monotonic() - started, 1),
             'exit_code': code, 'stats': stats,
             'log_tail': None if code in (0, -2) else process.tail(5)})

    # -- phases ----------------------------------------------------------------------------
    def counters(self):
        node = getattr(self, 'node', None)
        out = {**node._counters, **node._inputs.counters} if node is not None else {}
        worker = getattr(self, 'worker', None)
        if worker is not None:
            out.update({f'worker_{k}': v for k, v in worker.counters.items()})
        return out

    def begin(self, name):
        self.probe.phase = name
        self.cpu_mark = (time.monotonic(), thread_cpu())
        self.phase_started = time.monotonic()
        self.counters_mark = self.counters()

    def end(self, name, extra=None):
        probe = self.probe
        probe.phase = 'between'
        wall0, cpu0 = self.cpu_mark
        wall = time.monotonic() - wall0
        cpu1 = thread_cpu()
        roles = {probe.worker_tid: 'inference (pi0_inference)',
                 probe.executor_tid: 'executor (ros_executor)',
                 self.control_tid: 'control (pi0_control)',
                 threading.get_native_id(): 'probe main thread'}
        by_role = Counter()
        for tid, (comm, seconds_) in cpu1.items():
            before = cpu0.get(tid, (comm, 0.0))[1]
            role = roles.get(tid) or f'other: {comm}'
            by_role[role] += seconds_ - before
        records = [r for r in probe.records if r['phase'] == name and r['kind'] == 'infer']
        summary = summarize_records(records)
        summary['seconds'] = round(wall, 1)
        summary['inferences_per_s'] = round(len(records) / wall, 2) if wall else None
        summary['thread_cpu_pct'] = {k: round(100.0 * v / wall, 1)
                                     for k, v in by_role.most_common(8)}
        callbacks = {}
        for kind, values in probe.callbacks.get(name, {}).items():
            values = np.asarray(values) * MS
            callbacks[kind] = {'per_s': round(values.size / wall, 1),
                               'ms_p50': round(float(np.median(values)), 3),
                               'ms_p99': round(float(np.percentile(values, 99)), 3),
                               'busy_ms_per_s': round(float(values.sum()) / wall, 2)}
        summary['callbacks'] = callbacks
        lags = probe.lags.get(name)
        if lags:
            summary['image_stamp_to_callback_ms'] = pct(lags)
        encodes = probe.encodes.get(name, [])
        if encodes:
            summary['encode_ahead'] = {
                'per_s': round(len(encodes) / wall, 1),
                'ms': pct([e['ms'] for e in encodes]),
                'sync_ms': pct([e['sync_ms'] for e in encodes]),
                'observation_waited_pct': round(100.0 * sum(e['observation_waiting']
                                                            for e in encodes) / len(encodes), 1)}
        summary['counts'] = dict(probe.counts.get(name, {}))
        after = self.counters()
        summary['node_counters'] = {k: v - self.counters_mark.get(k, 0) for k, v in after.items()
                                    if v - self.counters_mark.get(k, 0)}
        summary['gpu_clock'] = self.gpu.summary(name)
        if extra:
            summary.update(extra)
        self.summary['phases'][name] = summary
        self.write()
        self.write_records()
        total = summary.get('engine_total_ms', {}).get('p50')
        self.log(f'{name}: {len(records)} inferences, engine total p50 {total} ms')

    def wait(self, seconds, inject_rate=None):
        """Sleep through a phase (sampling GPU clocks; injecting observations if asked)."""
        end = time.monotonic() + seconds
        next_sample = time.monotonic()
        next_inject = time.monotonic()
        while time.monotonic() < end:
            if not self.rclpy.ok():
                raise KeyboardInterrupt  # SIGINT (the budget's timeout): write what there is
            now = time.monotonic()
            if now >= next_sample:
                self.gpu.sample(self.probe.phase)
                next_sample += 1.0
            if inject_rate and now >= next_inject:
                self.inject()
                next_inject += 1.0 / inject_rate
                if next_inject < now:
                    next_inject = now + 1.0 / inject_rate
            targets = [end, next_sample] + ([next_inject] if inject_rate else [])
            time.sleep(max(0.0, min(targets) - time.monotonic()))

    def fits(self, name, seconds):
        if name not in self.phases:
            return False
        if self.left() < seconds + 15:
            self.summary['skipped'].append(name)
            self.log(f'{name}: skipped ({self.left():.0f} s left)')
            return False
        return True

    def set_node_parameter(self, name, value):
        """Set one of the node's parameters (as a live change through its callback)."""
        from rclpy.parameter import Parameter
        result = self.node.set_parameters([Parameter(name, value=value)])[0]
        if not result.successful:
            raise RuntimeError(f'{name}: {result.reason}')

    def wait_following(self, timeout):
        from pi0_ros.control import PlannerState
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            planner = self.node._planner
            if self.node._planner_initialized and planner is not None \
                    and planner.state is PlannerState.FOLLOWING \
                    and self.worker.counters['inferences'] > 3:
                return True
            time.sleep(0.1)
        return False

    # -- A: the bench's calls on the node's engine, no feeders ------------------------------
    def bench_phases(self):
        from pi0_ros.tools.bench import random_frames
        args = self.args
        wanted = [p for p in ('A_all3', 'A_last_cam', 'A_all_ahead', 'A_paced')
                  if p in self.phases]
        if not wanted:
            return
        engine = self.engine
        rng = np.random.default_rng(1)
        pool = [random_frames(rng, engine.num_cameras, (args.image_height, args.image_width))
                for _ in range(4)]
        state = np.random.default_rng(1).normal(size=engine.state_dim).astype(np.float32)
        niceness = self.settings.inference_niceness
        errors = []

        def run():
            try:
                if niceness:
                    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
                for name in wanted:
                    self.bench_case(name, engine, pool, state)
            except Exception as error:  # noqa: B902 - reported
                errors.append(f'{type(error).__name__}: {error}\n{traceback.format_exc()}')
        thread = threading.Thread(target=run, name='probe_bench', daemon=True)
        thread.start()
        thread.join()
        self.summary['errors'] += errors

    def bench_case(self, name, engine, pool, state):
        args = self.args
        cams = engine.num_cameras
        ahead = {'A_all3': 0, 'A_last_cam': cams - 1, 'A_all_ahead': cams,
                 'A_paced': cams - 1}[name]
        period = 1.0 / args.camera_rate if name == 'A_paced' else 0.0
        warmup = 5
        if not self.fits(name, (warmup + args.iters) * max(period, 0.05) + 5):
            return
        encode_ms = []
        self.probe.phase = 'warmup'
        due = time.monotonic()
        for index in range(warmup + args.iters):
            if index == warmup:
                self.begin(name)
            frames = pool[index % len(pool)]
            keys = None if name == 'A_all3' else [(name, index, cam) for cam in range(cams)]
            for cam in range(ahead):
                start = time.perf_counter()
                engine.encode_frames({cam: frames[cam]}, {cam: keys[cam]})
                if index >= warmup:
                    encode_ms.append((time.perf_counter() - start) * MS)
            rec = self.probe.begin_infer('infer')
            output = None
            try:
                output = engine.infer(frames, state, INSTRUCTION, frame_keys=keys)
            finally:
                self.probe.end_infer(rec, output)
            if index >= warmup and index % 10 == 0:
                self.gpu.sample(name)
            if period:
                due += period
                time.sleep(max(0.0, due - time.monotonic()))
        self.end(name, {'encode_frames_ms': pct(encode_ms)} if encode_ms else None)

    # -- B and C: the node under load -----------------------------------------------------
    def node_phases(self):
        args = self.args
        if not any(p.startswith(('B_', 'C_')) for p in self.phases):
            return
        self.node.trigger_activate()
        self.feeder('joints', args.joint_rate)
        self.feeder('cameras', args.camera_rate)
        self.begin('warm')
        following = self.wait_following(max(30.0, seconds(args, 'warm') * 3))
        self.wait(seconds(args, 'warm'))
        self.end('warm', {'following': following})
        if not following:
            self.summary['errors'].append('the node did not follow within the warm-up')
        if self.fits('B_soak', seconds(args, 'B_soak')):
            self.measure('B_soak')
        if self.fits('B_on_chunk', seconds(args, 'B_on_chunk') + 2):
            self.set_node_parameter('publish_on_chunk', True)
            try:
                self.measure('B_on_chunk', {'publish_on_chunk': True})
            finally:
                self.set_node_parameter('publish_on_chunk', False)
        if self.fits('B_pyspy', seconds(args, 'B_pyspy') + 10):
            self.pyspy_phase()
        tid = self.probe.worker_tid
        if tid and self.fits('B_niceflip', seconds(args, 'B_niceflip')):
            try:
                before = os.getpriority(os.PRIO_PROCESS, tid)
                after = 10 if before == 0 else 0
                os.setpriority(os.PRIO_PROCESS, tid, after)
                try:
                    self.measure('B_niceflip', {'niceness': f'{before} -> {after}'})
                finally:
                    os.setpriority(os.PRIO_PROCESS, tid, before)
            except OSError as error:
                self.summary['errors'].append(f'B_niceflip: {error}')
        if self.fits('B_switch5ms', seconds(args, 'B_switch5ms')):
            interval = sys.getswitchinterval()
            sys.setswitchinterval(0.005)
            try:
                self.measure('B_switch5ms', {'switch_interval_s': 0.005})
            finally:
                sys.setswitchinterval(interval)
        settle = seconds(args, 'settle')
        if self.fits('C_joints50', seconds(args, 'C_joints50') + settle + 5):
            self.feeder('joints', args.low_joint_rate)
            self.feeder('cameras', args.camera_rate)
            self.settle(settle)
            self.measure('C_joints50', {'joint_rate_hz': args.low_joint_rate})
        if self.fits('C_cams5', seconds(args, 'C_cams5') + settle + 5):
            self.feeder('joints', args.joint_rate)
            self.feeder('cameras', args.low_camera_rate)
            self.settle(settle)
            self.measure('C_cams5', {'camera_rate_hz': args.low_camera_rate})
        if self.fits('C_inject_j500', seconds(args, 'C_inject_j500') + settle + 5):
            self.feeder('joints', args.joint_rate)
            self.stop_feeder('cameras')
            self.settle(settle, inject=True)
            self.measure('C_inject_j500', {'injected_hz': args.camera_rate}, inject=True)
        if self.fits('C_inject_quiet', seconds(args, 'C_inject_quiet') + settle + 5):
            self.stop_feeder('cameras')
            self.stop_feeder('joints')
            self.settle(settle, inject=True)
            self.measure('C_inject_quiet', {'injected_hz': args.camera_rate}, inject=True)

    def measure(self, name, extra=None, inject=False):
        self.begin(name)
        self.wait(seconds(self.args, name), inject_rate=self.args.camera_rate if inject else None)
        self.end(name, extra)

    def settle(self, seconds_, inject=False):
        self.probe.phase = 'settle'
        self.wait(seconds_, inject_rate=self.args.camera_rate if inject else None)

    def inject(self):
        """Hand the worker an observation as image_callback + on_synchronized would."""
        from pi0_ros.worker import Observation
        node, worker, probe = self.node, self.worker, self.probe
        if not hasattr(self, '_inject_pool'):
            from pi0_ros.tools.bench import random_frames
            rng = np.random.default_rng(7)
            self._inject_pool = [random_frames(rng, self.engine.num_cameras,
                                               (self.args.image_height, self.args.image_width))
                                 for _ in range(4)]
            self._inject_count = 0
            limits = np.asarray(self.settings.position_lower), np.asarray(
                self.settings.position_upper)
            self._inject_rest = (limits[0] + limits[1]) / 2.0
        self._inject_count += 1
        frames = self._inject_pool[self._inject_count % len(self._inject_pool)]
        stamp_ns = time.time_ns()
        keys = []
        for cam, name in enumerate(self.settings.camera_names):
            key = (name, stamp_ns, self._inject_count)
            keys.append(key)
            with probe.lock:
                probe.arrivals[(name, stamp_ns)] = (time.time_ns(), time.perf_counter())
            worker.offer_frame(cam, frames[cam], key)
        stamp = stamp_ns * 1e-9
        state = node._inputs.joint_buffer.at(stamp)
        with node._lock:
            if state is None:
                state = self._inject_rest
            node._inputs.last_observation_stamp = stamp
            observation = Observation(stamp=stamp, stamp_ns=stamp_ns, frames=tuple(frames),
                                      frame_keys=tuple(keys), state=np.asarray(state),
                                      instruction=node._inputs.instruction or INSTRUCTION,
                                      epoch=node._epoch)
        worker.submit(observation)

    def pyspy_phase(self):
        args = self.args
        length = seconds(args, 'B_pyspy')
        self.begin('B_pyspy')
        files = None
        if args.pyspy and Path(args.pyspy).exists():
            holder = {}

            def record():
                holder['result'] = run_pyspy(args.pyspy, os.getpid(), length, args.pyspy_rate,
                                             Path('/tmp'))
            thread = threading.Thread(target=record, name='probe_pyspy', daemon=True)
            thread.start()
            self.wait(length + 1.0)
            thread.join(timeout=40)
            files, logs = holder.get('result', (None, ['py-spy did not finish']))
            sampler = 'py-spy (--nonblocking, 3 concurrent: --idle, default, --gil)'
            self.summary['pyspy_logs'] = [log.strip().splitlines()[-2:] for log in logs]
        else:
            sampler = 'Python sampler (sys._current_frames; takes the GIL, perturbs timing)'
            python_sampler = PythonSampler(min(args.pyspy_rate, 200))
            python_sampler.start(self.worker._thread.ident)
            self.wait(length)
            files = {'all': Path('/tmp/pyspy_all.txt')}
            python_sampler.stop(files['all'])
        wall = time.monotonic() - self.phase_started
        self.end('B_pyspy', {'sampler': sampler})
        inferences = self.summary['phases']['B_pyspy']['n']
        if files:
            try:
                rate = args.pyspy_rate if args.pyspy else min(args.pyspy_rate, 200)
                self.summary['pyspy'] = summarize_pyspy(files, rate, inferences,
                                                        self.probe.worker_tid)
                self.summary['pyspy']['sampler'] = sampler
                self.summary['pyspy']['phase_seconds'] = round(wall, 1)
                with tarfile.open(self.out / 'pyspy.tar.gz', 'w:gz') as tar:
                    for path in files.values():
                        if Path(path).exists():
                            tar.add(path, arcname=Path(path).name)
            except Exception as error:  # noqa: B902 - reported
                self.summary['errors'].append(f'py-spy summary: {error}')

    # -- output ----------------------------------------------------------------------------
    def bench_cli(self):
        path = Path(self.args.bench_json) if self.args.bench_json else None
        if path is None or not path.exists():
            return None
        report = json.loads(path.read_text())
        engine = report.get('engine', {})
        one = engine.get('batches', {}).get('1', {})
        ahead = engine.get('frames_ahead', {})
        return {'p50': one.get('p50'), 'p90': one.get('p90'), 'p99': one.get('p99'),
                'stages_p50_ms': one.get('stages_p50_ms'),
                'last_camera_in_call_p50': ahead.get('last_camera_in_call', {}).get('p50'),
                'all_cameras_ahead_p50': ahead.get('all_cameras_ahead', {}).get('p50'),
                'encode_one_camera_p50': ahead.get('encode_ms', {}).get('p50'),
                'gpu': {k: one.get('gpu', {}).get(k) for k in ('sm_clock_mhz_p50',
                                                               'power_w_p50')}
                if one.get('gpu') else None,
                'environment': report.get('environment'),
                'config': {k: report.get('config', {}).get(k) for k in (
                    'dims', 'precision', 'device', 'frame', 'cameras', 'state_dim', 'iters')}}

    def gap(self):
        phases = self.summary['phases']

        def p50(phase, field='engine_total_ms', sub=None):
            data = phases.get(phase, {})
            if sub is not None:
                data = data.get('by_frames_in_call', {}).get(sub, {})
            value = data.get(field)
            return value.get('p50') if isinstance(value, dict) else None

        out = {}
        node = p50('B_soak')
        for ref in ('A_all3', 'A_last_cam', 'A_all_ahead', 'A_paced'):
            if node is not None and p50(ref) is not None:
                out[f'B_soak_minus_{ref}_ms'] = round(node - p50(ref), 3)
        cli = self.summary.get('bench_cli') or {}
        if node is not None and cli.get('p50'):
            out['B_soak_minus_bench_cli_all3_ms'] = round(node - cli['p50'], 3)
        if node is not None and cli.get('last_camera_in_call_p50'):
            out['B_soak_minus_bench_cli_last_cam_ms'] = round(
                node - cli['last_camera_in_call_p50'], 3)
        for frames_in_call, ref in (('1', 'A_last_cam'), ('0', 'A_all_ahead')):
            for field in ('engine_total_ms', 'gpu_span_ms', 'gpu_pure_ms', 'host_to_prefix_ms'):
                a, b = p50('B_soak', field, frames_in_call), p50(ref, field, frames_in_call)
                if a is not None and b is not None:
                    out[f'frames_in_call_{frames_in_call}:{field}:B_soak_minus_{ref}'] = \
                        round(a - b, 3)
        return out

    def write(self):
        self.summary['bench_cli'] = self.bench_cli()
        self.summary['gap_p50'] = self.gap()
        self.summary['elapsed_s'] = round(time.monotonic() - self.started, 1)
        (self.out / 'summary.json').write_text(json.dumps(self.summary, indent=1,
                                                          default=_json_default))

    def write_records(self):
        with gzip.open(self.out / 'records.jsonl.gz', 'wt') as handle:
            for rec in self.probe.records:
                row = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in rec.items()
                       if k not in ('t_start', 't_end', 't_result', 't_accept')}
                handle.write(json.dumps(row, default=_json_default) + '\n')

    def table(self):
        rows = [('phase', 'n', 'inf/s', 'frm', 'wait', 'h>pfx', 'sync', 'post', 'total',
                 'tot99', 'gpuspan', 'gpupure', 'idle', 'stv%', 'react', 'rct99', 'exec%',
                 'work%', 'smMHz')]
        for name, data in self.summary['phases'].items():
            if name in ('warm',):
                continue

            def g(field, q='p50'):
                value = data.get(field)
                return '-' if not isinstance(value, dict) else f'{value[q]:.2f}'
            cpu = data.get('thread_cpu_pct', {})
            clock = data.get('gpu_clock') or {}
            rows.append((name, str(data.get('n')), str(data.get('inferences_per_s')),
                         str(data.get('pending_mean')), g('wait_ms'), g('host_to_prefix_ms'),
                         g('sync_ms'), g('post_engine_ms'), g('engine_total_ms'),
                         g('engine_total_ms', 'p99'), g('gpu_span_ms'), g('gpu_pure_ms'),
                         g('gpu_idle_est_ms'), str(data.get('starved_before_prefix_pct', '-')),
                         g('reaction_ms'), g('reaction_ms', 'p99'),
                         str(cpu.get('executor (ros_executor)', '-')),
                         str(cpu.get('inference (pi0_inference)', '-')),
                         str(clock.get('sm_clock_mhz_p50', '-'))))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ['  '.join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
        legend = (
            'ms, p50 unless noted. frm: frames encoded in the call (mean); wait: observation '
            'handed to the worker -> infer starts; h>pfx: engine call start -> prefix graph '
            'launched (host critical path); sync: host blocked in the final synchronize; post: '
            "after it to the engine return; total: the engine's 'total' timing (= the soak's "
            'inference latency); gpuspan: CUDA-event span start -> denoise end; gpupure: event '
            'pairs around the vision/prefix/denoise replays; idle: span - pure in those stages '
            '(GPU waiting for the host); stv%: GPU already drained when the prefix was launched; '
            "react: camera stamp of the set's last frame -> first command published after its "
            'chunk was accepted; exec%/work%: CPU of the executor / inference thread.')
        cli = self.summary.get('bench_cli') or {}
        head = []
        if cli:
            head.append(f"python -m pi0_ros.tools.bench (same run, separate process): batch-1 p50 "
                        f"{cli.get('p50')} ms (3 cameras in the call), last camera in the call "
                        f"{cli.get('last_camera_in_call_p50')} ms, every camera ahead "
                        f"{cli.get('all_cameras_ahead_p50')} ms")
        spy = self.summary.get('pyspy') or {}
        tail = []
        if spy.get('gil_share_pct_by_thread'):
            tail.append('GIL held, % of wall (B_pyspy): ' + ', '.join(
                f'{k} {v}' for k, v in spy['gil_share_pct_by_thread'][:6]))
        if spy.get('worker_ms_per_inference_by_state'):
            tail.append('inference thread, ms per inference by state: ' + ', '.join(
                f'{k} {v}' for k, v in spy['worker_ms_per_inference_by_state'].items()))
        for item in spy.get('worker_infer_top_lines', [])[:10]:
            tail.append(f"  {item['ms_per_inference']:6.2f} ms/inf (on-CPU {item['on_cpu_ms']:.2f}"
                        f", GIL {item['holding_gil_ms']:.2f}, off-CPU {item['off_cpu_ms']:.2f})  "
                        f"{item['line']}")
        for phase in ('B_soak', 'B_on_chunk'):
            soak = self.summary['phases'].get(phase, {})
            parts = [(label, soak.get(field, {}).get('p50')) for label, field in (
                ('stamp->last frame callback', 'dds_ms'),
                ('callback->submit', 'callback_to_submit_ms'),
                ('wait', 'wait_ms'), ('worker', 'worker_ms'),
                ('result->tick', 'result_to_accept_ms'),
                ('tick->publish', 'accept_to_publish_ms'))]
            if soak.get('reaction_ms'):
                tail.append(f"{phase} reaction p50 {soak['reaction_ms']['p50']:.2f} ms; parts "
                            '(p50 each): '
                            + ', '.join(f'{k} {v:.2f}' for k, v in parts if v is not None))
        gap = self.summary.get('gap_p50') or {}
        if gap:
            tail.append('gaps (p50, ms): ' + ', '.join(f'{k} {v:+.2f}' for k, v in gap.items()))
        text = '\n'.join(head + lines + [legend] + tail) + '\n'
        (self.out / 'table.txt').write_text(text)
        print(text, flush=True)

    def shutdown(self):
        for role in list(self.feeders):
            try:
                self.stop_feeder(role)
            except Exception:  # noqa: B902 - best effort
                pass
        try:
            self.executor.shutdown(timeout_sec=2.0)
        except Exception:  # noqa: B902 - best effort
            pass
        try:
            self.node.stop_threads()
        except Exception:  # noqa: B902 - best effort
            pass


def _json_default(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.bool_):
        return bool(value)
    return str(value)


def main(argv=None):
    args = parse_args(argv)
    runner = Runner(args)
    code = 0
    try:
        runner.start_node()
        runner.summary['environment'] = environment(runner.engine.device)
        runner.spin()
        runner.bench_phases()
        runner.node_phases()
        idle = [name for name, phase in runner.summary['phases'].items()
                if not phase.get('inferences_per_s')]
        if idle:  # e.g. the inference thread crashed: no figures, so no success either
            runner.summary['errors'].append(f"no inference in phase(s) {', '.join(idle)}")
            print(f"probe: no inference in phase(s) {', '.join(idle)}", file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        runner.summary['errors'].append('interrupted (budget): partial results')
        code = 1
    except Exception as error:  # noqa: B902 - reported, partial results kept
        runner.summary['errors'].append(f'{type(error).__name__}: {error}\n'
                                        f'{traceback.format_exc()}')
        traceback.print_exc()
        code = 1
    finally:
        phase = runner.probe.phase
        if phase in PHASES and phase not in runner.summary['phases'] and runner.cpu_mark:
            try:  # the phase the budget interrupted: what it recorded so far
                runner.end(phase, {'interrupted': True})
            except Exception:  # noqa: B902 - the other results matter more
                pass
        runner.probe.phase = 'done'
        try:
            runner.shutdown()
        except BaseException:  # noqa: B902 - the results matter more
            pass
        runner.write()
        runner.write_records()
        runner.table()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no teardown hangs (CUDA, DDS threads)


def environment(device):
    import platform

    import torch
    return {'python': sys.version.split()[0], 'torch': torch.__version__,
            'platform': platform.platform(), 'cpu_count': os.cpu_count(),
            'gpu': torch.cuda.get_device_name(device) if device.type == 'cuda' else None,
            'argv': sys.argv[1:]}


if __name__ == '__main__':
    main()
