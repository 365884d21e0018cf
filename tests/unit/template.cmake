# tests of the chat-template renderer (see tests/unit/CMakeLists.txt)
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/test_template.c)
  gm_test(test_template
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_template.c
    LIBS gmlx_template gm_testutil PkgConfig::JANSSON LABELS unit)
endif()
