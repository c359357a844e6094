# The engine's layers, checked: every #include "core/..." or "gpu/..." in the engine's and the GPU
# code's sources must be one its layer may see. Runs at every build (core/CMakeLists.txt) and in CTest
# (tests/check_layers_test.cmake, which also shows it failing on a crossing include).
#   cmake -DROOT=<repository root> -P tools/check_layers.cmake
# Each folder may include the prefixes listed for it (and nothing of app/ or views/):
set(allow_core_base    "core/base/")
set(allow_core_io      "core/base/;core/io/")
set(allow_core_cluster "core/base/;core/io/;core/cluster/")
set(allow_core_lm      "core/base/;core/io/;core/cluster/;core/lm/")
set(allow_core_store   "core/base/;core/store/")
set(allow_core_decode  "core/base/;core/io/;core/cluster/;core/lm/;core/decode/")
# jobs build the runs' records, so they see the store and every engine library, and nothing of the
# GPU side: the decode benchmark's data is core/decode's, the same for both backends.
set(allow_core_jobs    "core/")
set(allow_gpu_device   "core/base/;gpu/device/")
set(allow_gpu_cluster  "core/base/;core/io/;core/cluster/;gpu/device/;gpu/cluster/")
set(allow_gpu_decode   "core/base/;core/io/;core/cluster/;core/lm/;core/decode/;gpu/device/;gpu/decode/")
set(allow_gpu_emulator "core/base/;gpu/")
# The Qt views display what core produced and never reach the GPU side.
set(allow_views        "core/;views/")
# The Python package binds the engine alone: no GPU code (its wheel has no CUDA), no Qt.
set(allow_app_python   "core/;app/python/")
set(layers core/base core/io core/cluster core/lm core/decode core/store core/jobs gpu/device gpu/cluster gpu/decode gpu/emulator
    views app/python)

if(NOT ROOT)
  message(FATAL_ERROR "check_layers: -DROOT=<repository root> is required")
endif()
set(problems "")
# Every source under core/ and gpu/ belongs to a layer: a file elsewhere there is not checked, so it
# is refused (a new folder is a new layer, and gets its line above).
file(GLOB_RECURSE engine RELATIVE "${ROOT}" "${ROOT}/core/*" "${ROOT}/gpu/*")
foreach(src ${engine})
  if(NOT src MATCHES "\\.(h|hpp|cpp|cc|cu|cuh|in)$")
    continue() # CMakeLists.txt and the like
  endif()
  set(known FALSE)
  foreach(layer ${layers})
    string(FIND "${src}" "${layer}/" at)
    if(at EQUAL 0)
      set(known TRUE)
    endif()
  endforeach()
  if(NOT known)
    string(APPEND problems "  ${src} is in no layer: put it in one of ${layers}, or add a layer here\n")
  endif()
endforeach()
foreach(layer ${layers})
  string(REPLACE "/" "_" var "allow_${layer}")
  set(allowed "${${var}}")
  file(GLOB_RECURSE sources RELATIVE "${ROOT}" "${ROOT}/${layer}/*.h" "${ROOT}/${layer}/*.hpp" "${ROOT}/${layer}/*.cpp"
       "${ROOT}/${layer}/*.cc" "${ROOT}/${layer}/*.cu" "${ROOT}/${layer}/*.cuh" "${ROOT}/${layer}/*.in")
  foreach(src ${sources})
    file(STRINGS "${ROOT}/${src}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]*)[>\"].*" "\\1" inc "${line}")
      if(inc MATCHES "(^|/)\\.\\.(/|$)")
        string(APPEND problems "  ${src} includes \"${inc}\": include by the path from the repository root, not ../\n")
        continue()
      endif()
      if(NOT inc MATCHES "^(core|gpu|app|views|tests|tools|fuzz)/")
        continue() # a header of the same folder, the emulator's CUDA headers, or a third-party one
      endif()
      set(ok FALSE)
      foreach(prefix ${allowed})
        string(LENGTH "${prefix}" n)
        string(SUBSTRING "${inc}" 0 ${n} head)
        if(head STREQUAL prefix)
          set(ok TRUE)
        endif()
      endforeach()
      if(NOT ok)
        string(APPEND problems "  ${src} includes \"${inc}\": ${layer} may include only ${allowed}\n")
      endif()
    endforeach()
  endforeach()
endforeach()
if(problems)
  message(FATAL_ERROR "check_layers: includes that cross the engine's layers (see core/CMakeLists.txt):\n${problems}")
endif()
