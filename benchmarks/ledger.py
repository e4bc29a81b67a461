# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Validate the benchmark ledger and generate the current-results page from it.

benchmarks/ledger.json is the list of every benchmark record (one measurement: date, commit,
device, command, figures, where its raw files are); benchmarks/RESULTS.md is generated from it
and never edited by hand (test/test_benchmarks_ledger.py checks both).

    python benchmarks/ledger.py            # validate, then write RESULTS.md
    python benchmarks/ledger.py --check    # validate, and fail if RESULTS.md is not up to date
"""
import argparse
import json
from pathlib import Path
import re
import subprocess
import sys

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ROOT / 'benchmarks' / 'ledger.json'
RESULTS = ROOT / 'benchmarks' / 'RESULTS.md'
RECORDS = 'benchmarks/records/'

# Sections of the results page, in order.
AREAS = {
    'gpu': 'GPU engine vs LeRobot',
    'cpu': 'CPU engine',
    'node': 'Control node: control rate and soak',
    'demo': 'Demo',
    'memory': 'GPU memory',
    'accuracy': 'Accuracy',
    'kernels': 'GPU kernels: tuning and register audit',
    'data': 'Demonstrations and trained policies',
}
FIELDS = {  # field: (types, required)
    'id': (str, True), 'what': (str, True), 'area': (str, True), 'title': (str, True),
    'date': (str, True), 'commit': ((str, type(None)), True), 'device': (str, True),
    'command': ((str, type(None)), True), 'figures': (dict, True),
    'baseline': ((dict, type(None)), True), 'raw': ((list, type(None)), True),
    'current': (bool, True), 'superseded_by': ((str, type(None)), True),
    'raw_in_git_at': (str, False), 'source': (str, False), 'note': (str, False),
}
SLUG = re.compile(r'^[a-z0-9]+(-[a-z0-9]+)*$')
DATE = re.compile(r'^\d{4}-\d{2}-\d{2}$')
HASH = r'[0-9a-f]{7,40}'
COMMIT = re.compile(rf'^{HASH}((\.\.|, ){HASH})?$')
FIGURE = re.compile(r'^[a-z0-9_]+$')


def load(path=LEDGER):
    """Return the ledger's records."""
    return json.loads(Path(path).read_text())


def _raw_exists(path):
    return (ROOT / path).exists()


