# ctest: `cmake --install` the build into a scratch prefix, then
#  * run the installed `bin/flashcl info` with LD_LIBRARY_PATH unset: it
#    must find the installed libflashcl through its RUNPATH
#    ($ORIGIN/../<libdir>), and that RUNPATH must resolve to this prefix;
#  * run the installed `bin/flashcl-bench --help` the same way;
#  * build a program outside the tree (tests/install_consumer: its own
#    clCreateBuffer buffers, flashcl_attention_forward on them, checked
#    against its own host computation) twice, through find_package(flashcl)
#    and through pkg-config (which must give it -lOpenCL: the public API
#    takes cl_mem), and run both: the CMake one with no LD_LIBRARY_PATH
#    (CMake's build RUNPATH), the pkg-config one with LD_LIBRARY_PATH,
#    with an rpath to pkg-config's libdir, and, failing to start, with
#    neither (docs/install.md);
#  * check the packaging against the header's version (what
#    flashcl_version_string() says): find_package(flashcl MAJOR.MINOR)
#    succeeds and a later minor fails, pkg-config's version, the library's
#    file name and SONAME (libflashcl.so.0.MINOR before 1.0, README's ABI
#    policy), and an installed flashclConfig.cmake with no configure-time
#    value left as a literal condition (`if(NOT ON)`).
# Variables: BUILD_DIR, SOURCE_DIR, WORK_DIR.
set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
include("${SOURCE_DIR}/cmake/flashcl_version.cmake")
flashcl_header_version("${SOURCE_DIR}/include/flashcl.h" header_version)
function(run_or_fail)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

# libflashcl.so.X.Y.Z with the SONAME libflashcl.so.<SOVERSION>, read from
# the installed file itself, and the link of that name beside it.
function(check_library_files)
  set(real "${lib_dir}/libflashcl.so.${header_version}")
  set(soname "libflashcl.so.${header_version_SOVERSION}")
  if(NOT EXISTS "${real}" OR IS_SYMLINK "${real}")
    file(GLOB libs "${lib_dir}/libflashcl*")
    message(FATAL_ERROR "no library file ${real}; installed: ${libs}")
  endif()
  if(NOT EXISTS "${lib_dir}/${soname}")
    message(FATAL_ERROR "no ${lib_dir}/${soname} (the SONAME's link)")
  endif()
  find_program(READELF readelf)
  if(NOT READELF)
    message(FATAL_ERROR "readelf not found (binutils): cannot check the SONAME")
  endif()
  execute_process(COMMAND ${READELF} -d "${real}" OUTPUT_VARIABLE dynamic
                  RESULT_VARIABLE rc)
  string(REGEX MATCH "Library soname: \\[([^\n]*)\\]" _ "${dynamic}")
  if(NOT rc EQUAL 0 OR NOT CMAKE_MATCH_1 STREQUAL soname)
    message(FATAL_ERROR "${real}: SONAME '${CMAKE_MATCH_1}', expected ${soname} "
                        "(README's ABI policy for ${header_version})")
  endif()
  message(STATUS "${real}: SONAME ${soname}")
endfunction()

# The installed flashclConfig.cmake: a configure-time value written in as a
# bare condition (`if(NOT ON)`) or a placeholder left unreplaced is a bug.
function(check_package_config)
  file(GLOB_RECURSE config "${prefix}/*/flashclConfig.cmake")
  file(READ "${config}" text)
  # CMake's own comment names @PACKAGE_INIT@; comments do not count.
  string(REGEX REPLACE "#[^\n]*" "" text "${text}")
  if(text MATCHES "if\\((NOT )?(ON|OFF|TRUE|FALSE|YES|NO|0|1)\\)" OR
     text MATCHES "@[A-Za-z_]+@")
    message(FATAL_ERROR "${config} has '${CMAKE_MATCH_0}':\n${text}")
  endif()
endfunction()

