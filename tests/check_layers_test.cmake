# The layer check, checked: the repository's tree passes, and a copy of it in which an algorithm
# (core/cluster) includes the run store fails with the file named.
#   cmake -DROOT=<repository root> -DWORK=<scratch directory> -P tests/check_layers_test.cmake
execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${ROOT} -P ${ROOT}/tools/check_layers.cmake
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the repository fails its own layer check:\n${out}${err}")
endif()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
file(COPY ${ROOT}/core ${ROOT}/gpu DESTINATION ${WORK})
file(WRITE ${WORK}/core/cluster/reaches_the_store.cpp
     "#include \"core/cluster/clustering.h\"\n#include \"core/store/run_store.h\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK} -P ${ROOT}/tools/check_layers.cmake
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "the layer check passed a cluster source that includes the run store")
endif()
if(NOT err MATCHES "core/cluster/reaches_the_store.cpp includes \"core/store/run_store.h\"")
  message(FATAL_ERROR "the layer check failed without naming the file and include:\n${err}")
endif()

# The same for the GPU side: decode may not see the store either.
file(REMOVE ${WORK}/core/cluster/reaches_the_store.cpp)
file(WRITE ${WORK}/gpu/decode/records.cpp "#include \"core/jobs/run_records.h\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK} -P ${ROOT}/tools/check_layers.cmake
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "gpu/decode/records.cpp")
  message(FATAL_ERROR "the layer check passed gpu/decode including core/jobs:\n${err}")
endif()
file(REMOVE ${WORK}/gpu/decode/records.cpp)

# The ways around the include-by-path rule are refused too: angle brackets, ../, a folder of no
# layer, and the views reaching the GPU side.
file(COPY ${ROOT}/views DESTINATION ${WORK})
foreach(case
    "core/lm/angle.cpp|#include <core/store/run_store.h>|core/lm/angle.cpp includes \"core/store/run_store.h\""
    "core/lm/up.cpp|#include \"../store/run_store.h\"|core/lm/up.cpp includes \"../store/run_store.h\""
    "core/misc/any.cpp|#include \"core/store/run_store.h\"|core/misc/any.cpp is in no layer"
    "views/gpu_view.cpp|#include \"gpu/device/device.h\"|views/gpu_view.cpp includes \"gpu/device/device.h\"")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 file)
  list(GET parts 1 text)
  list(GET parts 2 expect)
  file(WRITE ${WORK}/${file} "${text}\n")
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK} -P ${ROOT}/tools/check_layers.cmake
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(FIND "${err}" "${expect}" at)
  if(rc EQUAL 0 OR at EQUAL -1)
    message(FATAL_ERROR "the layer check passed ${file} (${text}):\n${err}")
  endif()
  file(REMOVE ${WORK}/${file})
endforeach()
file(REMOVE_RECURSE ${WORK})
message(STATUS "layer check: the tree passes; a crossing include is refused, naming the file")
