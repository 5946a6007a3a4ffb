/* symbols_demangle.h: C++ names for the symbol resolver (private to
 * samplers/). */
#ifndef SS_SYMBOLS_DEMANGLE_H
#define SS_SYMBOLS_DEMANGLE_H

#include <stdbool.h>
#include <stddef.h>

/* Demangle an Itanium C++ name ("_Z...") with the agent's own demangler,
 * or where it does not cover the name, with the process's own C++
 * runtime (__cxa_demangle of libstdc++ or libc++abi, found only if it is
 * already loaded: the agent links no C++ runtime). Returns a malloc'd
 * string, or NULL when `mangled` is not a C++ name neither can read.
 * `refresh`: look the runtime up again (after a dlopen). */
char *ss_demangle(const char *mangled, bool refresh);

/* The agent's own demangler alone, into `out` (no allocation): the
 * length written, -EINVAL for a name it does not cover (or not a C++
 * name), -ENOSPC when `size` is too small. */
int ss_demangle_into(const char *mangled, char *out, size_t size);

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
