# Run named phases one after another, each to its end whatever the others
# did, then print one line per phase and fail if any failed. Sourced by
# scripts/test.sh; tests/test_scripts.py runs it on phases of its own.
#
#   phase NAME COMMAND [ARG...]   run COMMAND, record NAME's result and time
#   skip NAME WHY                 record NAME as not run, and why
#   summary                       print the results; return 1 if a phase failed

PHASE_LINES=()
PHASE_FAILED=0

phase() {
  local name=$1 started status
  shift
  started=$SECONDS
  echo "== $name" >&2
  set +e
  ("$@")
  status=$?
  set -e
  local took=$((SECONDS - started))
  if [ "$status" -eq 0 ]; then
    PHASE_LINES+=("passed  $name ($((took / 60)) min $((took % 60)) s)")
  else
    PHASE_LINES+=("FAILED  $name (exit $status, $((took / 60)) min $((took % 60)) s)")
    PHASE_FAILED=1
  fi
}

skip() {
  PHASE_LINES+=("skipped $1 ($2)")
}

summary() {
  echo "== summary" >&2
  local line
  for line in "${PHASE_LINES[@]}"; do
    echo "  $line" >&2
  done
  if [ "$PHASE_FAILED" -ne 0 ]; then
    echo "some phases FAILED: read their output above" >&2
    return 1
  fi
  echo "every phase passed" >&2
}
