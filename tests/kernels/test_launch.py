"""`safemon.kernels.launch`: the argument block handed to cuLaunchKernel (no GPU needed: the
block is host memory, read here the way the driver reads it)."""

from __future__ import annotations

import ctypes
import threading

from safemon.kernels.launch import ArgBlock, arg_block


def _param(block: ArgBlock, i: int, size: int) -> int:
    """Parameter i as the driver copies it: `size` bytes from kernelParams[i]."""
    pointer = ctypes.c_void_p.from_address(block.address + 8 * i).value
    assert pointer is not None
    return int.from_bytes(ctypes.string_at(pointer, size), "little")


def test_each_param_pointer_addresses_its_own_slot() -> None:
    block = ArgBlock(8)
    values = [0x7F00_1234_5600, 0x7F00_0000_0100, 3, 0, 4096, 11008, 1, 0xFFFF_FFFF_FFFF_FFFF]
    for i, v in enumerate(values):
        block.values[i] = v
    assert [_param(block, i, 8) for i in range(8)] == values


def test_a_four_byte_parameter_is_read_from_the_slots_low_half() -> None:
    block = ArgBlock(3)
    block.values[0], block.values[1], block.values[2] = 4096, 2**31 - 1, 2**32 + 7
    assert [_param(block, i, 4) for i in range(3)] == [4096, 2**31 - 1, 7]


def test_blocks_are_reused_per_thread_and_per_size() -> None:
    mine = arg_block(8)
    assert arg_block(8) is mine and arg_block(4) is not mine
    theirs: list[ArgBlock] = []
    t = threading.Thread(target=lambda: theirs.append(arg_block(8)))
    t.start()
    t.join()
    assert theirs[0] is not mine
