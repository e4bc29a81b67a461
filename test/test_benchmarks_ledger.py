# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The benchmark ledger: valid, RESULTS.md generated from it, no file named after a session."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / 'benchmarks'


def _ledger_module():
    spec = importlib.util.spec_from_file_location('ledger', BENCHMARKS / 'ledger.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ledger = _ledger_module()


def test_the_ledger_validates():
    records = ledger.load()
    assert ledger.validate(records) == []
    assert any(r['current'] for r in records)


def test_results_md_is_what_ledger_py_generates():
    expected = ledger.generate(ledger.load())
    assert ledger.RESULTS.read_text() == expected, \
        'benchmarks/RESULTS.md was edited by hand or is stale: run python benchmarks/ledger.py'


def test_no_path_under_benchmarks_is_named_after_a_session():
    named = [str(p.relative_to(ROOT)) for p in BENCHMARKS.rglob('*')
             if 'session' in p.name.lower()]
    assert named == []


def test_validate_reports_what_is_wrong():
    good = {'id': 'x-cpu', 'what': 'x', 'area': 'cpu', 'title': 't', 'date': '2026-12-06',
            'commit': 'abcdef1', 'device': 'CPU', 'command': 'c', 'figures': {'p50_ms': 1.0},
            'baseline': None, 'raw': ['benchmarks/ledger.py'], 'current': False,
            'superseded_by': None}
    assert ledger.validate([good], folders=False) == []
    twin = dict(good, id='x-cpu-2', raw=['benchmarks/records/not-there/'], current=True)
    problems = ledger.validate([dict(good, current=True, raw=['benchmarks/records/none/']),
                                twin, dict(good, id='y', superseded_by='nothing')],
                               folders=False)
    assert any('raw files missing' in p for p in problems)
    assert any('second current record' in p for p in problems)
    assert any('superseded_by' in p for p in problems)
    gone = dict(good, id='z', raw=['benchmarks/gone/'])
    assert any('raw_in_git_at' in p for p in ledger.validate([gone], folders=False))
    assert ledger.validate([dict(gone, raw_in_git_at='abcdef1')], folders=False) == []
    assert any('no current record names it' in p for p in ledger.validate([good]))
