#!/usr/bin/env bash
# Packs a CUDA build of kpipe for a GPU node that has the NVIDIA driver, CUDA 13 (cuBLAS, NCCL: in the toolkit
# or in PyTorch's wheels) and Python, but no Open MPI, HDF5, OpenBLAS or SentencePiece, and no time to build:
# the programs scripts/gpu-check.sh runs, stripped, and every shared library they load apart from the C
# library's and CUDA's, Open MPI's plugins and help files included, in one xz tarball (a few tens of MiB: a
# node's upload limit, not the build's 700 MiB). On the node:
#   tar xJf gpu-pack.tar.xz -C /tmp && scripts/gpu-check.sh /tmp/gpu-pack
#
#   scripts/gpu-pack.sh BUILD_DIR [TARBALL]     (TARBALL: gpu-pack.tar.xz in the current directory)
#
# The pack keeps the build directory's layout (apps/, tests/, tools/, CMakeCache.txt), so gpu-check reads it as
# it reads a build; its gpu-libs/ holds the libraries. The MPI test programs are left out: the node has no
# mpiexec, and the runtime's learning runs (see below). Exit codes: 0 packed; 2 BUILD_DIR is no kpipe build with the apps built.
set -euo pipefail
build=${1:?usage: scripts/gpu-pack.sh BUILD_DIR [TARBALL]}
tarball=$(realpath -m "${2:-gpu-pack.tar.xz}")
[ -f "$build/CMakeCache.txt" ] && [ -x "$build/apps/kpipe-train" ] ||
  { echo "gpu-pack: $build is no kpipe build with the apps (no CMakeCache.txt or apps/kpipe-train)"; exit 2; }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
pack=$scratch/gpu-pack
mkdir -p "$pack/apps" "$pack/tests" "$pack/tools/kernel_timer" "$pack/gpu-libs"
cp "$build/CMakeCache.txt" "$pack/"
programs=("$build/apps/kpipe-train" "$build/apps/kpipe-sim")
for program in "$build"/tests/kpipe_test_*; do
  # Not the MPI programs (no mpiexec on the node), nor kpipe_test_runtime: its learning runs take minutes and run
  # no kernel the others do not.
  case $(basename "$program") in kpipe_test_mpi | kpipe_test_stalled_peer | kpipe_test_runtime | *.*) continue ;; esac
  [ -f "$program" ] && [ -x "$program" ] && programs+=("$program")
done
timer=$build/tools/kernel_timer/libkpipe_kernel_timer.so
[ -f "$timer" ] && programs+=("$timer")
for program in "${programs[@]}"; do
  strip -o "$pack/${program#"$build"/}" "$program"
done

# The libraries the programs load, and those Open MPI's plugins load (dlopen'd: ldd of the programs does not
# list them). Left to the node: the C library's (its own, and at least as new), the driver's, CUDA's.
node_owns='/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*|libcuda|libnvidia[^/]*|libcudart|libcublas[^/]*|libnccl)\.so'
libmpi=$(ldd "$build/apps/kpipe-train" | awk '$1 ~ /^libmpi\.so/ {print $3}')
if [ -n "$libmpi" ]; then
  # Open MPI's layout as it was installed: its plugins in pkglibdir, its help texts in pkgdatadir.
  plugins=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
  help=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
  [ -d "$plugins" ] && [ -d "$help" ] ||
    { echo "gpu-pack: the programs load $libmpi, but ompi_info names no plugin or help directory"; exit 2; }
  cp -rL "$plugins" "$pack/gpu-libs/openmpi"
  mkdir -p "$pack/share" && cp -rL "$help" "$pack/share/openmpi"
fi
find "$pack/apps" "$pack/tests" "$pack/tools" "$pack/gpu-libs" -type f -print0 |
  xargs -0 ldd 2>/dev/null | awk '/=> \// {print $3}' | sort -u | grep -Ev "$node_owns" |
  xargs -r -I{} cp -nL {} "$pack/gpu-libs/"

XZ_OPT=-T0 tar cJf "$tarball" -C "$scratch" gpu-pack
echo "gpu-pack: $tarball: $(du -sm "$pack" | cut -f1) MiB unpacked, $(($(stat -c %s "$tarball") / 1048576)) MiB packed;" \
  "$(ls "$pack/apps" "$pack/tests" | grep -c kpipe) programs, $(find "$pack/gpu-libs" -maxdepth 1 -name '*.so*' | wc -l)" \
  "libraries${libmpi:+ and the plugins of Open MPI}"
