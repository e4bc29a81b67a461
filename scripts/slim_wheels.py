#!/usr/bin/env python3
# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Rewrite wheels without what only a build needs, so that they travel in less space.

Usage: python3 scripts/slim_wheels.py SOURCE_DIR DEST_DIR

Each SOURCE_DIR/*.whl is written to DEST_DIR under the same name, without:
- C/C++ headers (`<dist>.data/data/include/`) and CMake package files (`.../share/<pkg>/cmake/`),
- static libraries (`*.a`),
- the extra copies of a versioned shared library: the wheel format has no symbolic links, so the
  ROS 2 wheels hold libX.so, libX.so.2 and libX.so.2.2.5 as three identical files. The copy named
  by the library's SONAME is kept (that is the name the dynamic loader looks for); the others
  only serve a linker. Without `readelf` all copies are kept.
RECORD is rewritten for what remains (hashes and sizes unchanged), so pip installs the result like
any wheel. Used by scripts/make_gpu_bundle.sh.
"""
import base64
import csv
import hashlib
import io
from pathlib import Path
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

VERSIONED_LIBRARY = re.compile(r'^(?P<stem>.+\.so)(\.\d+)*$')


def is_build_only(name):
    """Headers, CMake files and static libraries: nothing a running program reads."""
    parts = name.split('/')
    if len(parts) > 3 and parts[0].endswith('.data') and parts[1] == 'data':
        if parts[2] == 'include':
            return True
        if parts[2] == 'share' and len(parts) > 4 and parts[4] == 'cmake':
            return True
    return name.endswith('.a')


def soname(data):
    """SONAME of a shared library given as bytes, or None (also without readelf)."""
    readelf = shutil.which('readelf')
    if readelf is None:
        return None
    with tempfile.NamedTemporaryFile(suffix='.so') as handle:
        handle.write(data)
        handle.flush()
        output = subprocess.run([readelf, '-d', handle.name], capture_output=True, text=True,
                                check=False).stdout
    match = re.search(r'\(SONAME\)\s+Library soname: \[([^\]]+)\]', output)
    return match.group(1) if match else None


def duplicate_library_copies(archive, names):
    """Names of versioned-library copies that equal the copy named by their SONAME."""
    groups = {}
    for name in names:
        directory, _, base = name.rpartition('/')
        match = VERSIONED_LIBRARY.match(base)
        if match:
            groups.setdefault((directory, match.group('stem')), []).append(name)
    dropped = set()
    for (directory, _), members in groups.items():
        if len(members) < 2:
            continue
        contents = {name: archive.read(name) for name in members}
        keep = soname(next(iter(contents.values())))
        keep = f'{directory}/{keep}' if keep else None
        if keep not in contents:
            continue
        dropped |= {name for name, data in contents.items()
                    if name != keep and data == contents[keep]}
    return dropped


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
    return [name, f'sha256={digest}', str(len(data))]


def slim(source, destination):
    """Write the slim copy of wheel `source` to `destination`; return (bytes in, bytes out)."""
    with zipfile.ZipFile(source) as archive:
        infos = archive.infolist()
        names = [info.filename for info in infos if not info.is_dir()]
        records = [n for n in names if n.endswith('.dist-info/RECORD')]
        if len(records) != 1:
            raise SystemExit(f'{source.name}: expected one .dist-info/RECORD, found {records}')
        record_name = records[0]
        dropped = {n for n in names if is_build_only(n)}
        dropped |= duplicate_library_copies(archive, [n for n in names if n not in dropped])
        rows = []
        with zipfile.ZipFile(destination, 'w', zipfile.ZIP_DEFLATED, compresslevel=9) as out:
            for info in infos:
                name = info.filename
                if info.is_dir() or name in dropped or name == record_name:
                    continue
                data = archive.read(name)
                copy = zipfile.ZipInfo(name, date_time=info.date_time)
                copy.external_attr = info.external_attr
                copy.compress_type = zipfile.ZIP_DEFLATED
                out.writestr(copy, data, compresslevel=9)
                rows.append(record_line(name, data))
            rows.append([record_name, '', ''])
            text = io.StringIO()
            csv.writer(text, lineterminator='\n').writerows(rows)
            record = zipfile.ZipInfo(record_name, date_time=(2026, 1, 1, 0, 0, 0))
            record.external_attr = 0o644 << 16
            out.writestr(record, text.getvalue(), compress_type=zipfile.ZIP_DEFLATED)
    return source.stat().st_size, destination.stat().st_size


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    source_dir, destination_dir = Path(argv[0]), Path(argv[1])
    destination_dir.mkdir(parents=True, exist_ok=True)
    wheels = sorted(source_dir.glob('*.whl'))
    if not wheels:
        print(f'no wheels in {source_dir}', file=sys.stderr)
        return 1
    total_in = total_out = 0
    for wheel in wheels:
        size_in, size_out = slim(wheel, destination_dir / wheel.name)
        total_in += size_in
        total_out += size_out
    print(f'{len(wheels)} wheels: {total_in / 2**20:.1f} MiB -> {total_out / 2**20:.1f} MiB')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
