# tests of cli (see tests/unit/CMakeLists.txt)
