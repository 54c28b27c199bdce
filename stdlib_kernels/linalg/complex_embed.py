"""complex64 linear algebra through the real embedding ``A = X + iY  ->  M = [[X, -Y], [Y, X]]`` (float32,
``2n x 2m``), on which the real factorisations run natively.

The embedding is an algebra homomorphism: ``M(A B) = M(A) M(B)``, so ``inv(M(A)) = M(inv(A))`` (the inverse is
read back from the left block column). The spectrum of ``M`` is that of ``A`` twice over for Hermitian ``A``
(``eigvalsh``), and ``M``'s singular values are ``A``'s, each twice (``svdvals``): the doubled values are
averaged pairwise. Eigen- and singular *vectors* of a doubled value mix inside its 2-D space; a value repeated
in ``A`` mixes several such spaces: eigenvectors then decline, singular vectors are rebuilt from the mixed ones
(:func:`_cluster_vectors`).

Example:
    >>> a = torch.tensor([[2 + 1j, 0], [0, 1j]], dtype=torch.complex64, device="trn")
    >>> torch.linalg.inv(a).cpu()
    tensor([[0.4000-0.2000j, 0.0000+0.0000j],
            [0.0000+0.0000j, 0.0000-1.0000j]])
"""

from __future__ import annotations

from typing import Any

import torch

from stdlib_kernels import _util as U

__all__ = ["is_complex64", "resolved", "embed", "inv_ex", "eigvalsh", "svdvals", "solve_triangular", "cholesky_solve"]


def is_complex64(*ts: Any) -> bool:
    """Every operand is a complex64 ``trn`` tensor without conj/neg bits."""
    return all(U.is_trn(t) and t.dtype == torch.complex64 and not (t.is_conj() or t.is_neg()) for t in ts)


def resolved(t: Any) -> Any:
    """A complex64 ``trn`` tensor with its lazy conjugate / negation bits materialised (native copies); anything
    else unchanged."""
    if U.is_trn(t) and t.dtype == torch.complex64 and (t.is_conj() or t.is_neg()):
        return t.resolve_conj().resolve_neg()
    return t


