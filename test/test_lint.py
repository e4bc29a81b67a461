# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""ROS 2 linters as tests: flake8 and pep257 (ament settings), license headers, package.xml."""
from pathlib import Path
import xml.etree.ElementTree as ElementTree

from catkin_pkg.package import parse_package
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ['pi0_ros', 'launch', 'test', 'scripts']
GENERATED = ROOT / 'pi0_ros' / 'msg'


def python_sources():
    files = [ROOT / 'setup.py']
    for directory in SOURCE_DIRS:
        for path in sorted((ROOT / directory).rglob('*')):
            if GENERATED in path.parents or '__pycache__' in path.parts:
                continue
            if path.suffix == '.py' or (path.parent.name == 'scripts' and path.is_file()
                                        and path.read_text(errors='ignore').startswith('#!')
                                        and 'python' in path.read_text(errors='ignore')[:40]):
                files.append(path)
    return files


@pytest.mark.linter
def test_flake8():
    from ament_flake8.main import main_with_errors
    rc, errors = main_with_errors(argv=['--config', str(ROOT / 'setup.cfg'),
                                        *[str(p) for p in python_sources()]])
    assert rc == 0, f'flake8 found {len(errors)} problem(s):\n' + '\n'.join(errors[:50])


@pytest.mark.linter
def test_pep257():
    from ament_pep257.main import main
    rc = main(argv=[str(ROOT / d) for d in ('pi0_ros', 'launch')] + ['--exclude', str(GENERATED)])
    assert rc == 0, 'pep257 found problems (see output above)'


@pytest.mark.linter
def test_every_source_file_has_the_license_header():
    missing = [str(p.relative_to(ROOT)) for p in python_sources()
               if 'SPDX-License-Identifier: Apache-2.0' not in p.read_text()[:400]
               or 'Copyright' not in p.read_text()[:400]]
    assert not missing, f'files without the license header: {missing}'


@pytest.mark.linter
def test_package_xml_is_well_formed_format_3():
    root = ElementTree.parse(ROOT / 'package.xml').getroot()
    assert root.tag == 'package' and root.attrib['format'] == '3'
    package = parse_package(str(ROOT / 'package.xml'))
    package.validate()
    assert package.name == 'pi0_ros'
    assert package.get_build_type() == 'ament_cmake'
    exec_deps = {d.name for d in package.exec_depends}
    assert {'rclpy', 'sensor_msgs', 'trajectory_msgs', 'diagnostic_msgs', 'std_srvs',
            'lifecycle_msgs', 'cv_bridge', 'rosidl_default_runtime'} <= exec_deps
    assert 'rosidl_interface_packages' in [g.name for g in package.member_of_groups]
