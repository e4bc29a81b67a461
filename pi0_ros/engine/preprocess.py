# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Resize-with-pad to the model resolution on the device, without allocating per frame.

Equals LeRobot/openpi ``resize_with_pad_torch`` (bilinear, align_corners=False, aspect kept,
centered black padding) followed by the [0, 1] -> [-1, 1] scaling, up to float rounding. The
bilinear filter is two gathers along width, two along height, and a weighted sum; its index and
weight vectors are computed once per frame size. On the GPU one Triton launch resizes any number
of frames of any sizes, each described by a row of the frame table (FrameTable: the frame's
offset in a byte buffer, its plan, and where its features go), so a CUDA graph can hold it; the
PyTorch path (resize_into) works frame by frame in preallocated scratch buffers.
"""
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from pi0_ros.engine.kernels import triton

# A frame table row per frame, in 4-byte words: a header of four int64 (the frame's byte
# offset in the frames buffer, its width, and the prefix slot and camera its features go to),
# then the int32 source columns (two) and rows (two) and the float32 weights of the columns
# (two) and rows (two) of the SxS output, each S words.
TABLE_HEADER_WORDS = 8


def table_words(size: int) -> int:
    """4-byte words of one frame's table row for an SxS model image."""
    return TABLE_HEADER_WORDS + 8 * size


