"""restrict in the declarator styles authors write: every spelling is detected, removed without
touching anything else, and put back byte for byte by the forward rewrite (never `__restrict__p`);
where the recorded text is gone, the forward rewrite says it is not exact. Each rewritten kernel
is also built with nvcc."""
import re

import pytest

from klineage.mechanisms.base import Applied, Kernel
from klineage.mechanisms.families.restrict import Restrict
from mechtest import assert_compiles, dedent

R = Restrict()

# (parameter list as written, the parameter list once the qualifiers are gone)
STYLES = [
    ("const float *__restrict__ x, float *__restrict__ y", "const float *x, float *y"),
    ("const float* __restrict__ x, float* __restrict__ y", "const float* x, float* y"),
    ("const float * __restrict__ x, float * __restrict__ y", "const float * x, float * y"),
    ("const float *__restrict x, float *__restrict y", "const float *x, float *y"),
    ("const float* __restrict x, float* __restrict y", "const float* x, float* y"),
    ("float const *__restrict__ x, float *__restrict__ const y", "float const *x, float *const y"),
    ("const float *const __restrict__ x, float *const __restrict__ y", "const float *const x, float *const y"),
    ("const float* __restrict__\n        x,\n    float* __restrict__\n        y", "const float* x,\n    float* y"),
    ("const float\t*__restrict__\tx, float\t*__restrict__\ty", "const float\t*x, float\t*y"),
    ("const float *RESTRICT x, float *RESTRICT y", "const float *x, float *y"),
    ("const float* __restrict__ x, float *__restrict y", "const float* x, float *y"),
]


def kernel(params: str) -> str:
    return dedent("""
        #include <cuda_runtime.h>
        #define RESTRICT __restrict__

        __global__ void axpy2(PARAMS, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = 2.0f * x[i] + y[i];
        }

        extern "C" cudaError_t run(const float* x, float* y, int n, cudaStream_t stream) {
            axpy2<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
            return cudaGetLastError();
        }
        """).replace("PARAMS", params)


@pytest.mark.parametrize("written,bare", STYLES, ids=[f"style{i}" for i in range(len(STYLES))])
def test_each_style_is_removed_and_restored_byte_for_byte(written, bare):
    src = kernel(written)
    (feat,) = R.detect(Kernel(src))
    assert feat.locus == "axpy2:params" and feat.info() == {"params": "x,y", "count": 2}
    gone = R.deoptimize(Kernel(src), feat)
    assert isinstance(gone, Applied)
    assert gone.source == kernel(bare)  # only the qualifiers (and the blank after each) went
    assert not R.detect(Kernel(gone.source))
    back = R.reoptimize(Kernel(gone.source), feat.locus, gone.config)
    assert isinstance(back, Applied) and back.source == src, back.source
    assert back.config.get("exact", True) and "note" not in back.config
    assert set(re.findall(r"\w*__restrict\w*", back.source)) <= {"__restrict__", "__restrict"}  # no __restrict__x


def test_the_configuration_carries_only_what_the_canonical_insertion_would_not_give():
    house = kernel("const float* __restrict__ x, float* __restrict__ y")
    assert R.deoptimize(Kernel(house), R.detect(Kernel(house))[0]).config == {"params": ["x", "y"]}
    mixed = kernel("const float *__restrict x, float* __restrict__ y")
    cfg = R.deoptimize(Kernel(mixed), R.detect(Kernel(mixed))[0]).config
    assert set(cfg["restore"]) == {"x"} and cfg["restore"]["x"]["text"] == "__restrict "


def test_canonical_insertion_on_natural_code_keeps_a_blank_before_the_name():
    for bare, want in (("const float *x, float *y", "const float *__restrict__ x, float *__restrict__ y"),
                       ("const float* x, float* y", "const float* __restrict__ x, float* __restrict__ y"),
                       ("const float * x, float * y", "const float * __restrict__ x, float * __restrict__ y")):
        res = R.reoptimize(Kernel(kernel(bare)))
        assert isinstance(res, Applied) and res.source == kernel(want), res.source


def test_a_changed_parameter_is_restored_canonically_and_said_so():
    src = kernel("const float *__restrict x, float *__restrict y")
    gone = R.deoptimize(Kernel(src), R.detect(Kernel(src))[0])
    edited = gone.source.replace("const float *x", "const float *  x")
    back = R.reoptimize(Kernel(edited), "axpy2:params", gone.config)
    assert isinstance(back, Applied) and back.config["exact"] is False and "x" in back.config["note"]
    assert "const float * __restrict__  x" in back.source and "float *__restrict y" in back.source


def test_pointer_to_pointer_and_device_helpers():
    src = dedent("""
        #include <cuda_runtime.h>
        __device__ float first(const float *__restrict p) { return p[0]; }
        __global__ void gather(const float **__restrict__ rows, float *__restrict__ out, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) out[i] = first(rows[i]);
        }
        """)
    feats = {f.locus: f for f in R.detect(Kernel(src))}
    assert set(feats) == {"first:params", "gather:params"}
    assert feats["gather:params"].info()["params"] == "rows,out"
    for f in feats.values():
        gone = R.deoptimize(Kernel(src), f)
        assert R.reoptimize(Kernel(gone.source), f.locus, gone.config).source == src


@pytest.mark.nvcc
def test_every_style_and_its_rewrites_build():
    for written, bare in STYLES[:1] + STYLES[3:4] + STYLES[5:8] + STYLES[9:10]:
        src = kernel(written)
        gone = R.deoptimize(Kernel(src), R.detect(Kernel(src))[0])
        assert_compiles(src)
        assert_compiles(gone.source)
        assert_compiles(R.reoptimize(Kernel(kernel(bare))).source)
