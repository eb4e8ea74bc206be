# ctest helper (test portable_kernels_build): configures the project with PI_PORTABLE=ON in
# BIN and builds pi_kernels. There each ISA file gets only its own flags (no -march=native
# to supply a missing one), so this catches an intrinsic whose -m flag the file list lacks,
# which the native build on a CPU that has the feature cannot see.
if(NOT SRC OR NOT BIN OR NOT GEN)
  message(FATAL_ERROR "usage: cmake -DSRC=<source> -DBIN=<build dir> -DGEN=<generator> -P build_portable_kernels.cmake")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${BIN} -G ${GEN} -DCMAKE_BUILD_TYPE=Release
          -DPI_PORTABLE=ON -DPI_BUILD_TESTS=OFF -DPI_BUILD_BENCH=OFF
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "portable configure failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN} --target pi_kernels RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "portable build of pi_kernels failed (${rc})")
endif()
