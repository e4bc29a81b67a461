# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Pi0 inference engine (pure PyTorch, no ROS)."""
from pi0_ros.engine.config import (EngineOptions, InferenceResult, ModelDims, RTCOptions,
                                   RTCRequest)
from pi0_ros.engine.engine import Pi0Engine
from pi0_ros.engine.errors import CheckpointError, EngineError, InputError, NonFiniteOutputError

__all__ = ['Pi0Engine', 'ModelDims', 'EngineOptions', 'InferenceResult', 'RTCOptions',
           'RTCRequest', 'EngineError', 'CheckpointError', 'InputError', 'NonFiniteOutputError']
