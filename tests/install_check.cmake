# ctest: `cmake --install` the build into a scratch prefix, then build a
# program outside the tree against it twice, through find_package(flashcl)
# and through pkg-config, and run both. Variables: BUILD_DIR, SOURCE_DIR,
# WORK_DIR.
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
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
run_or_fail(cc -std=c11 "${SOURCE_DIR}/tests/install_consumer/main.c"
            ${pc_flags} -lm -o "${WORK_DIR}/pc-consumer")
run_or_fail(${env} "${WORK_DIR}/pc-consumer")