def embed(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``[[X, -Y], [Y, X]]`` of the real and imaginary parts ``[..., n, m]`` (a new float32 tensor)."""
    top = torch.cat((x, -y), -1)
    return torch.cat((top, torch.cat((y, x), -1)), -2)


def _parts(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    v = torch.view_as_real(a)
    return v[..., 0], v[..., 1]


def _pairs_mean(vals: torch.Tensor) -> torch.Tensor:
    """``[..., 2k]`` sorted values, each doubled, as ``[..., k]`` (the mean of each adjacent pair)."""
    return vals.reshape(*vals.shape[:-1], vals.shape[-1] // 2, 2).mean(-1)


def inv_ex(a: torch.Tensor, check_errors: bool) -> Any:
    """``linalg_inv_ex`` of a complex64 square matrix (batch): ``(inverse, info)``."""
    n = a.shape[-1]
    # only the left block column of inv(M) is read: M's LU solved against [I; 0] (half the solve of inv(M))
    lu, piv, info = torch.linalg.lu_factor_ex(embed(*_parts(a)))
    if check_errors:
        torch.ops.aten._linalg_check_errors(info, "torch.linalg.inv_ex", is_matrix=a.dim() == 2)
    left = torch.linalg.lu_solve(lu, piv, torch.eye(2 * n, n, device="trn").expand(*a.shape[:-2], 2 * n, n))
    inv = torch.view_as_complex(torch.stack((left[..., :n, :], left[..., n:, :]), -1).contiguous())
    return inv, info


def _hermitian_parts(a: torch.Tensor, lower: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(X, Y)`` of the Hermitian matrix that the ``UPLO`` triangle of ``a`` defines (the other triangle and the
    imaginary part of the diagonal are not read, as torch)."""
    x, y = _parts(a)
    tri = torch.tril if lower else torch.triu
    xs = tri(x, -1 if lower else 1)
    ys = tri(y, -1 if lower else 1)
    diag = torch.diag_embed(torch.diagonal(x, dim1=-2, dim2=-1))
    return xs + xs.mT + diag, ys - ys.mT


def eigvalsh(a: torch.Tensor, lower: bool) -> torch.Tensor:
    """Eigenvalues (ascending, float32) of the Hermitian complex64 matrix given by one triangle of ``a``."""
    vals = torch.linalg.eigvalsh(embed(*_hermitian_parts(a, lower)))
    return _pairs_mean(vals)


def svdvals(a: torch.Tensor) -> torch.Tensor:
    """Singular values (descending, float32) of a complex64 matrix (batch)."""
    return _pairs_mean(torch.linalg.svdvals(embed(*_parts(a))))


def _tri_solve_parts(tr: torch.Tensor, ti: torch.Tensor, br: torch.Tensor, bi: torch.Tensor, upper: bool,
                     unit: bool) -> torch.Tensor:
    """X (complex64) with ``T X = B``: ``T`` the ``upper``/lower triangle of ``tr + i ti`` (unit diagonal if
    ``unit``), by a real solve of the embedding (batch dims broadcast)."""
    tri = torch.triu if upper else torch.tril
    tr, ti = tri(tr), tri(ti)
    if unit:
        eye = torch.eye(tr.shape[-1], dtype=torch.bool, device="trn")
        tr, ti = torch.where(eye, 1.0, tr), torch.where(eye, 0.0, ti)
    n = tr.shape[-1]
    x = torch.linalg.solve(embed(tr, ti), torch.cat((br, bi), -2))
    return torch.complex(x[..., :n, :].contiguous(), x[..., n:, :].contiguous())


def solve_triangular(a: torch.Tensor, b: torch.Tensor, upper: bool, left: bool, unit: bool) -> torch.Tensor:
    """``linalg.solve_triangular`` of complex64 operands (``left=False``: ``X A = B`` as ``A^T X^T = B^T``)."""
    if a.numel() == 0 or b.numel() == 0:
        shape = (*torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]), *b.shape[-2:])
        return torch.empty(shape, dtype=torch.complex64, device="trn")
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    if left:
        return _tri_solve_parts(ar, ai, br, bi, upper, unit)
    return _tri_solve_parts(ar.mT, ai.mT, br.mT, bi.mT, not upper, unit).mT


def cholesky_solve(b: torch.Tensor, factor: torch.Tensor, upper: bool) -> torch.Tensor:
    """``A^-1 B`` for ``A = L L^H`` (``factor`` = L) or ``U^H U`` (``upper``): two triangular solves."""
    if factor.numel() == 0 or b.numel() == 0:
        return solve_triangular(factor, b, upper, True, False)  # the empty result's shape
    (fr, fi), (br, bi) = _parts(factor), _parts(b)
    hr, hi = fr.mT, -fi.mT  # the conjugate transpose's planes
    if upper:  # U^H y = b, then U x = y
        y = _tri_solve_parts(hr, hi, br, bi, False, False)
        yr, yi = _parts(y)
        return _tri_solve_parts(fr, fi, yr, yi, True, False)
    y = _tri_solve_parts(fr, fi, br, bi, False, False)  # L y = b, then L^H x = y
    yr, yi = _parts(y)
    return _tri_solve_parts(hr, hi, yr, yi, True, False)


#: Largest side the column-by-column complex LU takes (a host loop of native steps per column; n = 128, batch 2:
#: ~1 s warm).
LU_MAX = 256
#: Largest side the column-by-column complex Cholesky takes (n = 100, batch 5: 0.3 s warm, 4 s with cold caches).
CHOL_MAX = 128


def _swap_rows(a: torch.Tensor, j: int, p: torch.Tensor) -> None:
    """Swap row ``j`` of each ``a[b]`` with its row ``p[b]`` in place."""
    rows_b = torch.arange(a.shape[0], device="trn")
    rj, rp = a[:, j, :].clone(), a[rows_b, p, :]
    a[:, j, :] = rp
    a[rows_b, p, :] = rj


