# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""ROS 2 linters as tests: flake8 and pep257 (ament settings), license headers, package.xml."""
import ast
from pathlib import Path
import sys
import xml.etree.ElementTree as ElementTree

from catkin_pkg.package import parse_package
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ['pi0_ros', 'launch', 'test', 'scripts']
GENERATED = (ROOT / 'pi0_ros' / 'msg', ROOT / 'pi0_ros' / 'srv')


def python_sources():
    files = [ROOT / 'setup.py']
    for directory in SOURCE_DIRS:
        for path in sorted((ROOT / directory).rglob('*')):
            if any(g in path.parents for g in GENERATED) or '__pycache__' in path.parts:
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
    rc = main(argv=[str(ROOT / d) for d in ('pi0_ros', 'launch')]
              + ['--exclude', *map(str, GENERATED)])
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
    assert 'rosidl_interface_packages' in [g.name for g in package.member_of_groups]


# Python modules whose rosdep key is not the module's name.
ROSDEP_KEYS = {'numpy': 'python3-numpy', 'cv2': 'python3-opencv', 'yaml': 'python3-yaml',
               'matplotlib': 'python3-matplotlib', 'psutil': 'python3-psutil',
               'pytest': 'python3-pytest', 'catkin_pkg': 'python3-catkin-pkg',
               'tqdm': 'python3-tqdm'}
# No rosdep keys (`rosdep install` would stop at them): pip requirements, named in package.xml.
PIP_ONLY = {'torch', 'triton', 'lerobot', 'transformers', 'safetensors', 'tokenizers', 'pynvml',
            'mujoco', 'ament_flake8', 'ament_pep257'}
# Declared without a Python import: what the generated interfaces and launch files need.
NOT_IMPORTED = {'rosidl_default_runtime', 'rcl_interfaces', 'lifecycle_msgs', 'launch_ros'}


def imported_dependencies(paths, local):
    """Return the rosdep keys of the third-party modules that `paths` import."""
    keys = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split('.')[0]
                if top not in sys.stdlib_module_names and top not in local | PIP_ONLY:
                    keys.add(ROSDEP_KEYS.get(top, top))
    return keys


@pytest.mark.linter
def test_package_xml_declares_what_the_code_imports_and_nothing_it_does_not():
    package = parse_package(str(ROOT / 'package.xml'))
    runtime = [p for p in python_sources() if p.parts[len(ROOT.parts)] in ('pi0_ros', 'launch')]
    tests = [p for p in python_sources() if p.parts[len(ROOT.parts)] == 'test']
    local = {'pi0_ros'} | {p.stem for p in tests}
    used_at_runtime = imported_dependencies(runtime, local)
    exec_deps = {d.name for d in package.exec_depends + package.build_export_depends}
    test_deps = {d.name for d in package.test_depends}
    assert used_at_runtime - exec_deps == set(), 'imported at run time, not an exec_depend'
    assert exec_deps - used_at_runtime - NOT_IMPORTED == set(), 'declared, never imported'
    test_only = imported_dependencies(tests, local) - used_at_runtime - NOT_IMPORTED
    assert test_only - test_deps == set(), 'imported by tests, not a test_depend'
    assert test_only & exec_deps == set(), 'used only by tests, declared for run time'
    text = (ROOT / 'package.xml').read_text()
    assert all(name in text for name in ('torch', 'lerobot', 'mujoco', 'nvidia-ml-py'))