if triton is not None:
    import triton.language as tl

    @triton.jit
    def _resize_frames_kernel(frames_ptr, header_ptr, index_ptr, weight_ptr, pixels_ptr,
                              row_words, SIZE: tl.constexpr, BLOCK: tl.constexpr):
        # One program: one output row of one frame, all columns and channels. The frame's
        # geometry comes from its table row (the same memory read as int64, int32, float32).
        out_row, frame = tl.program_id(0), tl.program_id(1).to(tl.int64)
        entry = frame * row_words
        offset = tl.load(header_ptr + entry // 2)
        width = tl.load(header_ptr + entry // 2 + 1)
        plan = entry + 8
        cols = tl.arange(0, BLOCK)
        inside = cols < SIZE
        col0 = tl.load(index_ptr + plan + cols, mask=inside, other=0)
        col1 = tl.load(index_ptr + plan + SIZE + cols, mask=inside, other=0)
        col_w0 = tl.load(weight_ptr + plan + 4 * SIZE + cols, mask=inside, other=0.0)
        col_w1 = tl.load(weight_ptr + plan + 5 * SIZE + cols, mask=inside, other=0.0)
        row0 = tl.load(index_ptr + plan + 2 * SIZE + out_row).to(tl.int64)
        row1 = tl.load(index_ptr + plan + 3 * SIZE + out_row).to(tl.int64)
        row_w0 = tl.load(weight_ptr + plan + 6 * SIZE + out_row)
        row_w1 = tl.load(weight_ptr + plan + 7 * SIZE + out_row)
        top = frames_ptr + offset + row0 * width * 3
        bottom = frames_ptr + offset + row1 * width * 3
        out = pixels_ptr + frame * 3 * SIZE * SIZE + out_row * SIZE + cols
        for channel in tl.static_range(3):
            a = tl.load(top + col0 * 3 + channel, mask=inside, other=0).to(tl.float32) * col_w0
            a += tl.load(top + col1 * 3 + channel, mask=inside, other=0).to(tl.float32) * col_w1
            b = tl.load(bottom + col0 * 3 + channel, mask=inside, other=0).to(tl.float32) \
                * col_w0
            b += tl.load(bottom + col1 * 3 + channel, mask=inside, other=0).to(tl.float32) \
                * col_w1
            value = tl.minimum(tl.maximum(a * row_w0 + b * row_w1, 0.0), 255.0)
            tl.store(out + channel * SIZE * SIZE, value * (2.0 / 255.0) - 1.0, mask=inside)


@dataclass
class ResizePlan:
    """Gather indices and weights that map an HxW frame onto the padded SxS image."""

    height: int
    width: int
    col0: torch.Tensor
    col1: torch.Tensor
    col_w0: torch.Tensor
    col_w1: torch.Tensor
    row0: torch.Tensor
    row1: torch.Tensor
    row_w0: torch.Tensor
    row_w1: torch.Tensor


def _axis_weights(in_size: int, out_size: int, target: int, offset: int) -> tuple:
    """
    Bilinear source indices/weights along one axis, placed at offset on a padded axis.

    The weights are read off PyTorch's own bilinear kernel (align_corners=False) applied to an
    identity basis, so they carry exactly the rounding F.interpolate uses on the CPU.
    """
    basis = torch.eye(in_size, dtype=torch.float32).view(1, in_size, 1, in_size)
    matrix = F.interpolate(basis, size=(1, out_size), mode='bilinear',
                           align_corners=False)[0, :, 0, :].numpy()  # [in, out]
    low = np.argmax(matrix > 0, axis=0)
    high = np.minimum(low + 1, in_size - 1)
    columns = np.arange(out_size)
    weight_low = matrix[low, columns]
    weight_high = np.where(high != low, matrix[high, columns], np.float32(0.0))
    index0 = np.zeros(target, np.int64)
    index1 = np.zeros(target, np.int64)
    weight0 = np.zeros(target, np.float32)
    weight1 = np.zeros(target, np.float32)
    index0[offset:offset + out_size] = low
    index1[offset:offset + out_size] = high
    weight0[offset:offset + out_size] = weight_low
    weight1[offset:offset + out_size] = weight_high
    return index0, index1, weight0, weight1


def _plan_axes(height: int, width: int, size: int) -> tuple:
    """(rows, cols) of _axis_weights for one frame size, as resize_with_pad_torch sizes it."""
    ratio = max(width / size, height / size)
    resized_h, resized_w = int(height / ratio), int(width / ratio)
    return (_axis_weights(height, resized_h, size, (size - resized_h) // 2),
            _axis_weights(width, resized_w, size, (size - resized_w) // 2))


def make_resize_plan(height: int, width: int, size: int, device: torch.device) -> ResizePlan:
    """Plan for one frame size; matches resize_with_pad_torch's sizes and centered padding."""
    rows, cols = _plan_axes(height, width, size)

    def dev(array, shape):
        return torch.from_numpy(array).to(device).reshape(shape)

    return ResizePlan(height, width,
                      dev(cols[0], (-1,)), dev(cols[1], (-1,)),
                      dev(cols[2], (size, 1)), dev(cols[3], (size, 1)),
                      dev(rows[0], (-1,)), dev(rows[1], (-1,)),
                      dev(rows[2], (size, 1, 1)), dev(rows[3], (size, 1, 1)))


def table_plan(height: int, width: int, size: int) -> np.ndarray:
    """Return the plan words of a frame table row (after its header) for one frame size."""
    rows, cols = _plan_axes(height, width, size)
    return np.concatenate([cols[0].astype(np.int32), cols[1].astype(np.int32),
                           rows[0].astype(np.int32), rows[1].astype(np.int32),
                           cols[2].view(np.int32), cols[3].view(np.int32),
                           rows[2].view(np.int32), rows[3].view(np.int32)])


class FrameTable:
    """Writes frame table rows on the host (numpy int32 [frames, table_words(size)])."""

    def __init__(self, rows: np.ndarray, size: int):
        if rows.dtype != np.int32 or rows.ndim != 2 or rows.shape[1] != table_words(size):
            raise ValueError(f'frame table rows must be int32 [n, {table_words(size)}]')
        self.rows = rows
        self.size = size
        self._plans = {}
        self._row_sizes = [None] * len(rows)  # the frame size whose plan each row holds

    def write(self, index: int, height: int, width: int, offset: int, slot: int,
              cam: int) -> None:
        """Row index: an HxW frame at byte offset, its features for (slot, cam)."""
        row = self.rows[index]
        if self._row_sizes[index] != (height, width):
            # Only when the size changes: numpy lets go of the GIL for a copy this large.
            plan = self._plans.get((height, width))
            if plan is None:
                plan = self._plans[(height, width)] = table_plan(height, width, self.size)
            row[TABLE_HEADER_WORDS:] = plan
            self._row_sizes[index] = (height, width)
        row[:TABLE_HEADER_WORDS].view(np.int64)[:] = (offset, width, slot, cam)

    def clear(self) -> None:
        """Zero every row (a zero row has zero weights, and its features go to slot 0, cam 0)."""
        self.rows[:] = 0
        self._row_sizes = [None] * len(self.rows)


class FrameResizer:
    """Preallocated scratch for resizing uint8 HxWx3 device frames into float CHW images."""

    def __init__(self, max_height: int, max_width: int, size: int, device: torch.device):
        self.size = size
        self.device = device
        self._plans = {}
        self.cols_u8 = [torch.zeros(max_height, size, 3, dtype=torch.uint8, device=device)
                        for _ in range(2)]
        self.cols_f32 = [torch.zeros(max_height, size, 3, dtype=torch.float32, device=device)
                         for _ in range(2)]
        self.rows_f32 = [torch.zeros(size, size, 3, dtype=torch.float32, device=device)
                         for _ in range(2)]

    def buffers(self) -> list:
        """Return the scratch tensors (for pointer-stability tests)."""
        return self.cols_u8 + self.cols_f32 + self.rows_f32

    def plan(self, height: int, width: int) -> ResizePlan:
        """Return the (cached) plan for a frame size."""
        key = (height, width)
        if key not in self._plans:
            self._plans[key] = make_resize_plan(height, width, self.size, self.device)
        return self._plans[key]

    def resize_into(self, frame: torch.Tensor, out: torch.Tensor) -> None:
        """Resize frame uint8 [H,W,3] into out float32 [3,S,S], values 0..255 (not scaled)."""
        height, width = frame.shape[0], frame.shape[1]
        plan = self.plan(height, width)
        a_u8, b_u8 = self.cols_u8[0][:height], self.cols_u8[1][:height]
        a_f, b_f = self.cols_f32[0][:height], self.cols_f32[1][:height]
        torch.index_select(frame, 1, plan.col0, out=a_u8)
        torch.index_select(frame, 1, plan.col1, out=b_u8)
        a_f.copy_(a_u8)
        b_f.copy_(b_u8)
        a_f.mul_(plan.col_w0).addcmul_(b_f, plan.col_w1)
        top, bottom = self.rows_f32
        torch.index_select(a_f, 0, plan.row0, out=top)
        torch.index_select(a_f, 0, plan.row1, out=bottom)
        top.mul_(plan.row_w0).addcmul_(bottom, plan.row_w1)
        out.copy_(top.permute(2, 0, 1))


def copy_frame_bytes(frame: np.ndarray, out: np.ndarray, out_bytes: memoryview,
                     offset: int) -> int:
    """
    Copy a uint8 frame's bytes to out[offset:] (out_bytes: memoryview(out)); return the end.

    A contiguous frame is copied without letting go of the GIL: numpy's copy lets go of it
    for a large copy and then waits to take it back, behind other busy threads (benchmarks/
    gil_contention.py: 12 frames of 640x480 beside one busy thread, 1.2 against 4.7 ms).
    """
    stop = offset + frame.size
    if frame.flags.c_contiguous:
        out_bytes[offset:stop] = memoryview(frame).cast('B')
    else:
        np.copyto(out[offset:stop].reshape(frame.shape), frame)
    return stop


def resize_frames(frames: torch.Tensor, table: torch.Tensor, out: torch.Tensor) -> None:
    """
    Resize n uint8 frames, scaled to [-1, 1], in one launch (Triton, CUDA only).

    frames: the uint8 buffer the table's byte offsets point into (HxWx3 bytes per frame);
    table: int32 [n, table_words(S)] rows written by FrameTable; out: float32 [n,3,S,S].
    Same arithmetic as resize_into followed by scale_to_signed_unit.
    """
    size = out.shape[-1]
    _resize_frames_kernel[(size, table.shape[0])](
        frames, table.view(torch.int64), table, table.view(torch.float32), out, table.stride(0),
        SIZE=size, BLOCK=triton.next_power_of_2(size), num_warps=4)


def scale_to_signed_unit(pixels: torch.Tensor) -> None:
    """In place: 0..255 -> clamp -> [-1, 1] (padding 0 becomes -1, as in LeRobot)."""
    pixels.clamp_(0.0, 255.0).mul_(2.0 / 255.0).sub_(1.0)
