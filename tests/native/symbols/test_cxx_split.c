/* test_cxx_split.c: demangled C++ names split into namespace/class and
 * function name (samplers/symbols_demangle.c), and demangling through the
 * process's own C++ runtime (this test links libstdc++ through its C++
 * helper library). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "samplers/symbols_demangle.h"

#include <stdlib.h>
#include <string.h>

static void check(const char *demangled, const char *want_ns, const char *want_name) {
    char ns[256], name[256];
    ss_cxx_split(demangled, ns, sizeof ns, name, sizeof name);
    if (strcmp(ns, want_ns) != 0 || strcmp(name, want_name) != 0)
        fail_msg("%s -> [%s] [%s], want [%s] [%s]", demangled, ns, name, want_ns,
                 want_name);
}

static void test_split(void **state) {
    (void)state;
    check("main", "global", "main");
    check("foo(int)", "global", "foo");
    check("ns::Class::method(int, char const*) const", "ns::Class", "method");
    check("std::vector<int, std::allocator<int> >::push_back(int const&)",
          "std::vector<int, std::allocator<int> >", "push_back");
    check("demo::Box<int>::get_twice() const", "demo::Box<int>", "get_twice");
    /* template function: template args kept, return type dropped */
    check("int ns::convert<ns::A::B>(ns::A::B const&)", "ns", "convert<ns::A::B>");
    check("(anonymous namespace)::helper(int)", "(anonymous namespace)", "helper");
    check("ns::Cls::operator<(ns::Cls const&) const", "ns::Cls", "operator<");
    check("ns::Cls::operator()(int)", "ns::Cls", "operator()");
    check("ns::Cls::operator<<(std::ostream&)", "ns::Cls", "operator<<");
    check("operator new[](unsigned long)", "global", "operator new[]");
    check("ns::Cls::operator std::string() const", "ns::Cls", "operator std::string");
    check("ns::f()::{lambda(int)#1}::operator()(int) const", "ns::f()::{lambda(int)#1}",
          "operator()");
    check("vtable for ns::Cls", "ns", "Cls");
    /* truncated to the buffers, always terminated */
    char ns[4], name[3];
    ss_cxx_split("abcdef::ghijkl()", ns, sizeof ns, name, sizeof name);
    assert_string_equal(ns, "abc");
    assert_string_equal(name, "gh");
}

int cpp_call_method(int x); /* cpp_helper.cpp: keeps libstdc++ loaded */

static void test_demangle(void **state) {
    (void)state;
    assert_int_equal(cpp_call_method(2), 4);
    char *d = ss_demangle("_ZNK4demo3BoxIiE9get_twiceEv", false);
    assert_non_null(d);
    assert_string_equal(d, "demo::Box<int>::get_twice() const");
    free(d);
    assert_null(ss_demangle("nanosleep", false));  /* not C++ */
    assert_null(ss_demangle("_Zgarbage!", false)); /* not a valid name */
    assert_null(ss_demangle(NULL, false));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_demangle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
