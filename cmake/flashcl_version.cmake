# flashcl_header_version(<flashcl.h> <prefix>): sets <prefix> to
# "MAJOR.MINOR.PATCH" and <prefix>_MAJOR/_MINOR/_PATCH/_SOVERSION in the
# caller's scope, from the header's FLASHCL_VERSION_* macros, the
# version's one source (flashcl_version_string() returns them).
# SOVERSION follows the README's ABI policy: MAJOR.MINOR while MAJOR is 0
# (every 0.x minor may break the ABI), MAJOR from 1.0 on.
# Used by the build (CMakeLists.txt) and by the tests that check the
# package, pkg-config file, library file names and Python against it.
function(flashcl_header_version header prefix)
  file(STRINGS "${header}" lines
       REGEX "^#define FLASHCL_VERSION_(MAJOR|MINOR|PATCH) +[0-9]+$")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "FLASHCL_VERSION_${part} +([0-9]+)" _ "${lines}")
    if(CMAKE_MATCH_1 STREQUAL "")
      message(FATAL_ERROR "${header}: no #define FLASHCL_VERSION_${part} <number>")
    endif()
    set(${part} ${CMAKE_MATCH_1})
    set(${prefix}_${part} ${CMAKE_MATCH_1} PARENT_SCOPE)
  endforeach()
  set(${prefix} "${MAJOR}.${MINOR}.${PATCH}" PARENT_SCOPE)
  if(MAJOR EQUAL 0)
    set(${prefix}_SOVERSION "${MAJOR}.${MINOR}" PARENT_SCOPE)
  else()
    set(${prefix}_SOVERSION "${MAJOR}" PARENT_SCOPE)
  endif()
endfunction()
