# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Episodes of synchronized observations into a LeRobotDataset (format v3), with LeRobot's writer.

DatasetRecorder is the recorder's ROS-free half. The node offers it each synchronized
observation (frames, joint state, action, stamp); it samples them onto the dataset's frame grid
(`fps`) and a thread of its own hands the frames to `LeRobotDataset.add_frame`, then
`save_episode` or `clear_episode_buffer`. Nothing is written by hand: LeRobot writes the
parquet, the images or videos and the metadata.

Frame grid: an episode's frame i stands for `t0 + i / fps`, t0 the stamp of its first
observation. Frame i is the newest observation stamped before `t0 + (i + 0.5) / fps`; where a
slot saw none (a frame lost on the way), the previous observation is repeated and counted. An
episode whose observations stop for longer than `max_stall_s` is discarded.

Besides LeRobot's own columns each frame keeps `stamp_ns`, the ROS stamp of its observation in
nanoseconds (policies ignore it: it is neither an observation nor an action).

The dataset is valid once `close()` has run (LeRobot writes its files' footers at finalize): the
node calls it on shutdown, Ctrl-C included. An episode under way then is discarded.
"""
from dataclasses import dataclass
import json
import logging
from pathlib import Path
import queue
import shutil
import threading

import numpy as np

LOG = logging.getLogger('pi0_ros.recorder')
STAMP_FEATURE = 'stamp_ns'
IMAGE_FEATURE = 'observation.images.{}'


class RecordingError(RuntimeError):
    """A request the recorder cannot carry out (the message says why)."""


@dataclass(frozen=True)
class EpisodeReport:
    """What became of one episode."""

    index: int
    task: str
    frames: int
    repeated: int
    saved: bool
    reason: str = ''


def dataset_features(camera_names, image_shape, joint_names, use_videos):
    """Return the LeRobot feature dictionary of a recording."""
    image = {'dtype': 'video' if use_videos else 'image', 'shape': tuple(image_shape),
             'names': ['height', 'width', 'channels']}
    joints = {'dtype': 'float32', 'shape': (len(joint_names),), 'names': list(joint_names)}
    features = {IMAGE_FEATURE.format(name): dict(image) for name in camera_names}
    features['observation.state'] = dict(joints)
    features['action'] = dict(joints)
    features[STAMP_FEATURE] = {'dtype': 'int64', 'shape': (1,), 'names': None}
    return features


class _Episode:
    """The episode being recorded: its grid, its counts and why it ended early, if it did."""

    def __init__(self, index, task):
        self.index = index
        self.task = task
        self.t0_ns = None
        self.frames = 0
        self.repeated = 0
        self.newest = None  # the newest observation offered: (stamp_ns, frame dict)
        self.last_emitted = None  # the frame dict of the episode's newest frame
        self.last_offer_ns = None  # ROS time of the newest offer
        self.discarded = ''


class DatasetRecorder:
    """Samples observations onto a frame grid and writes episodes with LeRobot's dataset writer."""

    def __init__(self, root, repo_id, fps, camera_names, joint_names, *, use_videos=False,
                 robot_type=None, max_stall_s=0.5, min_free_bytes=500 * 2**20,
                 image_writer_threads=2):
        self.root = Path(root)
        self.repo_id = repo_id
        self.fps = int(fps)
        self.camera_names = tuple(camera_names)
        self.joint_names = tuple(joint_names)
        self.use_videos = bool(use_videos)
        self.robot_type = robot_type
        self.max_stall_s = float(max_stall_s)
        self.min_free_bytes = int(min_free_bytes)
        self._image_writer_threads = image_writer_threads
        self._period_ns = round(1e9 / self.fps)
        # Imported now, not at the first frame: the import holds the interpreter for seconds,
        # which mid-episode would starve the node's callbacks.
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
        self._dataset_class = LeRobotDataset
        self._lock = threading.Lock()
        self._episode = None
        self._image_shape = None  # of every camera's frames (the first frame's, or resumed)
        self._dataset = self._resume() if (self.root / 'meta' / 'info.json').exists() else None
        self._next_index = self._dataset.meta.total_episodes if self._dataset else 0
        self._queue = queue.Queue()
        self._failed = ''
        self._thread = threading.Thread(target=self._write_loop, name='pi0_recorder_writer',
                                        daemon=True)
        self._thread.start()

    # Control (service callbacks) ------------------------------------------------------------
    @property
    def recording(self):
        """Return whether an episode is being recorded."""
        with self._lock:
            return self._episode is not None

    @property
    def saved_episodes(self):
        """Return how many episodes the dataset holds."""
        return self._next_index

    def start_episode(self, task, now_ns):
        """Start recording an episode of `task` at ROS time now_ns; return its index."""
        if not task:
            raise RecordingError('no task: give one, or publish an instruction first')
        self._check_disk()
        with self._lock:
            if self._failed:
                raise RecordingError(f'the recorder stopped after an error: {self._failed}')
            if self._episode is not None:
                raise RecordingError(f'episode {self._episode.index} is being recorded; stop '
                                     'it first')
            self._episode = _Episode(self._next_index, task)
            self._episode.last_offer_ns = now_ns  # it stalls if none comes from now on
            return self._episode.index

    def stop_episode(self, save=True, timeout=120.0):
        """End the episode: save it (or discard it); return its EpisodeReport."""
        with self._lock:
            episode, self._episode = self._episode, None
            if episode is not None and episode.newest is not None and (
                    episode.newest[1] is not episode.last_emitted) and not episode.discarded:
                self._emit(episode)  # the last slot, still open
        if episode is None:
            raise RecordingError('no episode is being recorded')
        reason = episode.discarded or ('' if save else 'discarded on request')
        if not reason and episode.frames == 0:
            reason = 'no synchronized observation arrived'
        done = threading.Event()
        result = {}
        self._queue.put(('end', episode, not reason, done, result))
        if not done.wait(timeout):
            raise RecordingError(f'episode {episode.index}: the writer did not finish in '
                                 f'{timeout:.0f} s')
        error = result.get('error', '')
        saved = not reason and not error
        if saved:
            self._next_index = episode.index + 1
        return EpisodeReport(episode.index, episode.task, episode.frames, episode.repeated,
                             saved, reason or error)

    def discard(self, reason):
        """Mark the running episode as lost (it is not saved when stopped); log why once."""
        with self._lock:
            episode = self._episode
            if episode is None or episode.discarded:
                return
            episode.discarded = reason
        LOG.error('episode %d will be discarded: %s', episode.index, reason)

    def close(self):
        """Discard an episode under way, finish writing and finalize the dataset."""
        if self.recording:
            self.discard('the recorder shut down during the episode')
            self.stop_episode(save=False)
        self._queue.put(('close',))
        self._thread.join(timeout=120.0)
        if self._thread.is_alive():
            LOG.error('the dataset writer did not finish within 120 s')

    # Data (subscription callbacks and a timer) ----------------------------------------------
    def offer(self, stamp_ns, frames, state, action, now_ns):
        """Offer one synchronized observation (quick: the writer thread does the writing)."""
        frame = {IMAGE_FEATURE.format(name): image
                 for name, image in zip(self.camera_names, frames)}
        frame['observation.state'] = np.asarray(state, dtype=np.float32)
        frame['action'] = np.asarray(action, dtype=np.float32)
        frame[STAMP_FEATURE] = np.array([stamp_ns], dtype=np.int64)
        with self._lock:
            episode = self._episode
            if episode is None or episode.discarded:
                return
            if episode.newest is not None and stamp_ns <= episode.newest[0]:
                return  # not newer than the one before: the synchronizer never sends these
            if episode.t0_ns is None:
                episode.t0_ns = int(stamp_ns)
            episode.last_offer_ns = now_ns
            # Slot i closes at t0 + (i + 0.5) / fps: those this stamp closes get the newest
            # observation before it (the same one again where a slot saw none).
            while episode.t0_ns + (episode.frames + 0.5) * self._period_ns <= stamp_ns:
                self._emit(episode)
            episode.newest = (int(stamp_ns), frame)

    def _emit(self, episode):
        """Make the newest observation the episode's next frame (called under the lock)."""
        frame = episode.newest[1]
        if frame is episode.last_emitted:
            episode.repeated += 1
        episode.last_emitted = frame
        episode.frames += 1
        self._queue.put(('frame', episode, frame))

    def check(self, now_ns, stalled_inputs=()):
        """
        Discard the running episode when its observations stopped or the disk fills up.

        `stalled_inputs` names the inputs that sent nothing lately, for the reason given.
        """
        with self._lock:
            episode = self._episode
        if episode is None or episode.discarded:
            return
        if episode.last_offer_ns is not None and (
                now_ns - episode.last_offer_ns) > self.max_stall_s * 1e9:
            silent = ', '.join(stalled_inputs) or 'none; they did not synchronize'
            self.discard(f'no synchronized observation for '
                         f'{(now_ns - episode.last_offer_ns) / 1e9:.2f} s (inputs silent: '
                         f'{silent})')
            return
        try:
            self._check_disk(factor=0.5)
        except RecordingError as error:
            self.discard(str(error))

    # Writer thread ---------------------------------------------------------------------------
    def _write_loop(self):
        while True:
            item = self._queue.get()
            kind = item[0]
            if kind == 'close':
                self._finalize()
                return
            if kind == 'frame':
                self._add_frame(*item[1:])
            elif kind == 'end':
                _, episode, save, done, result = item
                try:
                    self._end_episode(episode, save, result)
                finally:
                    done.set()

    def _add_frame(self, episode, frame):
        if episode.discarded:
            return
        try:
            if self._dataset is None:
                self._create(frame)
            for name in self.camera_names:
                image = frame[IMAGE_FEATURE.format(name)]
                if image.shape != self._image_shape:
                    raise RecordingError(f'camera {name} sent a {image.shape[1]}x'
                                         f'{image.shape[0]} image; the dataset holds '
                                         f'{self._image_shape[1]}x{self._image_shape[0]}')
            self._dataset.add_frame(dict(frame, task=episode.task))
        except Exception as error:  # noqa: B902 - LeRobot's writer raises several types
            self.discard(f'a frame was not written: {type(error).__name__}: {error}')

    def _end_episode(self, episode, save, result):
        if self._dataset is None:
            return  # nothing was written
        if save and not episode.discarded:
            try:
                self._dataset.save_episode()
                LOG.info('episode %d saved: %d frames (%d repeated), task %r', episode.index,
                         episode.frames, episode.repeated, episode.task)
                return
            except OSError as error:
                result['error'] = f'not saved: {error}'
                self._failed = f'episode {episode.index} could not be saved: {error}'
                LOG.error('%s', self._failed)
        self._dataset.clear_episode_buffer()

    def _create(self, frame):
        self._image_shape = frame[IMAGE_FEATURE.format(self.camera_names[0])].shape
        features = dataset_features(self.camera_names, self._image_shape, self.joint_names,
                                    self.use_videos)
        self._dataset = self._dataset_class.create(
            self.repo_id, self.fps, features, root=self.root, robot_type=self.robot_type,
            use_videos=self.use_videos, image_writer_threads=self._image_writer_threads)

    def _resume(self):
        info = json.loads((self.root / 'meta' / 'info.json').read_text())
        features = info.get('features', {})
        expected = dataset_features(self.camera_names, (0, 0, 3), self.joint_names,
                                    self.use_videos)
        for key, spec in expected.items():
            found = features.get(key)
            if found is None or found['dtype'] != spec['dtype'] or (
                    spec['names'] and list(found['names']) != spec['names']):
                raise RecordingError(f'{self.root} holds a dataset whose feature {key!r} '
                                     f'({found}) is not what this recording writes ({spec}); '
                                     'record into another directory')
        if int(info['fps']) != self.fps:
            raise RecordingError(f"{self.root} holds a dataset at {info['fps']} fps, not "
                                 f'{self.fps}')
        self._image_shape = tuple(features[IMAGE_FEATURE.format(self.camera_names[0])]['shape'])
        return self._dataset_class.resume(self.repo_id, root=self.root,
                                          image_writer_threads=self._image_writer_threads)

    def _finalize(self):
        if self._dataset is not None:
            try:
                self._dataset.finalize()
            except OSError as error:
                LOG.error('the dataset could not be finalized: %s', error)

    def _check_disk(self, factor=1.0):
        probe = self.root if self.root.exists() else self.root.parent
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        if free < factor * self.min_free_bytes:
            raise RecordingError(f'{free / 2**20:.0f} MiB free under {probe}, below '
                                 f'{factor * self.min_free_bytes / 2**20:.0f} MiB')
