#!/usr/bin/env bash
# kpipe against Hugging Face transformers, both ways (ctest -L hf, tests/hf/): exported checkpoints, the quick start's
# included when 20-quickstart left it, load in transformers with kpipe's losses, tokens and generated text; models
# transformers saves import into kpipe with its losses. Debian's python3-torch, and transformers, tokenizers and
# safetensors as tests/hf/requirements.txt pins them, in a virtual environment under build-ci/.
set -euo pipefail
job=35-transformers
source "$(dirname "$0")/../lib.sh"
cd "$repo"
echo "$job: kpipe-export and kpipe-import against transformers $(sed -n 's/^transformers==//p' tests/hf/requirements.txt)"
packages=(python3-torch python3-venv python3-requests python3-yaml python3-packaging)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || skip "needs ${missing[*]} (apt-get install, as root)"
  export DEBIAN_FRONTEND=noninteractive
  timed apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update -qq && timed apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
fi
venv=$repo/build-ci/hf-venv
if ! cmp -s tests/hf/requirements.txt "$venv/requirements.txt"; then
  rm -rf "$venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  timed "$venv/bin/pip" install -q --disable-pip-version-check -r tests/hf/requirements.txt
  cp tests/hf/requirements.txt "$venv/requirements.txt"
fi
# The README test command's build (20-quickstart turned its tests off: on again), the programs and the test seam.
build=${KPIPE_HF_BUILD_DIR:-build}
timed cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKPIPE_ENABLE_TESTS=ON -DKPIPE_ENABLE_APPS=ON >/dev/null
timed cmake --build "$build" -j "$(nproc)" --target kpipe-prepare kpipe-train kpipe-eval kpipe-generate kpipe-export \
  kpipe-import kpipe-inspect kpipe_test_encode_text >/dev/null
quickstart=$(cd "$build" && pwd)/quickstart/checkpoints  # absolute: ctest runs the tests in $build/tests
[ -f "$quickstart/latest" ] && export KPIPE_HF_QUICKSTART=$quickstart
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
KPIPE_HF_PYTHON=$venv/bin/python timed ctest --test-dir "$build" -L hf --output-on-failure -V >"$out" 2>&1 || rc=$?
grep -E "^[0-9]+: (ok|FAIL|SKIP|transformers)|tests passed|tests failed|took" "$out" || true
# Installed here, so a skip is a failure of the installation.
if grep -q "SKIPPED" "$out"; then echo "$job: FAIL: the tests were skipped though the job installed transformers"; exit 1; fi
[ "$rc" -eq 0 ] || { tail -40 "$out"; exit "$rc"; }
