# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""`collect`: simulator, recorder and expert over DDS give a LeRobot dataset of successes."""
import json
import subprocess
import sys

import numpy as np
import pytest

from pi0_ros.sim.scene import JOINT_NAMES
from pi0_ros.sim.tasks import make_episode

pytestmark = [pytest.mark.integration, pytest.mark.sim, pytest.mark.slow]


def test_collect_records_expert_episodes_that_lerobot_loads(ros_domain_id, tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    output = tmp_path / 'touch'
    run = subprocess.run(
        [sys.executable, '-m', 'pi0_ros.tools.collect', '--episodes', '2', '--first-episode',
         '3', '--output', str(output), '--domain-id', str(ros_domain_id)],
        capture_output=True, text=True, timeout=600)
    logs = '\n'.join((output.parent / 'touch_logs' / f'{name}.log').read_text()[-2000:]
                     for name in ('sim', 'recorder'))
    assert run.returncode == 0, run.stderr[-3000:] + logs
    report = json.loads((tmp_path / 'touch_collect.json').read_text())
    assert report['episodes'] == 2 and report['expert_success_rate'] == 1.0, report
    assert [e['episode'] for e in report['per_episode']] == [3, 4]

    dataset = LeRobotDataset('local/so101_touch', root=output)
    assert dataset.num_episodes == 2 and dataset.fps == 30
    assert dataset.meta.features['observation.images.front']['shape'] == (96, 128, 3)
    assert dataset.meta.features['action']['names'] == list(JOINT_NAMES)
    for episode, simulated in enumerate((3, 4)):
        start = dataset.meta.episodes[episode]['dataset_from_index']
        end = dataset.meta.episodes[episode]['dataset_to_index']
        assert dataset[start]['task'] == make_episode(simulated).instruction
        stamps = [int(dataset[row]['stamp_ns']) for row in range(start, end)]
        assert np.all(np.diff(stamps) >= 0)  # a slot without a new observation repeats one
        # On the frame grid: 1 / 30 s apart within the simulator's render jitter.
        assert np.median(np.diff(stamps)) == pytest.approx(1e9 / 30, rel=0.1)
        actions = np.stack([dataset[row]['action'].numpy() for row in (start, end - 1)])
        assert np.abs(actions[1] - actions[0]).max() > 0.1  # the expert moved the arm