def validate(records, folders=True):
    """
    Return the ledger's problems (an empty list when it is valid).

    With folders, also every folder under benchmarks/records/ must be named by a current record.
    """
    problems = []
    ids = {}
    for index, record in enumerate(records):
        name = record.get('id', f'#{index}')
        shape = [f'{name}: no {field}' for field, (_, required) in FIELDS.items()
                 if required and field not in record]
        shape += [f'{name}: {field} has the wrong type' for field, (types, _) in FIELDS.items()
                  if field in record and not isinstance(record[field], types)]
        shape += [f'{name}: unknown field {field}' for field in record if field not in FIELDS]
        if shape:
            problems += shape
            continue
        if name in ids:
            problems.append(f'{name}: id used twice')
        ids[name] = record
        if not SLUG.match(name) or not SLUG.match(record['what']):
            problems.append(f'{name}: id and what must be lower-case words joined by -')
        if record['area'] not in AREAS:
            problems.append(f'{name}: area {record["area"]!r} is not one of {sorted(AREAS)}')
        if not DATE.match(record['date']):
            problems.append(f'{name}: date is not YYYY-MM-DD')
        if record['commit'] is not None and not COMMIT.match(record['commit']):
            problems.append(f'{name}: commit {record["commit"]!r} is not a short hash')
        figures = record['figures']
        for key, value in figures.items():
            if not FIGURE.match(key):
                problems.append(f'{name}: figure name {key!r} is not snake_case')
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                problems.append(f'{name}: figure {key} is not a number')
        for key, value in (record['baseline'] or {}).items():
            if not FIGURE.match(key):
                problems.append(f'{name}: baseline name {key!r} is not snake_case')
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                problems.append(f'{name}: baseline {key} is not a number')
        raw = record['raw']
        if raw is None:
            if not record.get('source'):
                problems.append(f'{name}: raw is null but no source says where the figures are')
        elif not raw or not all(isinstance(p, str) and p.startswith('benchmarks/') for p in raw):
            problems.append(f'{name}: raw must list paths under benchmarks/')
        if record['current']:
            if record['superseded_by'] is not None:
                problems.append(f'{name}: a current record is superseded by nothing')
            if not figures:
                problems.append(f'{name}: a current record needs figures')
            if record['commit'] is None or record['command'] is None:
                problems.append(f'{name}: a current record needs its commit and command')
            if raw is None:
                problems.append(f'{name}: a current record needs its raw files')
            else:
                missing = [p for p in raw if not _raw_exists(p)]
                if missing:
                    problems.append(f'{name}: raw files missing: {missing}')
                outside = [p for p in raw if not p.startswith(RECORDS)]
                if outside:
                    problems.append(f'{name}: raw files of a current record belong under '
                                    f'{RECORDS}: {outside}')
        elif raw is not None and not all(_raw_exists(p) for p in raw) and \
                not record.get('raw_in_git_at'):
            problems.append(f'{name}: raw files are gone; raw_in_git_at must name the commit '
                            'that has them')
    current = [r for r in ids.values() if r['current']]
    seen = {}
    for record in current:
        if record['what'] in seen:
            problems.append(f'{record["id"]}: second current record for what '
                            f'{record["what"]!r} (also {seen[record["what"]]})')
        seen[record['what']] = record['id']
    for record in ids.values():
        target = record['superseded_by']
        if target is not None and (target not in ids or not ids[target]['current']):
            problems.append(f'{record["id"]}: superseded_by {target!r} is not a current record')
    kept = {p.split('/')[2] for r in current for p in r['raw'] or [] if p.startswith(RECORDS)}
    records_dir = ROOT / RECORDS
    if folders and records_dir.is_dir():
        for folder in sorted(records_dir.iterdir()):
            if folder.name not in kept:
                problems.append(f'{RECORDS}{folder.name}: no current record names it')
    return problems


def check_commits(records):
    """Return the commits the ledger names that git does not know (needs git and the history)."""
    names = set()
    for record in records:
        for field in ('commit', 'raw_in_git_at'):
            names.update(re.findall(HASH, record.get(field) or ''))
    names = sorted(names)
    result = subprocess.run(['git', 'cat-file', '--batch-check'], cwd=ROOT, text=True,
                            input=''.join(f'{n}^{{commit}}\n' for n in names),
                            capture_output=True, check=True)
    return [n for n, line in zip(names, result.stdout.splitlines()) if 'missing' in line]


def _cell(text):
    return str(text).replace('|', '\\|').replace('\n', ' ')


def _value(value):
    short = f'{value:g}'
    return short if float(short) == value else repr(value)


def _figures(mapping):
    return '<br>'.join(f'{key} {_value(value)}' for key, value in mapping.items()) or '—'


def _raw(record):
    links = []
    for path in record['raw']:
        relative = path[len('benchmarks/'):]
        links.append(f'[{relative}]({relative})')
    return '<br>'.join(links)


def _commit(record):
    return f'`{record["commit"]}`' if record['commit'] else '—'


