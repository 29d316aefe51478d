#!/bin/sh
# The CUDA backend is a module the programs load at run time (kernels/cuda_loader.c),
# checked without a GPU: no program links a CUDA library; the module beside the
# programs loads on a host without a driver (0 devices, the CPU backend by default);
# and where it is missing, foreign, or lacks a library it needs, --backend cuda is
# one error line naming the file and the cause.
. "$(dirname "$0")/lib.sh"
grep -q '^#define HAVE_CUDA 1' "$BUILD/config.h" 2>/dev/null \
    || skip_no_device "cuda_module: $BUILD is not a CUDA build (./configure --with-cuda)"
need_fixture stories260K.bin

for p in runahead runahead-tune runahead-chunks runahead-synth runahead-table tests/cuda_devices; do
    if ldd "$BUILD/$p" | grep -Eq 'lib(cudart|cublas|cublasLt|nccl|cuda)\.so'; then
        fail "$p links a CUDA library: $(ldd "$BUILD/$p" | grep -E 'lib(cudart|cublas|nccl|cuda)' | tr -s ' \t\n' ' ')"
    fi
done
ldd "$BUILD/librunahead-cuda.so" | grep -q 'libmpi' && fail "the CUDA module links MPI"

"$BUILD/tests/cuda_devices" -v >"$TMP/describe" || fail "cuda_devices -v failed"
grep -q "^cuda module: $(cd "$BUILD" && pwd -P)/librunahead-cuda.so (CUDA runtime" "$TMP/describe" \
    || { cat "$TMP/describe" >&2; fail "the module beside the programs did not load"; }

# The default backend, where the module loads but sees no GPU (or sees one: RA_BACKEND unset), runs.
ids=$(env -u RA_BACKEND "$BUILD/runahead" --model "$MODELS/stories260K.bin" --prompt-ids 1 -n 8 -o ids 2>"$TMP/err") \
    || fail "runahead with the default backend: $(tail -n 1 "$TMP/err")"
[ "$(echo "$ids" | wc -w)" -eq 8 ] || fail "runahead with the default backend gave '$ids'"

run_cuda() { "$BUILD/runahead" --model "$MODELS/stories260K.bin" --prompt-ids 1 -n 2 --backend cuda; }
RA_CUDA_MODULE=$TMP/absent.so expect_error "rank 0: --backend cuda: RA_CUDA_MODULE=$TMP/absent.so: no such file" run_cuda
need_command cc gcc
printf 'int dep(void) { return 1; }\n' >"$TMP/dep.c"
printf 'int dep(void);\nint f(void) { return dep(); }\n' >"$TMP/mod.c"
if cc -shared -fPIC -o "$TMP/libradep.so.7" -Wl,-soname,libradep.so.7 "$TMP/dep.c" \
    && cc -shared -fPIC -o "$TMP/librunahead-cuda.so" "$TMP/mod.c" "$TMP/libradep.so.7" -Wl,-rpath,"$TMP"; then
    RA_CUDA_MODULE=$TMP/librunahead-cuda.so expect_error "is not this runahead's \(no ra_cuda_module_open" run_cuda
    rm -f "$TMP/libradep.so.7" # a library the module needs, missing on this node
    RA_CUDA_MODULE=$TMP/librunahead-cuda.so \
        expect_error "cannot load the CUDA module .*librunahead-cuda.so: libradep.so.7: cannot open shared object file" run_cuda
else
    fail "cc could not build the stand-in modules"
fi
finish
