# ctest bench_backward: a tiny `flashcl-bench --backward --check` whose
# check-bwd| lines (relative L2 of sampled dQ, dK, dV rows against the
# float64 oracle) must all be present, finite and under the dtype's bound.
# Run with -DBENCH=<flashcl-bench>.
execute_process(
  COMMAND ${BENCH} --backward --check 8 --dtype fp32,fp16 --head-dim 64
          --seqlen 128 --causal both --tokens 256 --hidden 128 --reps 2
          --warmup 1 --sgemm 0
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "flashcl-bench --backward exited with ${rc}")
endif()
string(REGEX MATCHALL "check-bwd\\|[^\n]*" lines "${out}")
list(LENGTH lines count)
if(NOT count EQUAL 4) # 2 dtypes x causal 0/1
  message(FATAL_ERROR "expected 4 check-bwd lines, got ${count}")
endif()
foreach(line IN LISTS lines)
  # fp16 inputs and outputs: ~1e-3 relative; fp32: ~1e-6. An error
  # printed as m.mmme-XX is under 10^-k when its exponent is below -k.
  set(max_exponent -5) # fp32: under 1e-4
  if(line MATCHES "\\| fp16 \\|")
    set(max_exponent -3) # under 1e-2
  endif()
  foreach(grad dq dk dv)
    if(NOT line MATCHES "${grad} [0-9][.][0-9]+e([-+])0*([0-9]+)")
      message(FATAL_ERROR "no finite ${grad} error in: ${line}")
    endif()
    set(exponent "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
    if(CMAKE_MATCH_1 STREQUAL "+" OR exponent GREATER max_exponent)
      message(FATAL_ERROR "${grad} error too large in: ${line}")
    endif()
  endforeach()
endforeach()
# The timed rows: backward and fwd+bwd medians present and positive (not
# compared with each other: two reps on a shared CPU put either first).
string(REGEX MATCHALL "\n\\| plain [^\n]*" rows "${out}")
list(LENGTH rows row_count)
if(NOT row_count EQUAL 4)
  message(FATAL_ERROR "expected 4 timed rows, got ${row_count}")
endif()
foreach(row IN LISTS rows)
  string(STRIP "${row}" row)
  string(REGEX MATCHALL "[|]" bars "${row}")
  list(LENGTH bars bar_count)
  if(bar_count LESS 18) # 17 cells: the forward's 12, bwd 3, fwd+bwd 2
    message(FATAL_ERROR "no fwd+bwd columns in: ${row}")
  endif()
  set(num " *([0-9]+[.][0-9]+) *")
  if(NOT row MATCHES "[|]${num}[|]${num}[|]${num}[|]${num}[|]${num}[|]$")
    message(FATAL_ERROR "bwd or fwd+bwd median missing in: ${row}")
  endif()
  set(bwd_ms "${CMAKE_MATCH_1}")
  set(both_ms "${CMAKE_MATCH_4}")
  if(NOT bwd_ms GREATER 0 OR NOT both_ms GREATER 0)
    message(FATAL_ERROR "a zero median in: ${row}")
  endif()
endforeach()
