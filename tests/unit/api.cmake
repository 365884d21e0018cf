# tests of the public API's pieces that need no model (see tests/unit/CMakeLists.txt)
gm_test(test_think SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_think.c LIBS gmlx_api LABELS unit)
