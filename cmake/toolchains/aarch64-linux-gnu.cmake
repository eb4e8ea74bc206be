# Cross build for aarch64 Linux with Debian's cross compiler (g++-aarch64-linux-gnu: its libc and
# libstdc++ under /usr/aarch64-linux-gnu) and the arm64 libraries Debian multiarch installs in
# /usr/lib/aarch64-linux-gnu (GoogleTest: scripts/install-deps.sh --arm64; cpp-httplib's arm64
# package too for a build with the server, which scripts/build-arm64.sh leaves out).
# Programs built here run under qemu-aarch64 (Debian's qemu-user) as the cross-compiling
# emulator, so ctest and gtest_discover_tests work in the build directory as in a native one.
# Used by scripts/build-arm64.sh:
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# Libraries, headers and CMake packages come from the cross tree and the multiarch one
# (/usr/lib/aarch64-linux-gnu; the header-only packages in /usr/include and /usr/share serve
# every architecture); programs (ninja, pkg-config) from the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config reads the arm64 .pc files only (cpp-httplib's names its arm64 library).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)

# The programs run on the multiarch arm64 libc (/lib/ld-linux-aarch64.so.1, which the arm64
# libraries above depend on), so qemu gets no -L root: `-L /usr/aarch64-linux-gnu` would load
# the cross tree's ld.so with the multiarch libc.so when their Debian revisions differ, and
# then the first thread a program starts hangs.
find_program(PI_QEMU_AARCH64 qemu-aarch64)
if(PI_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${PI_QEMU_AARCH64})
endif()
