# tests of plan (see tests/unit/CMakeLists.txt)
