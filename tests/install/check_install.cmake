# cmake --install the build tree into a scratch prefix, then configure, build
# and run tests/install as an outside project using find_package(fno).
# Inputs: FNO_BUILD_DIR, SOURCE_DIR, WORK_DIR, PREFIX_PATH (where Torch is).
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install ${FNO_BUILD_DIR} --prefix ${WORK_DIR}/prefix)
# (not through run(): its argument list would split the prefix path at ';')
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -G Ninja
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix;${PREFIX_PATH}"
    --log-level=ERROR RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer project failed (${rc})")
endif()
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
