# GORO_SANITIZE: build goro, and everything linked with it, under sanitizers.
#
#   cmake -S . -B build-address-undefined -DGORO_SANITIZE=address,undefined
#
# Values: a comma-separated list of address, undefined and thread (thread
# cannot be combined with address). The flags are PUBLIC on the goro target,
# so tests, tools, examples and find_package(goro) consumers get them too.
# UBSan stops at the first report (-fno-sanitize-recover), like ASan and TSan.
# See docs/sanitizers.md.
set(GORO_SANITIZE "" CACHE STRING
    "Sanitizers for goro and everything linked with it: a comma list of address, undefined, thread")

if(GORO_SANITIZE)
  string(REPLACE "," ";" _goro_san_list "${GORO_SANITIZE}")
  set(_goro_san_flags "")
  foreach(_s IN LISTS _goro_san_list)
    string(STRIP "${_s}" _s)
    if(NOT _s MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "goro: GORO_SANITIZE=\"${GORO_SANITIZE}\": unknown sanitizer \"${_s}\" "
                          "(expected a comma list of address, undefined, thread)")
    endif()
    list(APPEND _goro_san_flags "-fsanitize=${_s}")
    if(_s STREQUAL "undefined")
      list(APPEND _goro_san_flags "-fno-sanitize-recover=undefined")
    endif()
  endforeach()
  if("thread" IN_LIST _goro_san_list AND "address" IN_LIST _goro_san_list)
    message(FATAL_ERROR "goro: GORO_SANITIZE=\"${GORO_SANITIZE}\": thread and address "
                        "cannot be combined (use address,undefined or thread)")
  endif()
  list(REMOVE_DUPLICATES _goro_san_flags)
  if("thread" IN_LIST _goro_san_list)
    # Debian's Abseil is not built with TSan: tell TSan about its Mutex.
    target_sources(goro PRIVATE core/tsan_absl.cc)
    target_link_libraries(goro PRIVATE ${CMAKE_DL_LIBS})
  endif()
  target_compile_options(goro PUBLIC
    "$<$<COMPILE_LANGUAGE:C,CXX>:${_goro_san_flags};-fno-omit-frame-pointer>")
  # The sigaltstack interposer: the sanitizers' runtimes call sigaltstack
  # while they start, before instrumented code may run (TSan's function-entry
  # hook, which no_sanitize does not remove, crashes there). It is told which
  # sanitizers the rest is built with, so that it sees the same G and M
  # (core/sanitizer.h adds their fiber fields).
  set(_goro_san_defs "")
  if("thread" IN_LIST _goro_san_list)
    list(APPEND _goro_san_defs GORO_TSAN=1)
  endif()
  if("address" IN_LIST _goro_san_list)
    list(APPEND _goro_san_defs GORO_ASAN=1)
  endif()
  set_source_files_properties(signals/altstack.cc PROPERTIES
    COMPILE_OPTIONS "-fno-sanitize=all" COMPILE_DEFINITIONS "${_goro_san_defs}")
  target_link_options(goro PUBLIC ${_goro_san_flags})
  message(STATUS "goro: sanitizers: ${GORO_SANITIZE}")
endif()
