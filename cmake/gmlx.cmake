# Shared compile settings and helpers for every gmlx target.
set(GMLX_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes
    -Wmissing-prototypes -Wno-unused-parameter)
if(GMLX_WERROR)
  list(APPEND GMLX_WARNINGS -Werror)
endif()

if(GMLX_SANITIZE)
  add_compile_options("$<$<COMPILE_LANGUAGE:C>:-fsanitize=address,undefined;-fno-omit-frame-pointer;-fno-sanitize-recover=undefined>")
  add_link_options(-fsanitize=address,undefined)
endif()

if(GMLX_TSAN)
  if(GMLX_SANITIZE)
    message(FATAL_ERROR "GMLX_TSAN and GMLX_SANITIZE cannot be combined: ThreadSanitizer and AddressSanitizer exclude each other")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C>:-fsanitize=thread;-fno-omit-frame-pointer>")
  add_link_options(-fsanitize=thread)
endif()

if(GMLX_NATIVE)
  add_compile_options("$<$<COMPILE_LANGUAGE:C>:-march=native>")
endif()

# _GNU_SOURCE for O_DIRECT, mlock2, sched_getaffinity; the code stays C11 otherwise.
add_compile_definitions(_GNU_SOURCE)

# Module walls: a module's include path holds its own folder and the folders of the modules it
# links (DEPS, PRIVATE_DEPS, and theirs in turn), nothing else, so "stream/feeder.h" does not
# compile in a module below stream. Each module publishes a folder of the build tree holding one
# link, to src/NAME, so that the usual "NAME/header.h" spelling resolves; linking a module hands
# its folder on to whatever links it.
set(GMLX_WALLS_DIR ${PROJECT_BINARY_DIR}/module-walls)

# gm_module(NAME SOURCES... DEPS ...): a static library for one src/ module.
function(gm_module name)
  cmake_parse_arguments(M "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(gmlx_${name} STATIC ${M_SOURCES})
  file(MAKE_DIRECTORY ${GMLX_WALLS_DIR}/${name})
  if(NOT EXISTS ${GMLX_WALLS_DIR}/${name}/${name})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${name} ${GMLX_WALLS_DIR}/${name}/${name} SYMBOLIC)
  endif()
  target_include_directories(gmlx_${name} PUBLIC ${GMLX_WALLS_DIR}/${name} ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(gmlx_${name} PRIVATE ${GMLX_WARNINGS})
  if(M_DEPS)
    target_link_libraries(gmlx_${name} PUBLIC ${M_DEPS})
  endif()
  if(M_PRIVATE_DEPS)
    target_link_libraries(gmlx_${name} PRIVATE ${M_PRIVATE_DEPS})
  endif()
endfunction()

# Every test's time limit: a hung test (a deadlock) fails on its own instead of using up the whole
# CI run without naming itself. The slowest test takes about a minute under ASan.
set(GMLX_TEST_TIMEOUT 900)

# gm_test(NAME SOURCES... LIBS ... [LABELS ...]): a cmocka test registered with ctest.
function(gm_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_compile_options(${name} PRIVATE ${GMLX_WARNINGS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include
                             ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${T_LIBS} PkgConfig::CMOCKA)
  add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "GMLX_FIXTURES=${PROJECT_SOURCE_DIR}/tests/fixtures;GMLX_FIXTURE_CACHE=${PROJECT_SOURCE_DIR}/.fixtures;GMLX_BIN_DIR=${PROJECT_BINARY_DIR}"
    SKIP_RETURN_CODE 77 TIMEOUT ${GMLX_TEST_TIMEOUT})
  if(name IN_LIST GMLX_THREADED_TESTS)
    list(APPEND T_LABELS threaded)
  endif()
  if(T_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()


# A relative include that climbs out of its folder ("../server/server.h") would pass through any
# wall: refused when the build is configured.
file(GLOB_RECURSE GMLX_ALL_SOURCES ${PROJECT_SOURCE_DIR}/src/*.c ${PROJECT_SOURCE_DIR}/src/*.h)
foreach(f ${GMLX_ALL_SOURCES})
  file(STRINGS ${f} climbs REGEX "^[ \t]*#[ \t]*include[ \t]*\"\\.\\./")
  if(climbs)
    message(FATAL_ERROR "${f}: an #include climbs out of its module's folder (${climbs}); "
            "include a module's header through its include path, as \"module/header.h\"")
  endif()
endforeach()