def generate(records):
    """Return the text of RESULTS.md."""
    out = [
        '# Benchmark results',
        '',
        'Generated by `benchmarks/ledger.py` from [`ledger.json`](ledger.json): do not edit by '
        'hand (`test/test_benchmarks_ledger.py` checks it). Each row is a current record: the '
        'latest measurement of its kind, with the exact command, the code commit it measured, '
        'the device and its raw files. How to make and add a record: '
        '[README.md](README.md). Figure names carry their units (`_ms`, `_gib`, `_pct`, '
        '`_chunks_per_s`, `_x` for ratios); cosines have none.',
        '',
    ]
    current = [r for r in records if r['current']]
    for area, heading in AREAS.items():
        rows = [r for r in current if r['area'] == area]
        if not rows:
            continue
        out += [f'## {heading}', '',
                '| record | figures | baseline | date | commit | device | command | raw |',
                '|---|---|---|---|---|---|---|---|']
        for r in rows:
            baseline = _figures(r['baseline']) if r['baseline'] else '—'
            out.append(
                f'| <a id="{r["id"]}"></a>**{r["id"]}**<br>{_cell(r["title"])} | '
                f'{_figures(r["figures"])} | {baseline} | {r["date"]} | {_commit(r)} | '
                f'{_cell(r["device"])} | `{_cell(r["command"])}` | {_raw(r)} |')
        out.append('')
        for r in rows:
            if r.get('note'):
                out.append(f'- **{r["id"]}**: {r["note"]}')
        out.append('')
    quoted = [r for r in records if r['raw'] is None]
    if quoted:
        out += ['## Figures without raw files in the repository', '',
                'Not current records (the ledger keeps raw files for those); listed so that the '
                'figures quoted elsewhere have a place and a source.', '',
                '| record | figures | baseline | date | commit | device | command | source |',
                '|---|---|---|---|---|---|---|---|']
        for r in quoted:
            baseline = _figures(r['baseline']) if r['baseline'] else '—'
            command = f'`{_cell(r["command"])}`' if r['command'] else '—'
            out.append(
                f'| <a id="{r["id"]}"></a>**{r["id"]}**<br>{_cell(r["title"])} | '
                f'{_figures(r["figures"])} | {baseline} | {r["date"]} | {_commit(r)} | '
                f'{_cell(r["device"])} | {command} | {_cell(r["source"])} |')
        out.append('')
        for r in quoted:
            if r.get('note'):
                out.append(f'- **{r["id"]}**: {r["note"]}')
        out.append('')
    older = [r for r in records if not r['current'] and r['raw'] is not None]
    if older:
        out += ['## Earlier records', '',
                f'{len(older)} records whose raw files were removed from the tree; their figures '
                'and notes are in `ledger.json`, their files in git (`git show '
                '<raw in git at>:<path>`).', '',
                '| record | what | date | commit | superseded by | raw in git at | raw |',
                '|---|---|---|---|---|---|---|']
        for r in older:
            superseded = f'[{r["superseded_by"]}](#{r["superseded_by"]})' \
                if r['superseded_by'] else '—'
            paths = '<br>'.join(p[len('benchmarks/'):] for p in r['raw'])
            out.append(f'| {r["id"]} | {r["what"]} | {r["date"]} | {_commit(r)} | {superseded} '
                       f'| `{r.get("raw_in_git_at", "")}` | {paths} |')
        out.append('')
    return '\n'.join(out)


def main(argv=None):
    """Validate the ledger; write RESULTS.md, or with --check compare it."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--check', action='store_true',
                        help='do not write: fail if RESULTS.md differs from what it generates')
    parser.add_argument('--no-git', action='store_true',
                        help='skip checking that git knows every commit the ledger names')
    args = parser.parse_args(argv)
    records = load()
    problems = validate(records)
    if not args.no_git:
        problems += [f'commit {c} is not in this repository' for c in check_commits(records)]
    if problems:
        print('\n'.join(problems), file=sys.stderr)
        return 1
    text = generate(records)
    if args.check:
        if not RESULTS.exists() or RESULTS.read_text() != text:
            print(f'{RESULTS} is not what {__file__} generates: run it', file=sys.stderr)
            return 1
        return 0
    RESULTS.write_text(text)
    print(f'{len(records)} records ({sum(r["current"] for r in records)} current); wrote '
          f'{RESULTS.relative_to(ROOT)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
