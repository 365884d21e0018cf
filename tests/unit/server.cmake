# tests of the server's pieces that need no model (see tests/unit/CMakeLists.txt): the tool-call
# parsers, linked alone (gmlx_toolcall, src/server/CMakeLists.txt), checked against the templates'
# golden renderings in tests/fixtures/templates
gm_test(test_toolcall
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_toolcall.c
  LIBS gmlx_toolcall gm_testutil PkgConfig::JANSSON LABELS unit)
