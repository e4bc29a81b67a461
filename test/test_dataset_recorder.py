# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""DatasetRecorder (no ROS): the frame grid, LeRobot's loader and tools, and the bad cases."""
import errno

import numpy as np
import pytest

from pi0_ros.tools.dataset_recorder import DatasetRecorder, RecordingError, STAMP_FEATURE

CAMERAS = ('front', 'side', 'wrist')
JOINTS = ('j0', 'j1')
FPS = 30
PERIOD_NS = round(1e9 / FPS)
T0 = 1_000 * 10**9


def frames_for(i):
    """Three distinct images per observation: pixel values tell camera and observation apart."""
    return [np.full((12, 16, 3), (7 * i + 50 * c) % 256, np.uint8) + np.arange(3, dtype=np.uint8)
            for c in range(3)]


def record(recorder, task, indices, t0=T0, jitter_ns=2_000_000):
    """Offer observations i in `indices` stamped near t0 + i / fps; return their stamps."""
    recorder.start_episode(task, t0)
    stamps = {}
    for i in indices:
        stamps[i] = t0 + i * PERIOD_NS + (i % 3 - 1) * jitter_ns
        recorder.offer(stamps[i], frames_for(i), [i, -i], [i + 0.5, 2 * i], stamps[i])
    return stamps


def load(root):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    return LeRobotDataset('test/recorder', root=root)


@pytest.fixture
def recorder(tmp_path):
    made = []

    def make(**kwargs):
        made.append(DatasetRecorder(tmp_path / 'ds', 'test/recorder', FPS, CAMERAS, JOINTS,
                                    image_writer_threads=1, **kwargs))
        return made[-1]

    yield make
    for item in made:
        item.close()


def test_episodes_on_the_frame_grid_load_with_lerobot(recorder, tmp_path):
    writer = recorder()
    # Observation 5 is lost on the way: its slot repeats observation 4.
    stamps = record(writer, 'touch the red cube', [i for i in range(12) if i != 5])
    first = writer.stop_episode()
    assert (first.index, first.frames, first.repeated, first.saved) == (0, 12, 1, True)
    record(writer, 'touch the green ball', range(8), t0=T0 + 10**10)
    assert writer.stop_episode().saved
    writer.close()

    dataset = load(tmp_path / 'ds')
    assert (dataset.num_episodes, dataset.num_frames, dataset.fps) == (2, 20, FPS)
    expected = [i if i != 5 else 4 for i in range(12)]
    for row, i in enumerate(expected):
        item = dataset[row]
        assert int(item[STAMP_FEATURE]) == stamps[i]
        assert float(item['timestamp']) == pytest.approx(row / FPS)
        np.testing.assert_array_equal(item['observation.state'].numpy(), [i, -i])
        np.testing.assert_array_equal(item['action'].numpy(), [i + 0.5, 2 * i])
        for c, camera in enumerate(CAMERAS):
            image = item[f'observation.images.{camera}']  # channels first, in [0, 1]
            np.testing.assert_array_equal(
                np.round(image.numpy().transpose(1, 2, 0) * 255).astype(np.uint8),
                frames_for(i)[c])
        assert item['task'] == 'touch the red cube'
    assert dataset[12]['task'] == 'touch the green ball'
    assert int(dataset[12]['episode_index']) == 1 and int(dataset[12]['frame_index']) == 0
    features = dataset.meta.features
    assert features['observation.state']['names'] == list(JOINTS)
    assert features['observation.images.front']['shape'] == (12, 16, 3)
    # LeRobot's own statistics cover the recorded columns.
    stats = dataset.meta.stats
    assert stats['observation.state']['max'].tolist() == [11, 0]
    assert stats['action']['min'].tolist() == [0.5, 0]
    # LeRobot's visualizer loads it through a DataLoader; training reads action chunks.
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.scripts.lerobot_dataset_viz import check_chw_float32, get_feature_names

    assert get_feature_names(dataset, 'action') == list(JOINTS)
    batch = next(iter(torch.utils.data.DataLoader(dataset, batch_size=32)))
    assert batch['action'].shape == (20, 2)
    for frame in batch['observation.images.wrist']:
        check_chw_float32(frame)
    chunks = LeRobotDataset('test/recorder', root=tmp_path / 'ds',
                            delta_timestamps={'action': [k / FPS for k in range(10)]})
    item = chunks[3]
    assert item['action'].shape == (10, 2)
    # Rows 3-11 of the episode, then its last action again (padded: the episode ends).
    np.testing.assert_array_equal(item['action'][:, 0].numpy(),
                                  np.array(expected[3:] + [expected[-1]]) + 0.5)
    assert item['action_is_pad'].tolist() == [False] * 9 + [True]
    # A second recorder on the same directory appends.
    again = recorder()
    assert again.saved_episodes == 2
    record(again, 'touch the blue cylinder', range(4), t0=T0 + 2 * 10**10)
    assert again.stop_episode().index == 2
    again.close()
    assert load(tmp_path / 'ds').num_episodes == 3


