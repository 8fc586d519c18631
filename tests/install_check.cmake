# ctest: `cmake --install` the build into a scratch prefix, then
#  * run the installed `bin/flashcl info` with LD_LIBRARY_PATH unset: it
#    must find the installed libflashcl through its RUNPATH
#    ($ORIGIN/../<libdir>), and that RUNPATH must resolve to this prefix;
#  * run the installed `bin/flashcl-bench --help` the same way;
#  * build a program outside the tree (tests/install_consumer: its own
#    clCreateBuffer buffers, flashcl_attention_forward on them, checked
#    against its own host computation) twice, through find_package(flashcl)
#    and through pkg-config (which must give it -lOpenCL: the public API
#    takes cl_mem), and run both.
# Variables: BUILD_DIR, SOURCE_DIR, WORK_DIR.
set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
function(run_or_fail)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run_or_fail(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
file(GLOB_RECURSE lib_dirs LIST_DIRECTORIES false "${prefix}/*/flashcl.pc")
get_filename_component(pc_dir "${lib_dirs}" DIRECTORY)
get_filename_component(lib_dir "${pc_dir}" DIRECTORY)
set(env ${CMAKE_COMMAND} -E env "LD_LIBRARY_PATH=${lib_dir}")

# The installed tool starts on its own.
set(tool "${prefix}/bin/flashcl")
if(EXISTS "${tool}")
  set(no_path ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH)
  find_program(LDD ldd)
  if(LDD)
    execute_process(COMMAND ${no_path} ${LDD} "${tool}"
                    OUTPUT_VARIABLE ldd_out ERROR_VARIABLE ldd_out)
    string(REGEX MATCH "libflashcl[^\n]*" ldd_line "${ldd_out}")
    string(FIND "${ldd_line}" "=> ${prefix}/" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "installed ${tool} does not load libflashcl from "
                          "${prefix} (RUNPATH not set?):\n${ldd_out}")
    endif()
  endif()
  run_or_fail(${no_path} "${tool}" info)
endif()

# flashcl-bench, where built, is installed and starts on its own too (its
# --help needs the loader to find libflashcl through the RUNPATH).
if(EXISTS "${BUILD_DIR}/flashcl-bench")
  if(NOT EXISTS "${prefix}/bin/flashcl-bench")
    message(FATAL_ERROR "flashcl-bench is built but not installed "
                        "(${prefix}/bin/flashcl-bench)")
  endif()
  run_or_fail(${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH
              "${prefix}/bin/flashcl-bench" --help)
endif()

run_or_fail(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install_consumer"
            -B "${WORK_DIR}/cmake-consumer" "-DCMAKE_PREFIX_PATH=${prefix}")
run_or_fail(${CMAKE_COMMAND} --build "${WORK_DIR}/cmake-consumer")
run_or_fail(${env} "${WORK_DIR}/cmake-consumer/consumer")

execute_process(COMMAND ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${pc_dir}"
                pkg-config --cflags --libs flashcl
                OUTPUT_VARIABLE pc_flags RESULT_VARIABLE rc
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs flashcl failed")
endif()
message(STATUS "pkg-config --cflags --libs flashcl: ${pc_flags}")
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
# Only what pkg-config says (plus libm for the consumer's own host code).
run_or_fail(cc -std=c11 -Wall -Wextra -Werror
            "${SOURCE_DIR}/tests/install_consumer/main.c"
            ${pc_flags} -lm -o "${WORK_DIR}/pc-consumer")
run_or_fail(${env} "${WORK_DIR}/pc-consumer")
