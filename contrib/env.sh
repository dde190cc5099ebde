# Puts rc_gdr into the environment of UCX programs. Source it from the
# repository root after a build:
#
#   . contrib/env.sh [--emulated-gpu] [BUILD_DIR]
#
# The build says which UCX it is for (BUILD_DIR/ucx.env, from configure): an
# upstream release's programs and libraries come first in PATH and
# LD_LIBRARY_PATH. UCX up to 1.21 (Debian bookworm's 1.13 too) loads only
# modules named at its build, so the module is preloaded and registers
# itself; UCX >= 1.22 finds it as libuct_rcgdr.so.0 in UCX_PLUGIN_PATH alone.
# Open MPI 4.1's pml ucx accepts only mlx devices unless told otherwise,
# hence the two OMPI_MCA_ variables.
#
# --emulated-gpu: CUDA calls go to the project's stand-in driver
# (test/mocks): "GPU" buffers are host memory. Every result obtained so
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

RC_GDR_UCX_VERSION=""
RC_GDR_UCX_LIBDIR=""
RC_GDR_UCX_LOADER=""
RC_GDR_UCX_BINDIR=""
if [ -f "$rc_gdr_build/ucx.env" ]; then
    . "$rc_gdr_build/ucx.env"
fi
if [ -n "$RC_GDR_UCX_BINDIR" ]; then
    case ":$PATH:" in
    *":$RC_GDR_UCX_BINDIR:"*) ;;
    *) export PATH="$RC_GDR_UCX_BINDIR:$PATH" ;;
    esac
    case ":${LD_LIBRARY_PATH:-}:" in
    *":$RC_GDR_UCX_LIBDIR:"*) ;;
    *) export LD_LIBRARY_PATH="$RC_GDR_UCX_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
    esac
fi
if [ -z "$RC_GDR_UCX_VERSION" ]; then
    # "# Version 1.13.1" (1.13), "# Library version: 1.16.0" (1.16 on)
    RC_GDR_UCX_VERSION=$(ucx_info -v 2>/dev/null |
                         sed -n 's/^# \(Library version:\|Version\) *\([0-9.]*\).*/\2/p' |
                         head -n1)
fi
export RC_GDR_UCX_VERSION

RC_GDR_UCX_LOADER=${RC_GDR_UCX_LOADER:-}
if [ -z "$RC_GDR_UCX_LOADER" ]; then # a build configured before it said
    case "$RC_GDR_UCX_VERSION" in
    1.[0-9]|1.[0-9].*|1.1[0-9]|1.1[0-9].*|1.2[01]|1.2[01].*)
        RC_GDR_UCX_LOADER=preload ;;
    *)  RC_GDR_UCX_LOADER=plugin-path ;;
    esac
fi
case "$RC_GDR_UCX_LOADER" in
preload)
    case ":${LD_PRELOAD:-}:" in
    *":$rc_gdr_lib:"*) ;;
    *) export LD_PRELOAD="$rc_gdr_lib${LD_PRELOAD:+:$LD_PRELOAD}" ;;
    esac
    ;;
*)
    # UCX_PLUGIN_PATH alone, no preload (1.22 on)
    case ":${UCX_PLUGIN_PATH:-}:" in
    *":$rc_gdr_build/src/uct/ib_gdr/.libs:"*) ;;
    *) export UCX_PLUGIN_PATH="$rc_gdr_build/src/uct/ib_gdr/.libs${UCX_PLUGIN_PATH:+:$UCX_PLUGIN_PATH}" ;;
    esac
    ;;
esac
export OMPI_MCA_pml_ucx_tls=any
export OMPI_MCA_pml_ucx_devices=any
export RC_GDR_BUILD="$rc_gdr_build"
export PATH="$rc_gdr_build/src/tools:$PATH"

if [ "$rc_gdr_emulated" = 1 ]; then
    export RC_GDR_CUDA_LIBRARY="$rc_gdr_build/test/mocks/libcuda.so.1"
    export RC_GDR_GPU_EMULATED=1
    if [ ! -f "$RC_GDR_CUDA_LIBRARY" ]; then
        echo "contrib/env.sh: the emulated GPU driver is built by" \
             "'make check' (missing: $RC_GDR_CUDA_LIBRARY)" >&2
    fi
    # A CUDA build of UCX (cuda_copy, cuda_ipc, libucm_cuda) links
    # libcuda.so.1 itself: the stand-in must be what the loader finds, with
    # the NVML stand-in its configure linked against, and the toolkit's
    # runtime for libucm_cuda
    if [ -n "$RC_GDR_UCX_LIBDIR" ] &&
       [ -f "$RC_GDR_UCX_LIBDIR/ucx/libuct_cuda.so.0" ]; then
        rc_gdr_ld="$rc_gdr_build/test/mocks"
        [ -d "$RC_GDR_UCX_LIBDIR/../../nvml/lib" ] &&
            rc_gdr_ld="$rc_gdr_ld:$(cd "$RC_GDR_UCX_LIBDIR/../../nvml/lib" && pwd)"
        [ -d "${CUDA_HOME:-/usr/local/cuda}/lib64" ] &&
            rc_gdr_ld="$rc_gdr_ld:${CUDA_HOME:-/usr/local/cuda}/lib64"
        export LD_LIBRARY_PATH="$rc_gdr_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        unset rc_gdr_ld
    fi
fi

unset rc_gdr_arg rc_gdr_emulated rc_gdr_lib
