"""VALID, strided 2-D convolutions whose gradients stay fast inside XLA:CPU loops.

Two formulations of the same convolution (``lax.conv_general_dilated`` with
``padding="VALID"``, ``NHWC x HWIO -> NHWC``), selected by :class:`Conv`'s ``method``:

``"matmul"`` (:func:`conv2d_matmul`, the default)
    No convolution op at all. A stride-``s`` conv whose kernel sides are multiples of
    ``s`` is first rewritten as a stride-1 conv with a ``(kh/s) x (kw/s)`` kernel on a
    space-to-depth input (``[N, H/s, W/s, s*s*C]``, the kernel reordered to match); that
    small stride-1 conv is then one matmul of the ``(kh/s)*(kw/s)`` shifted slices of the
    input, concatenated along the channels (im2col), with the flattened kernel. Plain JAX
    autodiff differentiates it: the gradients of slices, concatenation, reshapes and a dot
    are pads, slices, transposes and dots, so a gradient step has no convolution op and
    its heavy work is matmuls, which XLA:CPU spreads over all cores (its convolution
    kernels ran single-threaded; ``python -m benchmarks.conv`` times the two, figures in
    docs/benchmarks.md). When a kernel side is not a multiple of the stride it falls back
    to :func:`conv2d`.

``"xla"`` (:func:`conv2d`)
    XLA's convolution with a hand-written VJP. XLA:CPU runs a convolution through its
    fast (Eigen) kernel only in the canonical form ``NHWC x HWIO -> NHWC``. JAX's
    autodiff writes the gradients of a strided conv as convolutions with other dimension
    orders (the kernel gradient contracts over the batch: ``f01b_i01o->01bf``); a
    standalone jit rewrites them to the canonical form, but inside a rolled ``lax.scan`` /
    ``while`` body that rewrite does not happen and they fall back to a naive loop nest,
    an order of magnitude slower (docs/benchmarks.md). :func:`conv2d` writes its two
    gradient convolutions in the canonical form themselves (explicit transposes of the
    small operands), so a conv learner runs at full speed in a rolled loop and needs no
    unrolling.

Both give the values and gradients of ``lax.conv_general_dilated``: :func:`conv2d`
the same products and sums, :func:`conv2d_matmul` the same products summed in another
order (equal up to float32 rounding).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from rljax.networks.initializers import LECUN_NORMAL
from rljax.types import Array

_DN = ("NHWC", "HWIO", "NHWC")


def _conv(x: Array, kernel: Array, stride: int) -> Array:
    return jax.lax.conv_general_dilated(x, kernel, (stride, stride), "VALID",
                                        dimension_numbers=_DN)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def conv2d(x: Array, kernel: Array, stride: int) -> Array:
    """VALID convolution ``x [N, H, W, C] * kernel [kh, kw, C, O] -> [N, OH, OW, O]``.

    ``OH = (H - kh) // stride + 1`` (likewise ``OW``), as ``lax.conv_general_dilated``
    with ``padding="VALID"``; differentiable in ``x`` and ``kernel``.
    """
    return _conv(x, kernel, stride)


def _conv2d_fwd(x: Array, kernel: Array, stride: int):
    return _conv(x, kernel, stride), (x, kernel)


def _conv2d_bwd(stride: int, residuals, dy: Array):
    x, kernel = residuals
    kh, kw = kernel.shape[:2]
    h, w = x.shape[1:3]
    oh, ow = dy.shape[1:3]
    # Kernel gradient dk[i, j, c, o] = sum_{n, p, q} x[n, p s + i, q s + j, c] dy[n, p, q, o]:
    # a stride-1 conv of x^T [C, H, W, N] with dy^T [OH, OW, N, O] dilated by s, whose
    # spatial output is [H - (OH - 1) s, ...] >= [kh, kw]; keep the first kh x kw.
    dk = jax.lax.conv_general_dilated(
        jnp.transpose(x, (3, 1, 2, 0)), jnp.transpose(dy, (1, 2, 0, 3)).astype(x.dtype),
        (1, 1), "VALID", rhs_dilation=(stride, stride), dimension_numbers=_DN)
    dk = jnp.transpose(dk[:, :kh, :kw, :], (1, 2, 0, 3)).astype(kernel.dtype)
    # Input gradient: dy dilated by s, padded by k - 1 below and up to H above, correlated
    # with the spatially flipped kernel with in/out swapped (XLA drops it when x is data).
    flipped = jnp.transpose(jnp.flip(kernel, (0, 1)), (0, 1, 3, 2))
    pad_h = (kh - 1, h - (oh - 1) * stride - 1)
    pad_w = (kw - 1, w - (ow - 1) * stride - 1)
    dx = jax.lax.conv_general_dilated(dy.astype(kernel.dtype), flipped, (1, 1), (pad_h, pad_w),
                                      lhs_dilation=(stride, stride), dimension_numbers=_DN)
    return dx.astype(x.dtype), dk


conv2d.defvjp(_conv2d_fwd, _conv2d_bwd)


def _space_to_depth(x: Array, kernel: Array, stride: int) -> tuple[Array, Array]:
    """The stride-``s`` VALID conv of ``x`` and ``kernel`` (sides multiples of ``s``) as a
    stride-1 conv: ``x`` cropped to the rows/columns the outputs use and reshaped to
    ``[N, R/s, Q/s, s*s*C]``, ``kernel`` to ``[kh/s, kw/s, s*s*C, O]``, channel index
    ``(i*s + j)*C + c`` for the offset ``(i, j)`` inside an ``s x s`` block in both."""
    s = stride
    n, h, w, c = x.shape
    kh, kw, _, o = kernel.shape
    rows = (h - kh) // s * s + kh  # (OH - 1) s + kh: a multiple of s
    cols = (w - kw) // s * s + kw
    x = x[:, :rows, :cols, :].reshape(n, rows // s, s, cols // s, s, c)
    x = jnp.transpose(x, (0, 1, 3, 2, 4, 5)).reshape(n, rows // s, cols // s, s * s * c)
    kernel = kernel.reshape(kh // s, s, kw // s, s, c, o)
    kernel = jnp.transpose(kernel, (0, 2, 1, 3, 4, 5)).reshape(kh // s, kw // s, s * s * c, o)
    return x, kernel


def _conv_stride1_matmul(x: Array, kernel: Array) -> Array:
    """Stride-1 VALID conv as one matmul: the ``a*b`` shifted ``[N, OH, OW, C]`` slices of
    ``x`` side by side (channel index ``(i*b + j)*C + c``) times ``kernel [a*b*C, O]``."""
    n, h, w, c = x.shape
    a, b, _, o = kernel.shape
    oh, ow = h - a + 1, w - b + 1
    slices = [x[:, i:i + oh, j:j + ow, :] for i in range(a) for j in range(b)]
    patches = slices[0] if len(slices) == 1 else jnp.concatenate(slices, axis=-1)
    out = jnp.dot(patches.reshape(n * oh * ow, a * b * c), kernel.reshape(a * b * c, o))
    return out.reshape(n, oh, ow, o)


def conv2d_matmul(x: Array, kernel: Array, stride: int) -> Array:
    """:func:`conv2d` computed with slices, reshapes and one matmul (no convolution op).

    Space-to-depth turns the stride-``s`` conv into a stride-1 conv with a
    ``(kh/s) x (kw/s)`` kernel, computed as ``patches @ kernel`` (im2col); JAX's own
    autodiff gives its gradients, which are matmuls too. Falls back to :func:`conv2d`
    when ``kh`` or ``kw`` is not a multiple of ``stride``.
    """
    kh, kw = kernel.shape[:2]
    if x.shape[1] < kh or x.shape[2] < kw:
        raise ValueError(f"kernel {kernel.shape[:2]} larger than the input {x.shape[1:3]}")
    if kh % stride or kw % stride:
        return conv2d(x, kernel, stride)
    if stride > 1:
        x, kernel = _space_to_depth(x, kernel, stride)
    return _conv_stride1_matmul(x, kernel)


METHODS = ("matmul", "xla")


class Conv(nn.Module):
    """``nn.Conv`` (VALID padding, square stride) computed by :func:`conv2d_matmul`
    (``method="matmul"``) or :func:`conv2d` (``method="xla"``).

    Same parameters as ``nn.Conv``, whichever the method: ``kernel [kh, kw, C, features]``
    and ``bias [features]``, so it is a drop-in replacement for existing parameter trees.
    """

    features: int
    kernel_size: tuple[int, int]
    stride: int = 1
    kernel_init: nn.initializers.Initializer = LECUN_NORMAL
    bias_init: nn.initializers.Initializer = nn.initializers.zeros_init()
    method: str = "matmul"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        kernel = self.param("kernel", self.kernel_init,
                            tuple(self.kernel_size) + (x.shape[-1], self.features), jnp.float32)
        bias = self.param("bias", self.bias_init, (self.features,), jnp.float32)
        if self.method == "matmul":
            y = conv2d_matmul(x, kernel, self.stride)
        elif self.method == "xla":
            y = conv2d(x, kernel, self.stride)
        else:
            raise ValueError(f"unknown conv method {self.method!r}; expected one of {METHODS}")
        return y + bias
