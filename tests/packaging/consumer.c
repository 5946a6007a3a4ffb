/* A program built against the installed stackshot (pkg-config or CMake's
 * find_package): links libstackshot.so.0 and calls its public API. */
#include <stackshot.h>
#include <stdio.h>

int main(void) {
    printf("stackshot %s\n", stackshot_version());
    return 0;
}
