# Shared by the jobs in .ci/jobs/ (sourced): where ../shared is, and the prebuilt toolchains in it.
# A user's clone has no ../shared: jobs that need it skip with one line.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
shared=${KPIPE_SHARED_DIR:-$repo/../shared}

# toolchain NAME: unpacks $shared/toolchains/NAME.tar.gz into a scratch directory under the repository's
# (ignored) build-ci/ and prints its prefix; again only when the tarball changed. Fails when there is none.
toolchain() {
  local name=$1 tarball="$shared/toolchains/$1.tar.gz" scratch="$repo/build-ci/toolchains"
  [ -f "$tarball" ] || return 1
  if [ ! -f "$scratch/$name/.unpacked" ] || [ "$tarball" -nt "$scratch/$name/.unpacked" ]; then
    rm -rf "${scratch:?}/$name" && mkdir -p "$scratch" && tar xzf "$tarball" -C "$scratch" && touch "$scratch/$name/.unpacked" ||
      return 1
  fi
  echo "$scratch/$name"
}

# The extra builds compile as unity builds (16 sources a translation unit): on 2 cores most of a build is
# parsing Kokkos' headers again for every source (nvcc twice, host and device). It also keeps kpipe's
# file-local names unique within each target, which a unity build needs.
unity_build=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16)

# Runs "$@" and prints how long it took, prefixed with the job's name.
timed() {
  local t0=$SECONDS
  "$@"
  local rc=$?
  echo "$job: '$1 ${2:-}...' took $((SECONDS - t0)) s (rc $rc)"
  return $rc
}

# The exit status of a job that did not run (what it needs is absent): the summary shows it as SKIPPED, apart
# from the jobs that passed. (77: automake's "skipped".)
skipped_status=77
# skip REASON: says why in one line and ends the job as skipped.
skip() {
  echo "$job: SKIPPED: $1"
  exit $skipped_status
}
