# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The colcon route: CMakeLists.txt configured, built and installed as colcon runs it.

colcon builds this ament_cmake package with the Python package installed by CMake (the option
the pip route turns off), next to the code that rosidl generates for msg/. Here the same CMake
project is built against the ROS 2 wheels of the virtual environment into a temporary prefix,
and a fresh interpreter that sees only that prefix imports the package and its messages.
"""
import os
from pathlib import Path
import shutil
import subprocess
import sys
import sysconfig

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)

pytestmark = pytest.mark.slow


def run(command, log, **kwargs):
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **kwargs)
    log.write_text(log.read_text() + result.stdout if log.exists() else result.stdout)
    assert result.returncode == 0, f'{command[:3]} failed:\n{result.stdout[-3000:]}'
    return result.stdout


@pytest.fixture(scope='module', params=['copy', 'symlink'])
def installed_prefix(tmp_path_factory, request):
    """
    Build and install as colcon does, plainly or with --symlink-install.

    The source tree also holds what the pip route generates there (scripts/setup_env.sh: msg/
    and bytecode); the install must use its own generated msg/, and still import once `make
    clean` has removed the pip route's copy (under --symlink-install, ament linked it in).
    """
    if shutil.which('cmake') is None:
        pytest.skip('cmake is not installed')
    if not (VENV / 'share' / 'rosidl_default_generators').is_dir():
        pytest.skip('the ROS 2 build wheels are not installed (scripts/setup_env.sh)')
    work = tmp_path_factory.mktemp('colcon_route')
    source, build, prefix = work / 'src' / 'pi0_ros', work / 'build', work / 'install'
    log = work / 'cmake.log'
    # A checkout as colcon sees it (the tracked files): the virtual environment inside this
    # working tree would be a source-tree include path, which CMake refuses to export.
    listing = subprocess.run(['git', 'ls-files', '-z'], cwd=ROOT, capture_output=True)
    if listing.returncode != 0:
        pytest.skip('not a git checkout: the tracked files are unknown')
    tracked = listing.stdout.decode().split('\0')
    for name in filter(None, tracked):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    pip_route = [source / 'pi0_ros' / 'msg' / '__init__.py',
                 source / 'pi0_ros' / 'msg' / '_pip_route_only.py',
                 source / 'pi0_ros' / '__pycache__' / 'node.cpython-312.pyc']
    for path in pip_route:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('PIP_ROUTE = True\n')
    symlink = ['-DAMENT_CMAKE_SYMLINK_INSTALL=1'] if request.param == 'symlink' else []
    env = dict(os.environ, AMENT_PREFIX_PATH=str(VENV), CMAKE_PREFIX_PATH=str(VENV),
               PATH=f'{VENV / "bin"}{os.pathsep}{os.environ["PATH"]}')
    run(['cmake', '-S', str(source), '-B', str(build), '-DBUILD_TESTING=OFF', *symlink,
         f'-DCMAKE_INSTALL_PREFIX={prefix}', f'-DPython3_EXECUTABLE={sys.executable}',
         f'-DPYTHON_EXECUTABLE={sys.executable}'], log, env=env)
    run(['cmake', '--build', str(build), '-j', str(os.cpu_count() or 2)], log, env=env)
    # (cwd: ament's symlink install writes its manifest into the working directory)
    run(['cmake', '--install', str(build)], log, env=env, cwd=work)
    shutil.rmtree(source / 'pi0_ros' / 'msg')             # what `make clean` removes
    shutil.rmtree(source / 'pi0_ros' / '__pycache__')
    return prefix


def site_packages(prefix: Path) -> Path:
    relative = Path(sysconfig.get_paths()['purelib']).relative_to(sys.prefix)
    return prefix / relative


def test_the_install_has_the_package_its_messages_and_its_ros_files(installed_prefix):
    package = site_packages(installed_prefix) / 'pi0_ros'
    assert (package / '__init__.py').read_text() == (ROOT / 'pi0_ros' / '__init__.py').read_text()
    for module in ('node.py', 'engine/engine.py', 'control/planner.py', 'msg/__init__.py'):
        assert (package / module).is_file(), module
    # The generated messages, not the pip route's copies from the source tree.
    assert 'PIP_ROUTE' not in (package / 'msg' / '__init__.py').read_text()
    assert not (package / 'msg' / '_pip_route_only.py').exists()
    assert not (package / '__pycache__' / 'node.cpython-312.pyc').exists()
    for executable in ('control_node', 'sim_node', 'bench'):
        assert os.access(installed_prefix / 'lib' / 'pi0_ros' / executable, os.X_OK)
    share = installed_prefix / 'share' / 'pi0_ros'
    assert (share / 'launch' / 'control.launch.py').is_file()
    assert (share / 'config' / 'pi0_ros.yaml').is_file()
    assert (share / 'package.xml').is_file()


def test_a_fresh_interpreter_imports_the_installed_package_and_messages(
        installed_prefix, tmp_path):
    script = (
        'import pi0_ros, pi0_ros.msg\n'
        'from pi0_ros.msg import ActionChunk\n'
        'from rclpy.serialization import deserialize_message, serialize_message\n'
        'import pi0_ros.node\n'
        'chunk = ActionChunk(joint_names=["shoulder"], dt=0.02)\n'
        'back = deserialize_message(serialize_message(chunk), ActionChunk)\n'
        'print(pi0_ros.__file__, pi0_ros.msg.__file__, list(back.joint_names), back.dt)\n')
    libraries = [str(installed_prefix / 'lib'), os.environ.get('LD_LIBRARY_PATH', '')]
    env = dict(os.environ, PYTHONPATH=str(site_packages(installed_prefix)),
               LD_LIBRARY_PATH=os.pathsep.join(p for p in libraries if p))
    result = subprocess.run([sys.executable, '-c', script], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    package_file, msg_file, names, dt = result.stdout.split()
    assert Path(package_file).is_relative_to(installed_prefix)
    assert Path(msg_file).is_relative_to(installed_prefix)
    assert names == "['shoulder']" and float(dt) == pytest.approx(0.02)
