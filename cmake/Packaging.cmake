# Packaging: pkg-config and CMake package files, man pages, licence and
# documentation, and a Debian package (`cpack -G DEB` in the build tree).
# Included from the top-level CMakeLists.txt after the libraries' install().
include(CMakePackageConfigHelpers)

# Relative paths from where the files land to the prefix: the trees stay
# relocatable (a .deb installs under /usr, `cmake --install` under
# CMAKE_INSTALL_PREFIX, an init container copies the tree anywhere).
set(SS_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
set(SS_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/stackshot)
file(RELATIVE_PATH SS_PC_TO_PREFIX /p/${SS_PC_DIR} /p)
file(RELATIVE_PATH SS_CMAKE_TO_PREFIX /p/${SS_CMAKE_DIR} /p)
configure_file(${CMAKE_CURRENT_LIST_DIR}/stackshot.pc.in
  ${CMAKE_BINARY_DIR}/stackshot.pc @ONLY)
configure_file(${CMAKE_CURRENT_LIST_DIR}/stackshot-config.cmake.in
  ${CMAKE_BINARY_DIR}/stackshot-config.cmake @ONLY)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/stackshot-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/stackshot.pc DESTINATION ${SS_PC_DIR})
install(FILES ${CMAKE_BINARY_DIR}/stackshot-config.cmake
  ${CMAKE_BINARY_DIR}/stackshot-config-version.cmake DESTINATION ${SS_CMAKE_DIR})

install(FILES docs/man/stackshot.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES docs/man/stackshot.7 DESTINATION ${CMAKE_INSTALL_MANDIR}/man7)
install(FILES LICENSE README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
  FILES_MATCHING PATTERN "*.md")
install(DIRECTORY examples/otel-collector examples/container
  DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

set(CPACK_PACKAGE_NAME stackshot)
set(CPACK_PACKAGE_VENDOR stackshot)
set(CPACK_PACKAGE_CONTACT "stackshot maintainers <stackshot@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "in-process profiling agent for native programs and JVMs")
set(CPACK_PACKAGE_DESCRIPTION
  "stackshot takes the call stack of every thread of a process at an interval, preloaded into native programs or loaded into a JVM, and sends the stacks to OpenTelemetry, Splunk Observability, Qubership, Zorka or local files. The stackshot command runs programs with the agent and attaches it to running JVMs.")
set(CPACK_RESOURCE_FILE_LICENSE ${CMAKE_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# the core and the modules are opened by path next to the loader
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
  ${CMAKE_BINARY_DIR} ${CMAKE_BINARY_DIR}/exporters)
include(CPack)
