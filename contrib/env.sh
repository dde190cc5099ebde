# Puts rc_gdr into the environment of UCX programs. Source it from the
# repository root after a build:
#
#   . contrib/env.sh [--emulated-gpu] [BUILD_DIR]
#
# UCX 1.13 (Debian bookworm) loads only modules named at its build, so the
# module is preloaded and registers itself; UCX >= 1.22 also finds it as
# libuct_rcgdr.so.0 in UCX_PLUGIN_PATH. Open MPI 4.1's pml ucx accepts only
# mlx devices unless told otherwise, hence the two OMPI_MCA_ variables.
#
# --emulated-gpu: CUDA calls go to the project's stand-in driver
# (test/fake_cuda): "GPU" buffers are host memory. Every result obtained so
# is about an emulated GPU, and must be reported as such.

rc_gdr_emulated=0
rc_gdr_build=""
for rc_gdr_arg in "$@"; do
    case "$rc_gdr_arg" in
    --emulated-gpu) rc_gdr_emulated=1 ;;
    *)              rc_gdr_build="$rc_gdr_arg" ;;
    esac
done
rc_gdr_build=$(cd "${rc_gdr_build:-${RC_GDR_BUILD:-build}}" 2>/dev/null && pwd)
rc_gdr_lib="$rc_gdr_build/src/uct/ib_gdr/.libs/libuct_ib_gdr.so"

if [ -z "$rc_gdr_build" ] || [ ! -f "$rc_gdr_lib" ]; then
    echo "contrib/env.sh: no built module (looked for $rc_gdr_lib);" \
         "build first (README.md)" >&2
    return 1 2>/dev/null || exit 1
fi

case ":${LD_PRELOAD:-}:" in
*":$rc_gdr_lib:"*) ;;
*) export LD_PRELOAD="$rc_gdr_lib${LD_PRELOAD:+:$LD_PRELOAD}" ;;
esac
# UCX_PLUGIN_PATH exists from UCX 1.22; older releases warn about it.
case "$(ucx_info -v 2>/dev/null | sed -n 's/^# Version \([0-9]*\.[0-9]*\).*/\1/p')" in
1.[0-9]|1.1[0-9]|1.2[01]) ;;
*) export UCX_PLUGIN_PATH="$rc_gdr_build/src/uct/ib_gdr/.libs${UCX_PLUGIN_PATH:+:$UCX_PLUGIN_PATH}" ;;
esac
export OMPI_MCA_pml_ucx_tls=any
export OMPI_MCA_pml_ucx_devices=any
export RC_GDR_BUILD="$rc_gdr_build"
export PATH="$rc_gdr_build/src/tools:$PATH"

if [ "$rc_gdr_emulated" = 1 ]; then
    export RC_GDR_CUDA_LIBRARY="$rc_gdr_build/test/fake_cuda/libcuda.so.1"
    export RC_GDR_GPU_EMULATED=1
    if [ ! -f "$RC_GDR_CUDA_LIBRARY" ]; then
        echo "contrib/env.sh: the emulated GPU driver is built by" \
             "'make check' (missing: $RC_GDR_CUDA_LIBRARY)" >&2
    fi
fi

unset rc_gdr_arg rc_gdr_emulated rc_gdr_lib
