# Sanitizer and fuzzer runs. Each makes its own side build inside this build directory
# (with FERRY_SANITIZE or FERRY_FUZZ) and runs there; see integration/sanitize and
# integration/fuzz.
add_test(NAME sanitize.address
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/sanitize address ${CMAKE_BINARY_DIR}/sanitize-address)
add_test(NAME sanitize.thread
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/sanitize thread ${CMAKE_BINARY_DIR}/sanitize-thread)
set_tests_properties(sanitize.address sanitize.thread PROPERTIES LABELS sanitize TIMEOUT 900)

set(FERRY_FUZZ_SECONDS 60 CACHE STRING "how long ctest runs each fuzz target")
add_test(NAME fuzz.build COMMAND ${CMAKE_CURRENT_LIST_DIR}/fuzz build ${CMAKE_BINARY_DIR}/fuzz)
set_tests_properties(fuzz.build PROPERTIES LABELS fuzz TIMEOUT 600 FIXTURES_SETUP fuzzers)
foreach(target wire_private_data wire_control records tcp_resume)
  add_test(NAME fuzz.${target}
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/fuzz run ${CMAKE_BINARY_DIR}/fuzz ${target} ${FERRY_FUZZ_SECONDS})
  set_tests_properties(fuzz.${target} PROPERTIES LABELS fuzz TIMEOUT 300 FIXTURES_REQUIRED fuzzers)
endforeach()

# crash_helper dereferences a null pointer on purpose: its tests check the signal and
# ferry's backtrace, which a sanitizer's report of that store would replace.
if(FERRY_SANITIZE AND TARGET crash_helper)
  target_compile_options(crash_helper PRIVATE -fno-sanitize=null)
endif()
