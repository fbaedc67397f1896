"""The torch profile's bfloat16 matmul scratch (memplan_cli/ops/matmul.py bf16_mm_scratch): oneDNN's
brgemm matmul scratchpad, torch-free. Every expected figure was measured with torch 2.14.1 on one
thread of an AMX CPU: `python devtools/torch_matmul_sweep.py --one M,K,N,a,b`."""
import pytest

from memplan_cli.ir.graph import Operand
from memplan_cli.ops import matmul


@pytest.mark.parametrize("m, k, n, ta, scratch", [
    (512, 64, 256, False, 37888),  # the encoder's FFN: the input's gradient gy @ W
    (64, 512, 256, True, 140416),  # its weight's gradient gy^T @ x (LDA 512 padded to 544)
    (64, 256, 256, True, 70784),
    (2048, 1024, 512, False, 1053696),
    (128, 1024, 128, True, 406656),
    (4096, 128, 2048, False, 529408),
])
def test_whole_b_chunk_and_transposed_a(m, k, n, ta, scratch):
    assert matmul.bf16_mm_scratch(m, k, n, ta) == scratch


@pytest.mark.parametrize("m, k, n, ta, tb", [(4096, 2048, 512, False, False), (128, 128, 512, False, False),
                                            (512, 2048, 128, True, False), (64, 64, 256, False, True)])
def test_chunked_shapes_count_nothing(m, k, n, ta, tb):
    # measured 9,442,432 / 13,312 / 808,192 / 9,216 B: oneDNN's chunking search, not reproduced
    assert matmul.bf16_mm_scratch(m, k, n, ta, tb) == 0


def test_a_frozen_linears_input_gradient():
    # lora_encoder's frozen FFN (M 128, 256 -> 64): gy @ W takes 37,888 B (measured in its step)
    assert matmul.bf16_mm_scratch(128, 64, 256, False) == 37888


def _linear(dtype, b=4, s=16, k=64, n=64):
    class Op:
        inputs, outputs = [0, 1, 2], [3]
    opd = [Operand(0, "x", (b, s, k), dtype), Operand(1, "w", (k, n), dtype, is_const=True),
           Operand(2, "b", (n,), dtype, is_const=True), Operand(3, "y", (b, s, n), dtype)]
    return Op(), opd


def test_a_linear_step_in_bfloat16():
    # `F.linear` on (4, 16, 64) x (64, 64) in bfloat16, measured: forward 13,312 B beside the output; backward
    # the input's gradient (8,192 B) beside 13,312 B, then the weight's (8,192 B) beside 21,632 B
    op, opd = _linear("bfloat16")
    assert matmul.linear_bf16_fwd(op, opd) == ((13312,),)
    alts = matmul.linear_bf16_bwd(op, opd, [True, True, True])
    assert 8192 + 8192 + 128 + max(sum(a) for a in alts) == 8192 + 8192 + 21632


def test_float32_linears_count_no_matmul_scratch():
    op, opd = _linear("float32")
    assert matmul.linear_bf16_fwd(op, opd) == () and matmul.linear_bf16_bwd(op, opd, [True, True, True]) == ()
