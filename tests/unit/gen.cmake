# tests of gen (see tests/unit/CMakeLists.txt)
