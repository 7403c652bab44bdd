"""parse/ptx.py: functions, directives, instructions with their .loc chains (inlined helpers
included) and hand-written asm, read from PTX text; one test reads what nvcc writes."""
import pytest

from klineage.gate.compile import compile_ptx
from klineage.parse.ptx import demangle, read_ptx, symbol_of, variable_name

PTX = r'''
.version 9.0
.target sm_90a
.address_size 64
.extern .shared .align 16 .b8 smem[];

.visible .entry _Z6reducePKfPf(
	.param .u64 _Z6reducePKfPf_param_0,
	.param .u64 _Z6reducePKfPf_param_1
)
.maxntid 256, 1, 1
.minnctapersm 2
{
	.reg .f32 	%f<8>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<4>;
	.shared .align 4 .b8 _ZZ6reducePKfPfE4tile[1024];
	.loc	1 10 0
	ld.param.u64 	%rd1, [_Z6reducePKfPf_param_0];
	.loc	1 12 5
	ld.global.nc.v4.f32 	{%f1, %f2, %f3, %f4}, [%rd1];
	.loc	1 4 9, function_name $L__info_string0, inlined_at 1 13 5
	mov.b32 	%r1, %f1;
	shfl.sync.bfly.b32 	%r2|%p1, %r1, 16, 31, -1;
	mov.b32 	%f5, %r2;
	add.f32 	%f6, %f1, %f5;
	.loc	1 14 5
	mov.u32 	%r3, _ZZ6reducePKfPfE4tile;
	st.shared.f32 	[%r3+4], %f6;
	bar.sync 	0;
	// begin inline asm
	ld.global.cs.f32 %f7, [%rd1];
	// end inline asm
	@%p1 bra 	$L__BB0_2;
$L__BB0_2:
	ret;
}
	.file	1 "/tmp/x/kernel.cu"
	.section	.debug_str
	{
$L__info_string0:
.b8 95,90,56,119,97,114,112,95,115,117,109,102,0
	}
'''


def test_functions_directives_and_arrays():
    mod = read_ptx(PTX)
    assert mod.target == "sm_90a" and mod.files == {1: "/tmp/x/kernel.cu"}
    assert mod.file_index("kernel.cu") == 1
    (fn,) = mod.functions
    assert fn.kind == "entry" and fn.base_name == "reduce"
    assert fn.directives == {"maxntid": "256, 1, 1", "minnctapersm": "2"}
    assert fn.shared == {"_ZZ6reducePKfPfE4tile": 1024} and mod.shared == {"smem": 0}
    assert fn.first_loc == (1, 10)
    assert mod.info_strings["$L__info_string0"] == "_Z8warp_sumf"


def test_instructions_operands_locations_and_asm():
    fn = read_ptx(PTX).functions[0]
    ops = [i.opcode for i in fn.instrs]
    assert ops[:3] == ["ld.param.u64", "ld.global.nc.v4.f32", "mov.b32"]
    ld = fn.instrs[1]
    assert ld.dests == ("%f1", "%f2", "%f3", "%f4") and ld.srcs == ("%rd1",)
    assert ld.space == "global" and ld.vector == 4 and ld.access_bytes == 16 and ld.has("nc")
    shfl = next(i for i in fn.instrs if i.op == "shfl")
    assert shfl.dests[0] == "%r2" and shfl.srcs[0] == "%r1"
    # inlined from the helper at line 4, called at line 13
    assert shfl.chain == ((1, 4), (1, 13)) and shfl.lines(1) == (4, 13)
    assert shfl.functions == ("$L__info_string0", "")
    st = next(i for i in fn.instrs if i.op == "st")
    assert st.dests == () and st.srcs == ("%r3", "%f6") and st.space == "shared"
    hand = [i for i in fn.instrs if i.asm]
    assert [i.opcode for i in hand] == ["ld.global.cs.f32"]
    bra = next(i for i in fn.instrs if i.op == "bra")
    assert bra.guard == "@%p1"
    assert [d.opcode for d in fn.defs["%f6"]] == ["add.f32"]
    assert {u.opcode for u in fn.uses["%f1"]} == {"mov.b32", "add.f32"}


def test_names():
    assert demangle("_Z8warp_sumf") == "warp_sum"
    assert demangle("_ZN3cfg4gemmILi4EEEvPf") == "gemm"
    assert demangle("row_sum_kernel") == "row_sum_kernel"
    assert variable_name("_ZZ6reducePKfPfE4tile") == "tile"
    assert symbol_of("[smem+16]") == "smem" and symbol_of("[%r3+4]") is None


@pytest.mark.nvcc
def test_what_nvcc_writes_maps_back_to_the_helper_and_its_call_site():
    src = ("__device__ __forceinline__ float warp_sum(float v) {\n"
           "    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
           "    return v;\n"
           "}\n"
           "__global__ void __launch_bounds__(128) k(const float* a, float* out) {\n"
           "    float v = warp_sum(a[threadIdx.x]);\n"
           "    if (threadIdx.x == 0) *out = v;\n"
           "}\n")
    res = compile_ptx(src)
    assert res.ok and res.resources and res.resources[0].registers > 0
    mod = read_ptx(res.ptx)
    kfile = mod.file_index("kernel.cu")
    (fn,) = [f for f in mod.functions if f.base_name == "k"]
    assert fn.directives["maxntid"].startswith("128")
    shuffles = [i for i in fn.instrs if i.op == "shfl"]
    assert len(shuffles) == 5
    assert all(i.lines(kfile)[:2] == (2, 6) for i in shuffles)  # the helper's line, then the call site
    assert {mod.info_strings[f] for i in shuffles for f in i.functions if f} >= {"_Z8warp_sumf"}
