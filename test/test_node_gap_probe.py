# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The node-gap probe (benchmarks/node_gap) on the CPU.

It wraps the worker's and node's methods, so a change of their signatures must fail here, not on
a GPU machine (as it once did).
"""
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_probe_dry_run_measures_every_phase(tmp_path):
    phases = ['A_all3', 'B_soak', 'B_on_chunk']
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    process = subprocess.run(
        [sys.executable, str(ROOT / 'benchmarks' / 'node_gap' / 'probe.py'), '--dry-run',
         '--out', str(tmp_path), '--budget', '150', '--phases', ','.join(phases)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    summary = json.loads((tmp_path / 'summary.json').read_text())
    assert process.returncode == 0, (summary['errors'], process.stderr[-3000:])
    assert summary['errors'] == []
    for name in phases:
        phase = summary['phases'][name]
        assert phase['inferences_per_s'] > 0, name
        assert phase['engine_total_ms']['p50'] > 0, name
    # The node phases time the whole path, camera stamp to command.
    for name in ('B_soak', 'B_on_chunk'):
        assert summary['phases'][name]['reaction_ms']['p50'] > 0, name
