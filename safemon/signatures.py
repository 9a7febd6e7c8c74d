"""Public home of the checksum algebra: `safemon.signatures.checksum(words, kind)`.

The implementation lives in `safemon.kernels.signatures`, beside the kernels that must agree
with it bit for bit.
"""

from safemon.kernels.signatures import CHECKSUM_KINDS, checksum, crc32c_table

__all__ = ["CHECKSUM_KINDS", "checksum", "crc32c_table"]
