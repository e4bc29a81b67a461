# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Pure numpy control layer: chunk time base, blending, limits, hold, trajectory points."""
from pi0_ros.control.action_chunk import Chunk
from pi0_ros.control.limits import JointLimits
from pi0_ros.control.planner import (AddChunkResult, ChunkPlanner, OutsideLimits, PlannerConfig,
                                     PlannerState, PlanPoints)
from pi0_ros.control.trajectory import validate_trajectory

__all__ = ['AddChunkResult', 'Chunk', 'ChunkPlanner', 'JointLimits', 'OutsideLimits',
           'PlannerConfig', 'PlannerState', 'PlanPoints', 'validate_trajectory']
