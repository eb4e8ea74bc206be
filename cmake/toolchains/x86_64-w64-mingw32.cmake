# Cross build for 64-bit Windows with Debian's MinGW-w64 (g++-mingw-w64-x86-64-posix: the
# posix thread model, which std::thread needs). Programs built here run under Wine (Debian's
# wine64), set as the cross-compiling emulator so that ctest works in the build directory.
# Used by scripts/build-windows.sh:
#   cmake -S . -B build-windows -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/x86_64-w64-mingw32.cmake
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(CMAKE_C_COMPILER x86_64-w64-mingw32-gcc-posix)
set(CMAKE_CXX_COMPILER x86_64-w64-mingw32-g++-posix)
set(CMAKE_RC_COMPILER x86_64-w64-mingw32-windres)
# Self-contained programs: the C++ runtime and winpthreads linked in (no DLLs to ship).
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-static-libgcc -static-libstdc++")

# The header-only libraries (CLI11, nlohmann-json) come from the host's /usr/include, which a
# Windows build must not search as a whole (its libc headers are Linux's): they are linked into
# a folder of their own under the build tree, searched after the compiler's, and nlohmann-json's
# CMake package is found there (its include directory then points at that folder too).
set(PI_HOST_HEADERS "${CMAKE_BINARY_DIR}/host-headers")
foreach(link include/CLI:/usr/include/CLI include/nlohmann:/usr/include/nlohmann
             share/cmake/nlohmann_json:/usr/share/cmake/nlohmann_json)
  string(REPLACE ":" ";" pair "${link}")
  list(GET pair 0 name)
  list(GET pair 1 target)
  if(EXISTS "${target}" AND NOT EXISTS "${PI_HOST_HEADERS}/${name}")
    get_filename_component(parent "${PI_HOST_HEADERS}/${name}" DIRECTORY)
    file(MAKE_DIRECTORY "${parent}")
    file(CREATE_LINK "${target}" "${PI_HOST_HEADERS}/${name}" SYMBOLIC)
  endif()
endforeach()
set(CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES "${PI_HOST_HEADERS}/include")

set(CMAKE_FIND_ROOT_PATH /usr/x86_64-w64-mingw32 "${PI_HOST_HEADERS}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

find_program(PI_WINE64 wine64 HINTS /usr/lib/wine)
if(PI_WINE64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${PI_WINE64})
endif()