run_or_fail(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
file(GLOB_RECURSE lib_dirs LIST_DIRECTORIES false "${prefix}/*/flashcl.pc")
get_filename_component(pc_dir "${lib_dirs}" DIRECTORY)
get_filename_component(lib_dir "${pc_dir}" DIRECTORY)
set(env ${CMAKE_COMMAND} -E env "LD_LIBRARY_PATH=${lib_dir}")
set(no_path ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH)

# The installed tool starts on its own.
set(tool "${prefix}/bin/flashcl")
if(EXISTS "${tool}")
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

check_library_files()
check_package_config()

set(required "${header_version_MAJOR}.${header_version_MINOR}")
run_or_fail(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install_consumer"
            -B "${WORK_DIR}/cmake-consumer" "-DCMAKE_PREFIX_PATH=${prefix}"
            "-DFLASHCL_REQUIRE_VERSION=${required}")
math(EXPR later_minor "${header_version_MINOR} + 1")
set(later "${header_version_MAJOR}.${later_minor}")
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install_consumer"
                -B "${WORK_DIR}/cmake-consumer-later" "-DCMAKE_PREFIX_PATH=${prefix}"
                "-DFLASHCL_REQUIRE_VERSION=${later}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "flashcl")
  message(FATAL_ERROR "find_package(flashcl ${later} REQUIRED) against the "
                      "installed ${header_version} should fail, got rc ${rc}:\n${out}\n${err}")
endif()
run_or_fail(${CMAKE_COMMAND} --build "${WORK_DIR}/cmake-consumer")
# CMake gives a build-tree binary the imported library's folder as its
# RUNPATH (docs/install.md says so): no LD_LIBRARY_PATH.
run_or_fail(${no_path} "${WORK_DIR}/cmake-consumer/consumer")

execute_process(COMMAND ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${pc_dir}"
                pkg-config --cflags --libs flashcl
                OUTPUT_VARIABLE pc_flags RESULT_VARIABLE rc
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs flashcl failed")
endif()
message(STATUS "pkg-config --cflags --libs flashcl: ${pc_flags}")
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${pc_dir}"
                pkg-config --modversion flashcl
                OUTPUT_VARIABLE pc_version OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT pc_version STREQUAL header_version)
  message(FATAL_ERROR "pkg-config --modversion flashcl says '${pc_version}', "
                      "the header ${header_version}")
endif()
run_or_fail(${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${pc_dir}"
            pkg-config "--atleast-version=${header_version}" flashcl)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
# Only what pkg-config says (plus libm for the consumer's own host code).
run_or_fail(cc -std=c11 -Wall -Wextra -Werror
            "${SOURCE_DIR}/tests/install_consumer/main.c"
            ${pc_flags} -lm -o "${WORK_DIR}/pc-consumer")
run_or_fail(${env} "${WORK_DIR}/pc-consumer")
# docs/install.md's two ways for a prefix the loader does not search:
# without either the program does not start; LD_LIBRARY_PATH (above) or
# an rpath to pkg-config's libdir.
execute_process(COMMAND ${no_path} "${WORK_DIR}/pc-consumer"
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "libflashcl.so.${header_version_SOVERSION}")
  message(FATAL_ERROR "pc-consumer without LD_LIBRARY_PATH or rpath: rc ${rc}, "
                      "expected the loader to miss libflashcl.so.${header_version_SOVERSION}: ${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${pc_dir}"
                pkg-config --variable=libdir flashcl
                OUTPUT_VARIABLE pc_libdir OUTPUT_STRIP_TRAILING_WHITESPACE)
run_or_fail(cc -std=c11 -Wall -Wextra -Werror
            "${SOURCE_DIR}/tests/install_consumer/main.c"
            ${pc_flags} "-Wl,-rpath,${pc_libdir}" -lm
            -o "${WORK_DIR}/pc-consumer-rpath")
run_or_fail(${no_path} "${WORK_DIR}/pc-consumer-rpath")
