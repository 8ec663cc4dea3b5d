"""Odd-size inverse-shift fix for neuraloperator 2.0.0's SpectralConv.

neuraloperator 2.0.0 ``SpectralConv.forward`` (neuralop/layers/spectral_convolution.py)
does, for ``order > 1``::

    x = torch.fft.fftshift(x, dim=dims_to_fft_shift)          # centre the spectrum
    ...                                                         # keep/contract modes
    out_fft = torch.fft.fftshift(out_fft, dim=fft_dims[:-1])   # <- should be ifftshift

``fftshift`` rolls by ``n // 2``, its inverse ``ifftshift`` by ``-(n // 2)``.  For even
``n`` they are identical; for odd ``n`` applying ``fftshift`` twice leaves the spectrum
rolled by ``n - 1`` (== -1), i.e. every output mode lands one bin off.  neuraloperator's
main branch fixed this by using ``ifftshift`` for the inverse; the C++ port implements
the corrected version.

This module patches ``SpectralConv.forward`` so that, within one forward call, the
FIRST ``torch.fft.fftshift`` call stays ``fftshift`` and the SECOND becomes
``torch.fft.ifftshift``.  It is a no-op for even sizes, and for 1-D models (which
never shift).  Shared by tests/golden/make_golden.py and
tests/python/check_cpp_checkpoint.py.

Usage::

    import neuralop_fix
    neuralop_fix.install()        # idempotent; or:
    with neuralop_fix.fixed():    # installed only inside the block
        y = model(x)
"""

import contextlib
import functools

import torch
from neuralop.layers.spectral_convolution import SpectralConv

_ORIGINAL_FORWARD = SpectralConv.forward


def _fixed_forward(self, *args, **kwargs):
    original_fftshift = torch.fft.fftshift
    calls = [0]

    @functools.wraps(original_fftshift)
    def counting_shift(input, dim=None):
        calls[0] += 1
        if calls[0] == 1:
            return original_fftshift(input, dim=dim)
        if calls[0] == 2:
            return torch.fft.ifftshift(input, dim=dim)
        raise RuntimeError(
            "neuralop_fix: SpectralConv.forward called torch.fft.fftshift more than "
            "twice; the patch does not match this neuraloperator version"
        )

    torch.fft.fftshift = counting_shift
    try:
        out = _ORIGINAL_FORWARD(self, *args, **kwargs)
    finally:
        torch.fft.fftshift = original_fftshift
    # 1-D (order == 1): no shift at all; N-D: exactly forward + inverse shift.
    if calls[0] not in (0, 2):
        raise RuntimeError(
            f"neuralop_fix: expected 0 or 2 fftshift calls per SpectralConv.forward, "
            f"got {calls[0]}"
        )
    return out


_fixed_forward.__doc__ = _ORIGINAL_FORWARD.__doc__


def install():
    """Patch SpectralConv.forward (idempotent)."""
    SpectralConv.forward = _fixed_forward


def uninstall():
    """Restore neuraloperator 2.0.0's original SpectralConv.forward."""
    SpectralConv.forward = _ORIGINAL_FORWARD


def is_installed():
    return SpectralConv.forward is _fixed_forward


@contextlib.contextmanager
def fixed(enabled=True):
    """Context manager: the fix is active inside the block (or explicitly
    inactive with enabled=False); the previous state is restored afterwards."""
    was = SpectralConv.forward
    SpectralConv.forward = _fixed_forward if enabled else _ORIGINAL_FORWARD
    try:
        yield
    finally:
        SpectralConv.forward = was
