# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Exceptions raised by the Pi0 engine."""


class EngineError(Exception):
    """Base class of every error the engine raises on purpose."""


class CheckpointError(EngineError):
    """A checkpoint (or tokenizer) directory is missing a file or holds malformed data."""


class InputError(EngineError, ValueError):
    """An observation handed to infer() is malformed (shape, dtype, size, finiteness)."""


class NonFiniteOutputError(EngineError):
    """The action chunk contains inf or NaN; it is never returned."""