def test_a_stalled_camera_a_backward_stamp_and_shutdown_mid_episode(recorder, tmp_path):
    writer = recorder(max_stall_s=0.5)
    stamps = record(writer, 'task', range(6))
    # A stamp going backwards is not recorded (the synchronizer never sends one; still).
    writer.offer(stamps[2], frames_for(99), [99, 99], [99, 99], stamps[5])
    writer.check(stamps[5] + 400_000_000, ['side'])
    assert writer.recording
    writer.check(stamps[5] + 600_000_000, ['side'])
    stalled = writer.stop_episode()
    assert not stalled.saved
    assert 'no synchronized observation for 0.60 s (inputs silent: side)' in stalled.reason
    record(writer, 'task', range(5), t0=T0 + 10**10)
    saved = writer.stop_episode()
    assert saved.saved and saved.index == 0 and saved.frames == 5
    record(writer, 'task', range(7), t0=T0 + 2 * 10**10)
    writer.close()  # Ctrl-C: the episode under way is discarded, the dataset finalized
    dataset = load(tmp_path / 'ds')
    assert (dataset.num_episodes, dataset.num_frames) == (1, 5)
    assert 99 not in dataset.hf_dataset['observation.state'][0].tolist()


def test_a_full_disk_is_refused_before_it_breaks_the_dataset(recorder, tmp_path, monkeypatch):
    writer = recorder(min_free_bytes=0)
    record(writer, 'task', range(5))
    assert writer.stop_episode().saved
    writer.min_free_bytes = 10**18
    with pytest.raises(RecordingError, match='MiB free'):
        writer.start_episode('task', T0)
    writer.min_free_bytes = 0
    record(writer, 'task', range(5), t0=T0 + 10**10)
    writer.min_free_bytes = 10**18  # the disk fills during the episode
    writer.check(T0 + 10**10 + 5 * PERIOD_NS)
    assert 'MiB free' in writer.stop_episode().reason
    writer.min_free_bytes = 0
    # Should the disk fill anyway, the failed save is reported and the recorder stops.
    record(writer, 'task', range(5), t0=T0 + 2 * 10**10)

    def no_space():
        raise OSError(errno.ENOSPC, 'No space left on device')

    dataset_writer = writer._dataset
    monkeypatch.setattr(dataset_writer, 'save_episode', no_space)
    failed = writer.stop_episode()
    assert not failed.saved and 'No space left on device' in failed.reason
    with pytest.raises(RecordingError, match='stopped after an error'):
        writer.start_episode('task', T0 + 3 * 10**10)
    writer.close()
    assert load(tmp_path / 'ds').num_episodes == 1


def test_bad_requests_are_refused(recorder):
    writer = recorder()
    with pytest.raises(RecordingError, match='no task'):
        writer.start_episode('', T0)
    with pytest.raises(RecordingError, match='no episode'):
        writer.stop_episode()
    writer.start_episode('task', T0)
    with pytest.raises(RecordingError, match='being recorded'):
        writer.start_episode('task', T0)
    empty = writer.stop_episode()
    assert not empty.saved and empty.reason == 'no synchronized observation arrived'
