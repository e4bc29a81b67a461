# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""A short soak (`python -m pi0_ros.tools.soak`) for CI: the criteria that mean something in 30 s.

Rate and jitter criteria are left to the long run (they depend on what else the CI machine
does); here: no crash, a clean exit, no unsafe command, bounded RSS growth after warm-up and
consistent counters.
"""
import json
from pathlib import Path
import subprocess
import sys

import pytest

from pi0_ros.tools.processes import FASTDDS_PROFILE, fastdds_profile_env, FASTDDS_PROFILE_VARIABLE
from pi0_ros.tools.soak import parse_args
from rosutil import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SHORT_RUN_CRITERIA = ('no_crash', 'clean_exit', 'unsafe_commands', 'commands_blocked_by_node',
                      'rss_growth_after_warmup', 'counters_consistent',
                      'single_control_node_on_the_domain')


def test_short_soak_meets_the_short_run_criteria(ros_domain_id, tmp_path):
    output = tmp_path / 'soak'
    completed = subprocess.run(
        [sys.executable, '-m', 'pi0_ros.tools.soak', '--duration', '30', '--warmup', '10',
         '--instruction-period', '3', '--output', str(output), '--domain-id',
         str(ros_domain_id)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    log = completed.stdout[-3000:] + completed.stderr[-3000:]
    summary = json.loads((output / 'summary.json').read_text())
    for name in SHORT_RUN_CRITERIA:
        assert summary['criteria'][name]['passed'], f"{name}: {summary['criteria'][name]}\n{log}"
    commands = summary['commands']
    assert commands['received_after_warmup'] >= 0.8 * commands['expected_after_warmup'], log
    assert commands['non_finite'] == 0 and commands['out_of_limits'] == 0
    after = summary['counters_after_warmup']
    assert after['chunks_produced'] > 10 and after['observations_synced'] > 10, after
    assert summary['instruction_epochs_seen'] >= 3, 'the instruction changes were not followed'
    feeder = summary['feeder']
    assert feeder['cameras']['camera_sets'] > 0 and feeder['joints']['joint_states'] > 0
    for name in ('timeseries.png', 'control_period.png'):
        assert (output / name).stat().st_size > 10_000
    startup = summary['startup_s']  # seconds from the node process's start
    assert None not in startup.values() and 0 < startup['first_policy_command'] < 60, startup
    # The node's garbage collector as its diagnostics report it (every pass pauses some time).
    collector = summary['node_garbage_collector']
    assert collector['full_passes_after_warmup'] >= 0 and collector['pause_max_ms'] > 0


def test_node_parameters_are_parsed_as_literals_else_strings():
    args = parse_args(['--node-parameter', 'control_thread_priority:=0',
                       '--node-parameter', 'inference_trigger:=horizon',
                       '--node-parameter', 'observation_timeout:=0.75',
                       '--node-parameter', 'gpu_turns:=false',
                       '--node-parameter', 'publish_on_chunk:=True'])
    assert args.node_parameter == [('control_thread_priority', 0),
                                   ('inference_trigger', 'horizon'),
                                   ('observation_timeout', 0.75),
                                   ('gpu_turns', False),
                                   ('publish_on_chunk', True)]
    with pytest.raises(SystemExit):
        parse_args(['--node-parameter', 'control_thread_priority=0'])


def test_the_fastdds_profile_is_the_packaged_one_unless_the_environment_or_option_says_otherwise(
        tmp_path):
    # The package's own file: config/ of the source (pip route) or of its share directory
    # (colcon install, where the package is imported from the install space).
    env = {}
    packaged = Path(fastdds_profile_env(env))
    assert packaged.name == FASTDDS_PROFILE
    assert packaged.read_bytes() == (REPO_ROOT / 'config' / FASTDDS_PROFILE).read_bytes()
    assert env == {FASTDDS_PROFILE_VARIABLE: str(packaged)}
    own = tmp_path / 'own.xml'
    own.write_text('<profiles/>')
    env = {FASTDDS_PROFILE_VARIABLE: str(own)}
    assert fastdds_profile_env(env) == str(own)           # the user's choice is kept
    env = {FASTDDS_PROFILE_VARIABLE: str(own)}
    assert fastdds_profile_env(env, 'none') is None and env == {}
    assert fastdds_profile_env(env, str(packaged)) == str(packaged)
    with pytest.raises(FileNotFoundError):
        fastdds_profile_env({}, str(tmp_path / 'missing.xml'))
    assert parse_args(['--fastdds-profile', 'none']).fastdds_profile == 'none'


def test_setup_py_installs_every_config_file():
    # colcon installs config/ whole (CMakeLists.txt); the pip route lists the files.
    setup = (REPO_ROOT / 'setup.py').read_text()
    for path in sorted((REPO_ROOT / 'config').iterdir()):
        assert f"'config/{path.name}'" in setup, path.name
