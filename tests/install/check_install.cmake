# cmake --install the build tree into a scratch prefix, then configure, build
# and run tests/install as an outside project using find_package(fno), and run
# the installed programs with no environment set.
# Inputs: FNO_BUILD_DIR, SOURCE_DIR, WORK_DIR, PREFIX_PATH (where Torch is),
# PROJECT_DIR (the source tree, for configs/darcy.yaml).
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

# The installed programs run from the prefix with no environment at all (env -i):
# their RPATH, not LD_LIBRARY_PATH, finds LibTorch.
set(bin ${WORK_DIR}/prefix/bin)
function(run_installed expect)
  execute_process(COMMAND env -i ${ARGN} WORKING_DIRECTORY ${WORK_DIR}
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "${expect}")
    message(FATAL_ERROR "installed program failed (exit ${rc}, expected '${expect}' on stdout): "
                        "env -i ${ARGN}\nstdout: ${out}\nstderr: ${err}")
  endif()
  message(STATUS "ok: env -i ${ARGN}")
endfunction()
run_installed("--dry-run" ${bin}/fno_train --help)
run_installed("n_params 1192801"
  ${bin}/fno_train --config ${PROJECT_DIR}/configs/darcy.yaml --dry-run --out ${WORK_DIR}/dry_run)
run_installed("n_params 1192801" ${bin}/fno_bench --config ${PROJECT_DIR}/configs/darcy.yaml --dry-run)
run_installed("--subsample" ${bin}/fno_datagen --help)
run_installed("--gpu-memory-limit" ${bin}/fno_predict --help)
