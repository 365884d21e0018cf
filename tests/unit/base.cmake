gm_test(test_sysinfo SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_sysinfo.c LIBS gmlx_base gm_testutil LABELS unit)
