#!/usr/bin/env bash
# A pack of the CUDA build (scripts/gpu-pack.sh) starts on a node that has none of kpipe's libraries: in a
# mount namespace where the system's library directory holds only the C library and what the shell's tools
# need (no Open MPI, HDF5, OpenBLAS, fmt, toml++, SentencePiece, no Open MPI plugins or help texts), kpipe-train
# from the pack, in the environment `scripts/gpu-check.sh PACK --env` gives it, loads every library, passes
# MPI_Init as a singleton, and stops at the first thing only a GPU has: "no GPU visible" (CUDA's driver is
# the toolkit's stub here), exit 2. Needs root and a mount namespace (unshare -m): without them it says so and
# exits 77 (skipped). Usage: gpu_pack_bare_node.sh TARBALL CUDA_HOME
set -euo pipefail
tarball=$1 cuda=$2
if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
  echo "gpu-pack: SKIPPED: no mount namespace here (not root, or unshare refused): the pack's start on a bare node is not checked"
  exit 77
fi
repo=$(cd "$(dirname "$0")/../.." && pwd)
system=/usr/lib/x86_64-linux-gnu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar xJf "$tarball" -C "$work"
pack=$work/gpu-pack

# The bare node's library directory: the C library, and the libraries of the tools gpu-check and this test use.
mkdir -p "$work/system" "$work/empty" "$work/driver"
tools=(bash env timeout dirname sed grep cat awk wc ldd)
for tool in "${tools[@]}"; do
  path=$(command -v "$tool")
  head -c 2 "$path" | grep -q '#!' && continue  # a script (ldd): its interpreter is in the list
  ldd "$path" | awk '/=> \// {print $3} /ld-linux/ {print $1}'
done | sort -u | xargs -I{} cp -L {} "$work/system/"
for lib in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2 ld-linux-x86-64.so.2; do
  cp -L "$system/$lib" "$work/system/"
done
ln -s "$cuda/lib64/stubs/libcuda.so" "$work/driver/libcuda.so.1"

# shellcheck disable=SC2016
unshare -m --propagation private bash -c '
  set -euo pipefail
  [ -d /usr/share/openmpi ] && mount --bind "$1/empty" /usr/share/openmpi
  mount --bind "$1/system" '"$system"'  # last: mount itself needs the libraries this hides
  listed=$("$2/scripts/gpu-check.sh" "$3" --env) || { echo "$listed"; exit 2; }  # a library nowhere: one line
  mapfile -t environment <<<"$listed"
  environment+=("LD_LIBRARY_PATH=$(printf "%s\n" "${environment[@]}" | sed -n "s/^LD_LIBRARY_PATH=//p"):$1/driver")
  env -i PATH=/usr/bin:/bin "${environment[@]}" "$3/apps/kpipe-train" --preset tiny --steps 1
' bare-node "$work" "$repo" "$pack" >"$work/out" 2>&1 && rc=0 || rc=$?
# Exit 2: no GPU is bad input to a CUDA build, refused like any other before anything runs (runtime/placement.cpp).
if [ $rc -eq 2 ] && grep -q "no GPU visible to rank 0" "$work/out" && ! grep -qE "error while loading|MPI_Init|help file" "$work/out"; then
  echo "gpu-pack: on a node without kpipe's libraries, kpipe-train from the pack started and stopped for want of a GPU (exit $rc)"
else
  echo "gpu-pack: FAIL: kpipe-train from the pack did not start on a node without kpipe's libraries (exit $rc):"
  sed 's/^/  /' "$work/out"
  exit 1
fi
