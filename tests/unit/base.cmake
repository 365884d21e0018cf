gm_test(test_sysinfo SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_sysinfo.c LIBS gmlx_base gm_testutil LABELS unit)
gm_test(test_strbuf SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_strbuf.c LIBS gmlx_base LABELS unit)
