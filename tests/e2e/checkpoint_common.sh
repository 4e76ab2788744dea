# Helpers for the checkpoint end-to-end tests (sourced).
# "step loss" per line of a metrics JSON Lines file.
losses() { sed -n 's/.*"loss":\([^,}]*\).*"step":\([0-9]*\).*/\2 \1/p' "$1"; }
final_checksum() { sed -n 's/.*"param_checksum":"\([0-9a-f]*\)".*/\1/p' "$1"; }
# Step lines only (the metrics' validation and checkpoint records carry a step too).
steps_done() { [ -f "$1" ] && grep -c '"step_seconds"' "$1" || echo 0; }
# A rank of the mpiexec job with pid $1 (its last child process).
a_rank() { pgrep -P "$1" | tail -1; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
