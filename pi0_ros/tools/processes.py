# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Child processes of the demo, the soak and the tests: started, logged and always stopped.

Also the environment they share: the package's Fast DDS profile for camera-sized messages.
"""
import argparse
import ast
import os
from pathlib import Path
import signal
import subprocess
import sys

# The variable Fast DDS 2.x (ROS 2 Jazzy's rmw_fastrtps) reads its XML profiles from.
FASTDDS_PROFILE_VARIABLE = 'FASTRTPS_DEFAULT_PROFILES_FILE'
FASTDDS_PROFILE = 'fastdds_large_images.xml'
FASTDDS_PROFILE_HELP = (
    "Fast DDS XML profile for every process this starts (and this one): a path, or 'none' for "
    f"Fast DDS's defaults. Default: ${FASTDDS_PROFILE_VARIABLE} if set, else the package's "
    f'config/{FASTDDS_PROFILE} (a 32 MB shared-memory segment, so that 900 kB camera frames '
    'reach the node on this host)')


def node_parameter(text):
    """Parse NAME:=VALUE (true/false as in ROS, a Python literal, else a string) into a pair."""
    name, separator, value = text.partition(':=')
    if not separator or not name:
        raise argparse.ArgumentTypeError(f"expected NAME:=VALUE, got '{text}'")
    if value.lower() in ('true', 'false'):  # as `--ros-args -p` reads them
        return name, value.lower() == 'true'
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name, value


def package_config_file(name):
    """
    Return the path of config/<name> of this package, or None where it cannot be found.

    Looked up in the source tree (the pip route's editable install), then in the package's
    share directory (colcon: <prefix>/share/pi0_ros/config, also where pip puts data_files).
    """
    source = Path(__file__).resolve().parents[2] / 'config' / name
    if source.is_file():
        return source
    shares = []
    try:
        from ament_index_python.packages import get_package_share_directory
        shares.append(Path(get_package_share_directory('pi0_ros')))
    except (ImportError, LookupError, OSError, ValueError):
        pass                      # not installed with colcon, or no ROS environment sourced
    shares.append(Path(sys.prefix) / 'share' / 'pi0_ros')
    return next((share / 'config' / name for share in shares
                 if (share / 'config' / name).is_file()), None)


def fastdds_profile_env(env, choice=None):
    """
    Set the Fast DDS profile variable in `env` (a dict, changed in place); return the file used.

    choice: None keeps a profile the environment already names and otherwise uses the package's
    config/fastdds_large_images.xml; 'none' removes the variable (Fast DDS's defaults); anything
    else is a path to a profile. Raises FileNotFoundError for a path that is not a file.
    """
    if choice is None:
        choice = env.get(FASTDDS_PROFILE_VARIABLE) or package_config_file(FASTDDS_PROFILE)
        if choice is None:
            env.pop(FASTDDS_PROFILE_VARIABLE, None)
            return None
    elif str(choice).lower() == 'none':
        env.pop(FASTDDS_PROFILE_VARIABLE, None)
        return None
    path = Path(choice).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f'Fast DDS profile {choice} is not a file')
    env[FASTDDS_PROFILE_VARIABLE] = str(path)
    return str(path)


def copy_to_environ(env, names):
    """Give this process the values `env` has for `names` (unset where `env` has none)."""
    for name in names:
        if name in env:
            os.environ[name] = env[name]
        else:
            os.environ.pop(name, None)


def format_parameter(value):
    """Format a Python value as the YAML literal of a `--ros-args -p name:=value`."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, (list, tuple)):
        return '[' + ', '.join(format_parameter(v) for v in value) + ']'
    return repr(value)


def ros_args(parameters, remaps=()):
    """Return `--ros-args` with `-r from:=to` remaps and `-p name:=value` parameters."""
    args = ['--ros-args']
    for source, target in remaps:
        args += ['-r', f'{source}:={target}']
    for key, value in parameters.items():
        args += ['-p', f'{key}:={format_parameter(value)}']
    return args


class Process:
    """A child process in its own process group, with its output in `<log_dir>/<name>.log`."""

    def __init__(self, name, command, env, log_dir, cwd=None):
        self.name = name
        self.command = command
        self.log_path = log_dir / f'{name}.log'
        self._log = open(self.log_path, 'wb')
        self.popen = subprocess.Popen(command, env=env, cwd=cwd, stdout=self._log,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)

    @property
    def returncode(self):
        """Return the exit code, None while it runs."""
        return self.popen.poll()

    def alive(self):
        return self.popen.poll() is None

    def send_signal(self, sig):
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def wait(self, timeout):
        """Wait for exit; return the exit code (raises subprocess.TimeoutExpired)."""
        return self.popen.wait(timeout=timeout)

    def output(self):
        """Return everything the process printed so far."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors='replace')

    def tail(self, lines=20):
        return '\n'.join(self.output().splitlines()[-lines:])

    def stop(self, timeout=20.0):
        """
        Stop with SIGINT, escalating to SIGKILL; return the exit code.

        Whatever the process started in its group is killed too, so nothing outlives it.
        """
        try:
            if self.popen.poll() is None:
                self.popen.send_signal(signal.SIGINT)
                try:
                    self.popen.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(self.popen.pid, signal.SIGKILL)
                    self.popen.wait(timeout=timeout)
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        finally:
            self._log.close()
        return self.popen.returncode
