# tests of the decode arena's replacement policy (src/stream/policy.c) and of the routing-trace
# replay tool (tools/replay) that measures it against LRU and Belady's optimum.
gm_test(test_policy SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_policy.c LIBS gmlx_stream LABELS unit)
if(TARGET gmlx_replay)
  gm_test(test_policy_replay SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_policy_replay.c
          LIBS gmlx_replay gm_testutil LABELS unit)
  add_test(NAME replay_cli COMMAND sh ${PROJECT_SOURCE_DIR}/tools/replay/test_cli.sh
           $<TARGET_FILE:gmlx-replay>)
  set_tests_properties(replay_cli PROPERTIES LABELS unit TIMEOUT ${GMLX_TEST_TIMEOUT})
endif()
# the memory-pressure state machine and its reading of PSI / meminfo (src/stream/pressure.c)
gm_test(test_pressure SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_pressure.c LIBS gmlx_stream gm_testutil LABELS unit)
# the lossy levers' rules: expert mass, miss-shed, layer-shed draws, the probe (src/stream/shed.c)
gm_test(test_shed SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_shed.c LIBS gmlx_stream LABELS unit)
# the thread that maps the decode arena's pages ahead of use (src/stream/warm.c)
gm_test(test_warm SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_warm.c LIBS gmlx_stream LABELS unit)
# lookup-table rows read from the file on demand (src/stream/table.c)
gm_test(test_table SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_table.c LIBS gmlx_stream gm_testutil LABELS unit)
