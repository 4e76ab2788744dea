#!/usr/bin/env bash
# Installs kpipe's build, test and analysis dependencies from Debian 12 (bookworm) packages.
# Idempotent: packages already present are left alone; safe to run on every CI run.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev libopenblas-dev
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev hdf5-tools zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libfmt-dev libspdlog-dev
  libsentencepiece-dev sentencepiece
  python3-h5py python3-numpy python3-matplotlib
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps-debian: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
