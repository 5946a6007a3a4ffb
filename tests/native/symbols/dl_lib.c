/* dl_lib.c: built twice, as libsym_a.so (SYM_FUNC=sym_a_func) and
 * libsym_b.so (SYM_FUNC=sym_b_func), same code and layout, so that B
 * dlopen'ed after A's dlclose usually lands at A's old address. */
int SYM_FUNC(int x);
__attribute__((noinline)) int SYM_FUNC(int x) {
    return x * 7 + 1;
}
