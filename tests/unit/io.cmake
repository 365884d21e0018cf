# tests of src/io (see tests/unit/CMakeLists.txt). The test file goes to $GMLX_IO_TEST_DIR
# (default /var/tmp): /tmp may be tmpfs, which refuses O_DIRECT.
gm_test(test_io SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_io.c LIBS gmlx_io gm_testutil
        LABELS unit)
