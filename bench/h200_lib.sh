# Shared by the scripts that run on the lent H200 (bench/run_gpu.sh,
# scripts/gpu_check.sh); sourced from the repository root after BUILD and
# OUT are set. Puts the carried OpenCL runtime on the paths
# (../shared/notes/opencl-on-h200.md) and defines `step`.
[ -f .gpu-rt/activate.sh ] && source .gpu-rt/activate.sh
export FLASHCL_DEVICE=${FLASHCL_DEVICE:-gpu}

# step NAME LIMIT COMMAND...: runs COMMAND under a time limit, its output
# in $STEP_LOG/NAME.log (default $OUT), and prints one line: NAME, exit
# status, seconds, and the log's last lines matching $STEP_SUMMARY
# (default the Check suites' "Checks:" line).
step() {
  local name=$1 limit=$2; shift 2
  local start=$SECONDS log=${STEP_LOG:-$OUT}/$name.log
  timeout "$limit" "$@" >"$log" 2>&1
  local rc=$?
  printf '%-34s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - start))" \
    "$(grep -E "${STEP_SUMMARY:-Checks:}" "$log" | tail -"${STEP_LINES:-1}" |
       tr '\n' ' ' | cut -c1-110)"
}
