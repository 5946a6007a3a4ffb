// cpp_helper.cpp: a C++ method in a namespace and a class template, for
// the demangling test. cpp_method_ra() returns a return address inside
// demo::Box<int>::get_twice() const and the line of that call.
#include <cstdint>

extern "C" {
int cpp_line;
uint64_t cpp_ra;
}

__attribute__((noinline)) static void cpp_capture() {
    cpp_ra = (uint64_t)(uintptr_t)__builtin_return_address(0);
    __asm__ volatile("" ::: "memory");
}

namespace demo {
template <typename T> struct Box {
    T v;
    __attribute__((noinline)) T get_twice() const;
};

template <typename T> T Box<T>::get_twice() const {
    cpp_line = __LINE__; cpp_capture();
    return v * 2;
}
} // namespace demo

// Internal linkage: DWARF gives such functions no linkage name, only
// "twice"; the resolver rebuilds the scope from the DIE tree. The lambda
// has a (mangled) symbol of its own.
extern "C" {
int cpp_inline_line, cpp_lambda_line;
uint64_t cpp_inline_ra, cpp_lambda_ra;
}

__attribute__((noinline)) static void cpp_capture_to(uint64_t *where) {
    *where = (uint64_t)(uintptr_t)__builtin_return_address(0);
    __asm__ volatile("" ::: "memory");
}

namespace outer {
namespace {
struct Widget {
    static inline __attribute__((always_inline)) int twice(int x) {
        cpp_inline_line = __LINE__; cpp_capture_to(&cpp_inline_ra);
        return 2 * x;
    }
};
} // namespace

__attribute__((noinline)) int use(int x) {
    int r = Widget::twice(x);
    auto l = [&](int y) __attribute__((noinline)) {
        cpp_lambda_line = __LINE__; cpp_capture_to(&cpp_lambda_ra);
        return y + r;
    };
    return l(x);
}
} // namespace outer

extern "C" int cpp_call_scopes(int x) { return outer::use(x); }

// operator new/delete come from libstdc++: the library really needs it
// (a library using nothing of it would not keep it as a dependency).
extern "C" int cpp_call_method(int x) {
    demo::Box<int> *b = new demo::Box<int>{x};
    int r = b->get_twice();
    delete b;
    return r;
}
