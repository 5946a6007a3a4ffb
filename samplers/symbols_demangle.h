/* symbols_demangle.h: C++ names for the symbol resolver (private to
 * samplers/). */
#ifndef SS_SYMBOLS_DEMANGLE_H
#define SS_SYMBOLS_DEMANGLE_H

#include <stdbool.h>
#include <stddef.h>

/* Demangle an Itanium C++ name ("_Z...") with the process's own C++
 * runtime (__cxa_demangle of libstdc++ or libc++abi, found only if it is
 * already loaded: the agent links no C++ runtime). Returns a malloc'd
 * string, or NULL when `mangled` is not a C++ name or no runtime is
 * loaded. `refresh`: look the runtime up again (after a dlopen). */
char *ss_demangle(const char *mangled, bool refresh);

/* After a dlopen: look for the runtime again on the next C++ name if it
 * was not found before. */
void ss_demangle_reset(void);

/* Split a demangled name into namespace/class and function name:
 * "ns::Class<int>::method(int) const" -> "ns::Class<int>", "method".
 * The parameter list and a leading return type are dropped, template
 * arguments kept. A name without a scope gets ns "global". Results are
 * truncated to the buffer sizes (both > 0). */
void ss_cxx_split(const char *demangled, char *ns, size_t ns_size,
                  char *name, size_t name_size);

#endif /* SS_SYMBOLS_DEMANGLE_H */
