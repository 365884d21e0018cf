# tests of base (see tests/unit/CMakeLists.txt)
