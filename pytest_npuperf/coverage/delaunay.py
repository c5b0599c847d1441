"""Linear interpolation on the Delaunay triangulation, without building it.

The simulator interpolates 2-D and 3-D points with scipy's `LinearNDInterpolator` (qhull's
Delaunay triangulation, then barycentric weights inside the simplex that holds the target;
nothing outside the convex hull). The Delaunay triangulation is the lower convex hull of the
points lifted onto the paraboloid (x, |x|^2), so the simplex holding a target p and its
barycentric weights are the optimum of a small linear program:

    minimise  sum_i w_i |x_i|^2   subject to  sum_i w_i x_i = p,  sum_i w_i = 1,  w >= 0

(d + 1 equality rows, one column per point). Its optimal basis names the simplex's corners,
the basic values are the weights, and the interpolated value is sum_i w_i y_i. A target outside
the hull has no feasible w. Where the triangulation is not unique (four points on a circle),
any optimal basis is a simplex of a valid Delaunay triangulation: the value can differ from
qhull's choice unless the data are linear there.

Solved by a two-phase dense simplex method with Bland's rule (no cycling on the degenerate
lattices a shape grid makes), on coordinates translated to their centre and scaled by one
factor (which keeps the triangulation: a Delaunay triangulation is invariant under uniform
scaling, not under per-axis scaling).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_TOL = 1e-9


def _pivot(tableau: np.ndarray, row: int, col: int) -> None:
    tableau[row] /= tableau[row, col]
    others = np.arange(tableau.shape[0]) != row
    tableau[others] -= np.outer(tableau[others, col], tableau[row])


def _run(tableau: np.ndarray, basis: list[int], allowed: int) -> bool:
    """Simplex iterations on the tableau (objective in the last row, right-hand side in the
    last column), entering columns below `allowed` only. False when unbounded."""
    rows = tableau.shape[0] - 1
    for _ in range(50 * (tableau.shape[1] + rows)):
        costs = tableau[-1, :allowed]
        entering = np.flatnonzero(costs < -_TOL)
        if not entering.size:
            return True
        col = int(entering[0])  # Bland: the lowest index
        column = tableau[:rows, col]
        positive = column > _TOL
        if not positive.any():
            return False
        ratios = np.full(rows, np.inf)
        ratios[positive] = tableau[:rows, -1][positive] / column[positive]
        best = ratios.min()
        ties = np.flatnonzero(ratios <= best + _TOL * max(1.0, abs(best)))
        row = int(min(ties, key=lambda r: basis[r]))  # Bland: the lowest basic index
        _pivot(tableau, row, col)
        basis[row] = col
    return True  # iteration cap: the basis reached is still feasible


def barycentric(points: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(indices, weights) of the Delaunay simplex of `points` (n x d) holding `target` (d),
    or None when it lies outside their convex hull."""
    n, d = points.shape
    centre = points.mean(axis=0)
    scale = float(np.abs(points - centre).max()) or 1.0
    x = (points - centre) / scale
    p = (target - centre) / scale
    lift = (x * x).sum(axis=1)
    lift = lift - lift.min()  # a constant shift changes no optimum (sum w = 1)
    a = np.vstack([x.T, np.ones(n)])  # (d + 1) x n
    b = np.append(p, 1.0)
    sign = np.where(b < 0, -1.0, 1.0)
    a, b = a * sign[:, None], b * sign
    m = d + 1
    # Phase 1: artificial variables n .. n+m-1, minimise their sum.
    tableau = np.zeros((m + 1, n + m + 1))
    tableau[:m, :n] = a
    tableau[:m, n:n + m] = np.eye(m)
    tableau[:m, -1] = b
    tableau[-1, :n] = -a.sum(axis=0)
    tableau[-1, -1] = -b.sum()
    basis = list(range(n, n + m))
    _run(tableau, basis, n)
    if -tableau[-1, -1] > 1e-7:
        return None  # infeasible: outside the hull
    for row in range(m):  # drive artificial variables still basic (at zero) out
        if basis[row] >= n:
            candidates = np.flatnonzero(np.abs(tableau[row, :n]) > _TOL)
            if candidates.size:
                _pivot(tableau, row, int(candidates[0]))
                basis[row] = int(candidates[0])
    keep = [r for r in range(m) if basis[r] < n]  # a row left with an artificial is redundant
    phase2 = np.zeros((len(keep) + 1, n + 1))
    phase2[:-1, :n] = tableau[keep, :n]
    phase2[:-1, -1] = tableau[keep, -1]
    basis = [basis[r] for r in keep]
    phase2[-1, :n] = lift
    for row, var in enumerate(basis):  # reduced costs of the basis
        phase2[-1] -= lift[var] * phase2[row]
    if not _run(phase2, basis, n):
        return None
    weights = np.clip(phase2[:-1, -1], 0.0, None)
    total = weights.sum()
    if total <= 0:
        return None
    return np.array(basis), weights / total


def linear_nd(points: Sequence[Sequence[float]], values: Sequence[float],
              target: Sequence[float]) -> float | None:
    """The value at `target` of the piecewise-linear interpolant on the Delaunay triangulation
    of `points` (what scipy.interpolate.griddata(..., method="linear") gives), or None outside
    the convex hull or for a degenerate point set (fewer than d + 1 points, or all on a line
    or plane)."""
    pts = np.asarray(points, dtype=float)
    vals = np.asarray(values, dtype=float)
    tgt = np.asarray(target, dtype=float)
    if pts.ndim != 2 or len(pts) < pts.shape[1] + 1 or len(pts) != len(vals):
        return None
    if not (np.isfinite(pts).all() and np.isfinite(vals).all() and np.isfinite(tgt).all()):
        return None
    if np.linalg.matrix_rank(pts - pts[0]) < pts.shape[1]:
        return None
    found = barycentric(pts, tgt)
    if found is None:
        return None
    index, weights = found
    return float(weights @ vals[index])
