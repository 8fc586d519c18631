# ctest version_agreement: every place that states flashcl's version says
# the header's (FLASHCL_VERSION_*, what flashcl_version_string() returns):
# CMake's project version, the generated flashcl.pc, the library's file
# name and SONAME (README's ABI policy: libflashcl.so.0.MINOR before 1.0),
# and the Python package's three copies (pyproject.toml, __version__, the
# ctypes mirror's HEADER_VERSION), which cannot read the header.
# Variables: SOURCE_DIR, PROJECT_VERSION, PC_FILE; LIBRARY_FILE_NAME and
# SONAME_FILE_NAME in a shared build.
include("${SOURCE_DIR}/cmake/flashcl_version.cmake")
flashcl_header_version("${SOURCE_DIR}/include/flashcl.h" v)
set(failures "")

function(expect what found)
  if(NOT found STREQUAL v)
    set(failures "${failures}\n  ${what}: '${found}'" PARENT_SCOPE)
  endif()
endfunction()

# The first match of `regex` (one group) in `file`, "" when none.
function(first_match out file regex)
  file(STRINGS "${file}" lines REGEX "${regex}")
  list(GET lines 0 line)
  string(REGEX MATCH "${regex}" _ "${line}")
  set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

expect("CMake project(VERSION)" "${PROJECT_VERSION}")
first_match(pc "${PC_FILE}" "^Version: *(.*)$")
expect("${PC_FILE} Version" "${pc}")
if(DEFINED LIBRARY_FILE_NAME) # a shared build
  string(REGEX REPLACE "^libflashcl\\.so\\." "" file_version "${LIBRARY_FILE_NAME}")
  expect("library file ${LIBRARY_FILE_NAME}" "${file_version}")
  if(NOT SONAME_FILE_NAME STREQUAL "libflashcl.so.${v_SOVERSION}")
    set(failures "${failures}\n  SONAME: '${SONAME_FILE_NAME}', expected libflashcl.so.${v_SOVERSION}")
  endif()
endif()

set(py "${SOURCE_DIR}/python")
first_match(toml "${py}/pyproject.toml" "^version *= *\"([^\"]*)\"")
expect("python/pyproject.toml version" "${toml}")
first_match(init "${py}/flashcl/__init__.py" "^__version__ *= *\"([^\"]*)\"")
expect("python/flashcl/__init__.py __version__" "${init}")
first_match(mirror "${py}/flashcl/_lib.py"
            "^HEADER_VERSION *= *\\(([0-9]+, *[0-9]+, *[0-9]+)\\)")
string(REGEX REPLACE ", *" "." mirror "${mirror}")
expect("python/flashcl/_lib.py HEADER_VERSION" "${mirror}")

if(failures)
  message(FATAL_ERROR "include/flashcl.h says ${v}; these disagree:${failures}")
endif()
message(STATUS "version ${v} everywhere (SONAME libflashcl.so.${v_SOVERSION})")