def lu_factor(a3: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Partial-pivoting LU of complex64 ``[B, m, n]`` in LAPACK's layout: ``(LU, pivots (1-based int32 [B, k]),
    info (int32 [B]))``. One native step per column: the pivot by LAPACK's ``|Re| + |Im|`` (first of equals),
    a row swap, the column scaled by the pivot, a rank-1 update of the trailing block; a zero pivot leaves its
    column unscaled and sets ``info`` (the first such column, 1-based), as ``getrf``. Every step works on whole
    rows, columns and the whole matrix under masks (the step's column picked from precomputed mask tables), so all
    steps share one set of compiled kernels instead of one per trailing-block shape."""
    a = a3.clone()
    b, m, n = a.shape
    k = min(m, n)
    piv = torch.zeros((b, k), dtype=torch.int32, device="trn")
    info = torch.zeros((b,), dtype=torch.int32, device="trn")
    steps = torch.arange(1, k + 1, dtype=torch.int32, device="trn")
    rk = torch.arange(k, device="trn").unsqueeze(0)
    below = torch.arange(m, device="trn").unsqueeze(1) > rk  # [m, k]: row i below step j's pivot row
    search = torch.arange(m, device="trn").unsqueeze(1) >= rk  # [m, k]: rows step j searches
    right = torch.arange(n, device="trn").unsqueeze(1) > rk  # [n, k]: columns step j updates
    for j in range(k):
        cr, ci = _parts(a[:, :, j])
        p = torch.where(search[:, j], cr.abs() + ci.abs(), -1.0).argmax(-1)  # [B]
        piv[:, j] = p.to(torch.int32) + 1
        _swap_rows(a, j, p)
        d = a[:, j, j]
        dr, di = _parts(d)
        zero = (dr == 0) & (di == 0)
        info = torch.where((info == 0) & zero, steps[j], info)
        col = a[:, :, j]
        scaled = torch.where(below[:, j] & ~zero.unsqueeze(-1), col / torch.where(zero, 1.0, d).unsqueeze(-1), col)
        a[:, :, j] = scaled
        lcol = torch.where(below[:, j], scaled, 0.0)
        urow = torch.where(right[:, j], a[:, j, :], 0.0)
        a -= lcol.unsqueeze(-1) * urow.unsqueeze(-2)
    return a, piv, info


def lu_solve(lu3: torch.Tensor, piv2: torch.Tensor, b3: torch.Tensor) -> torch.Tensor:
    """``A X = B`` from ``A``'s LU (``[B, n, n]``, pivots ``[B, n]``) for ``b3 [B, n, k]``: the rows swapped in
    pivot order, then unit-lower and upper solves (each by the real embedding)."""
    x = b3.clone()
    pv = piv2.to(torch.int64) - 1
    for j in range(lu3.shape[-1]):
        _swap_rows(x, j, pv[:, j])
    lr, li = _parts(lu3)
    xr, xi = _parts(x)
    y = _tri_solve_parts(lr, li, xr, xi, False, True)
    yr, yi = _parts(y)
    return _tri_solve_parts(lr, li, yr, yi, True, False)


def lu_solve_adjoint(lu3: torch.Tensor, piv2: torch.Tensor, b3: torch.Tensor) -> torch.Tensor:
    """``A^H X = B`` from ``A = P L U`` (as :func:`lu_solve`): ``U^H Y = B`` (lower), ``L^H Z = Y`` (unit upper),
    then the row swaps undone in reverse order."""
    lr, li = _parts(lu3)
    hr, hi = lr.mT, -li.mT  # LU^H: U^H below and on the diagonal, L^H above it
    br, bi = _parts(b3)
    y = _tri_solve_parts(hr, hi, br, bi, False, False)
    yr, yi = _parts(y)
    x = _tri_solve_parts(hr, hi, yr, yi, True, True)
    pv = piv2.to(torch.int64) - 1
    for j in reversed(range(lu3.shape[-1])):
        _swap_rows(x, j, pv[:, j])
    return x


def cholesky_lower(a3: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(L, info)`` with ``A = L L^H`` for the Hermitian complex64 ``[B, n, n]`` given by its lower triangle:
    column by column on float32 planes (``d = Re a_jj - sum |l_jk|^2``, ``l_ij = (a_ij - sum l_ik conj(l_jk)) /
    sqrt(d)``); ``info`` is the first column (1-based) whose ``d`` is not positive, as ``potrf``."""
    ar, ai = _parts(a3)
    b, n, _ = a3.shape
    lr = torch.zeros((b, n, n), device="trn")
    li = torch.zeros((b, n, n), device="trn")
    info = torch.zeros((b,), dtype=torch.int32, device="trn")
    for j in range(n):
        cr, ci = lr[:, j, :j], li[:, j, :j]
        d = ar[:, j, j] - (cr * cr + ci * ci).sum(-1)
        info = torch.where((info == 0) & ~(d > 0), j + 1, info)
        s = torch.sqrt(d)
        lr[:, j, j] = s
        if j + 1 < n:
            pr, pi = lr[:, j + 1:, :j], li[:, j + 1:, :j]
            re = ar[:, j + 1:, j] - (pr * cr[:, None, :] + pi * ci[:, None, :]).sum(-1)
            im = ai[:, j + 1:, j] - (pi * cr[:, None, :] - pr * ci[:, None, :]).sum(-1)
            lr[:, j + 1:, j] = re / s[:, None]
            li[:, j + 1:, j] = im / s[:, None]
    return torch.complex(lr, li), info


def cholesky(a3: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(L or U, info)`` of complex64 ``[B, n, n]`` (``upper``: the upper triangle read, ``A = U^H U``)."""
    if not upper:
        return cholesky_lower(a3)
    low, info = cholesky_lower(_adjoint(a3))
    return _adjoint(low), info


def _distinct_pairs(vals: torch.Tensor, rel: float = 1e-4) -> bool:
    """The doubled values (sorted, in pairs) have pairs far enough apart that each 2-D space holds one complex
    vector (up to phase); a repeated value of ``A`` mixes several (its vectors are declined)."""
    k = vals.shape[-1] // 2
    if k < 2:
        return True
    p = vals.reshape(*vals.shape[:-1], k, 2).mean(-1)
    gaps = (p[..., 1:] - p[..., :-1]).abs().amin()
    return bool(gaps > rel * (p.abs().amax() + 1e-30))


def _columns(v: torch.Tensor, rows: int) -> torch.Tensor:
    """Every other column of the embedding's ``[..., 2 rows, 2k]`` vectors as complex ``[..., rows, k]``."""
    w = v[..., 0::2]
    return torch.complex(w[..., :rows, :].contiguous(), w[..., rows:, :].contiguous())


def eigh(a: torch.Tensor, lower: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Eigenvalues and unit eigenvectors (phases as the embedding gives them) of the Hermitian complex64 matrix
    given by one triangle of ``a``; None when an eigenvalue repeats (see :func:`_distinct_pairs`)."""
    n = a.shape[-1]
    vals, vecs = torch.linalg.eigh(embed(*_hermitian_parts(a, lower)))
    if not _distinct_pairs(vals):
        return None
    return _pairs_mean(vals), _columns(vecs, n)


def svd(a: torch.Tensor, full: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reduced SVD ``(U, S, Vh)`` of complex64 ``[..., m, n]`` from the embedding's (``A v = s u`` column by
    column, as the embedding's own pairs; repeated or clustered values by :func:`_cluster_vectors`)."""
    m, n = a.shape[-2], a.shape[-1]
    u2, s2, vh2 = torch.linalg.svd(embed(*_parts(a)), full_matrices=False)
    u, vh = _columns(u2, m), _adjoint(_columns(vh2.mT, n))
    if not _distinct_pairs(s2):
        u, vh = _cluster_vectors(a, u2, s2, vh2, u, vh)
    u, svals, vh = _consistent(a, u, _pairs_mean(s2), vh)
    if full:  # the square unitary factors: the reduced ones completed
        u = complete_basis(u) if m > u.shape[-1] else u
        vh = _adjoint(complete_basis(_adjoint(vh))) if n > vh.shape[-2] else vh
    return u, svals, vh


def _clusters(vals: list[float], rel: float = 1e-4) -> list[tuple[int, int]]:
    """``(start, size)`` of the runs of the descending ``vals`` whose neighbours are within ``rel`` of the largest."""
    tol = rel * (max((abs(v) for v in vals), default=0.0) + 1e-30)
    runs: list[tuple[int, int]] = []
    for i, v in enumerate(vals):
        if runs and abs(vals[i - 1] - v) <= tol:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def _pivoted_basis(c: torch.Tensor, r: int, out: torch.Tensor, start: int) -> None:
    """An orthonormal basis of the span of the columns of ``c`` ``[m, w]`` (``r`` complex dimensions: the
    embedding's vectors come in pairs ``w``, ``J w`` that map to ``c``, ``i c``; the columns of other clusters are
    zero), written to ``out[:, start:start + r]`` one column at a time: Gram-Schmidt that takes the column with the
    largest remainder each time. Every step has the same shapes whatever ``r`` (one set of compiled kernels)."""
    res = c
    for t in range(r):
        nrm = torch.linalg.vector_norm(res, dim=0)
        j = int(nrm.argmax().item())  # host control: which column
        q = torch.view_as_complex(torch.view_as_real(res[:, j:j + 1]) / nrm[j])  # real planes: no complex division
        out[:, start + t] = q[:, 0]
        res = res - q @ (_adjoint(q) @ res)


def _split_cluster(a2: torch.Tensor, u: torch.Tensor, vh: torch.Tensor, start: int, r: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``u`` ``[m, k]`` whose columns ``start:start + r`` are a basis of a cluster's left singular space, rotated to
    the singular vectors inside it: the eigenvectors of ``B B^H - mu I`` on the cluster (``B = U^H A``, ``mu``
    the mean eigenvalue), whose eigenvalues are the cluster's spread, well apart relative to their size. Shapes
    stay ``[k, k]``: the other indices get distinct diagonal values above the cluster's, so their eigenvectors are
    unit vectors (up to phase) that a permutation puts back in place; ``vh`` rows follow. Unchanged if the
    cluster's values repeat again."""
    k = u.shape[-1]
    inside = torch.zeros(k, dtype=torch.bool)
    inside[start:start + r] = True
    order = [*range(start, start + r), *(i for i in range(k) if not start <= i < start + r)]
    back = torch.zeros((k, k), dtype=torch.complex64)
    back[torch.arange(k), torch.tensor(order)] = 1.0  # eigh's column t (ascending) -> position order[t]
    inside, back = inside.to("trn"), back.to("trn")
    b = _adjoint(u) @ a2
    h = b @ _adjoint(b)
    hr = torch.view_as_real(torch.diagonal(h))[..., 0]
    mu = torch.where(inside, hr, 0.0).sum() / r
    block = torch.where(inside.unsqueeze(0) & inside.unsqueeze(1), h, 0.0)
    c = torch.linalg.vector_norm(block) + 1e-30
    pad = torch.where(inside, -mu, (2.0 + torch.arange(k, device="trn")) * c)
    e = eigh(block + torch.diag_embed(pad.to(h.dtype)), True)
    if e is None:
        return u, vh
    w = e[1] @ back
    return u @ w, _adjoint(w) @ vh


def _cluster_vectors(a: torch.Tensor, u2: torch.Tensor, s2: torch.Tensor, vh2: torch.Tensor, u: torch.Tensor,
                     vh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``U``/``V^H`` of repeated or clustered singular values: a value repeated ``r`` times in ``A`` gives ``2r``
    mixed real vectors in the embedding, whose complex images span the ``r``-dimensional singular space; an
    orthonormal basis of it (:func:`_pivoted_basis`), split by :func:`_split_cluster` unless the values are
    equal to ``1e-6``. A host loop over the matrices and their clusters."""
    m, n, k = a.shape[-2], a.shape[-1], u.shape[-1]
    a3, u3, vh3 = a.reshape(-1, m, n), u.reshape(-1, m, k).clone(), vh.reshape(-1, k, n).clone()
    uu, vv = u2.reshape(-1, 2 * m, 2 * k), vh2.mT.reshape(-1, 2 * n, 2 * k)
    pairs = _pairs_mean(s2).reshape(-1, k).cpu().tolist()  # host control: the cluster structure
    for bi, vals in enumerate(pairs):
        cu = torch.complex(uu[bi, :m].contiguous(), uu[bi, m:].contiguous())  # [m, 2k]
        cv = torch.complex(vv[bi, :n].contiguous(), vv[bi, n:].contiguous())
        ub, vt = u3[bi], _adjoint(vh3[bi])
        for start, r in _clusters(vals):
            if r < 2:
                continue
            cols = torch.zeros(2 * k, dtype=torch.bool)
            cols[2 * start:2 * (start + r)] = True
            cols = cols.to("trn")
            _pivoted_basis(torch.where(cols, cu, 0.0), r, ub, start)
            _pivoted_basis(torch.where(cols, cv, 0.0), r, vt, start)  # V kept only for tiny values
            if vals[start] - vals[start + r - 1] > 1e-6 * vals[0]:
                ub, vhb = _split_cluster(a3[bi], ub, _adjoint(vt), start, r)
                vt = _adjoint(vhb)
        u3[bi], vh3[bi] = ub, _adjoint(vt)
    return u3.reshape(u.shape), vh3.reshape(vh.shape)


def _adjoint(x: torch.Tensor) -> torch.Tensor:
    xr, xi = _parts(x)
    return torch.complex(xr.mT.contiguous(), (-xi.mT).contiguous())


def _unitary(q: torch.Tensor, steps: int = 3) -> torch.Tensor:
    """The nearest matrix with orthonormal columns to ``q`` (columns already nearly so): Newton-Schulz steps
    ``q (3I - q^H q) / 2``, each squaring the departure from orthonormality (1e-4 -> 1e-8 -> round-off)."""
    eye = torch.eye(q.shape[-1], dtype=q.dtype, device="trn")
    for _ in range(steps):
        q = q @ (eye * 1.5 - (q.mH @ q) * 0.5)
    return q


def _consistent(a: torch.Tensor, u: torch.Tensor, s: torch.Tensor, vh: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An SVD whose factors agree with each other and with ``a`` to round-off. Close singular values of ``A`` (a
    relative gap near 1e-3) make the embedding's vectors of neighbouring pairs mix at ``eps / gap``, so ``U`` read
    off it is unitary to 1e-4 only and ``U S V^H`` misses ``A`` by as much (LAPACK's factors stay consistent). ``U``
    is made unitary, then ``S V^H = U^H A`` read back row by row (norm, direction); rows of a zero singular value
    keep the embedding's direction; ``V`` is made unitary and the values sorted descending again."""
    u = _unitary(u)
    b = u.mH @ a
    sv = torch.linalg.vector_norm(b, dim=-1)
    tiny = sv <= sv.amax(-1, keepdim=True) * 1e-6
    rows = torch.where(tiny.unsqueeze(-1), vh, b / torch.where(tiny, 1.0, sv).unsqueeze(-1).to(b.dtype))
    vh = _adjoint(_unitary(_adjoint(rows)))
    sv = torch.where(tiny, s, sv)
    order = torch.sort(sv, dim=-1, descending=True, stable=True).indices
    # gathers with the index expanded to the result (take_along_dim broadcasts a complex gather per column)
    return (torch.gather(u, -1, order.unsqueeze(-2).expand(u.shape)), torch.gather(sv, -1, order),
            torch.gather(vh, -2, order.unsqueeze(-1).expand(vh.shape)))


def complete_basis(q: torch.Tensor) -> torch.Tensor:
    """``[..., m, k]`` orthonormal complex columns extended to an ``[..., m, m]`` unitary matrix: the unit vectors
    ``e_j`` in turn, projected off the columns so far (twice, for orthogonality to round-off) and kept when at
    least half of them remains (a host loop of native steps: small ``m`` only)."""
    m = q.shape[-2]
    basis = q
    for j in range(m):
        if basis.shape[-1] == m:
            break
        e = torch.zeros((*q.shape[:-2], m, 1), dtype=torch.complex64, device="trn")
        e[..., j, 0] = 1.0
        for _ in range(2):
            e = e - basis @ (basis.mH @ e)
        norm = torch.linalg.vector_norm(e, dim=(-2, -1), keepdim=True)
        if bool((norm < 0.5).any()):
            continue
        basis = torch.cat((basis, e / norm), -1)
    return basis
