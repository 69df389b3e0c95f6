/* A shared library of a user's, for the tests of exemptions by program: it does nothing but
 * be loaded. Built with -DHIDE, it renames its own LD_PRELOAD entry to XD_PRELOAD once loaded,
 * so that /proc/PID/environ no longer names it (the library stays mapped). */
#include <string.h>

extern char **environ;

__attribute__((constructor)) static void loaded(void)
{
#ifdef HIDE
    for (char **entry = environ; *entry; ++entry)
        if (strncmp(*entry, "LD_PRELOAD=", 11) == 0)
            (*entry)[0] = 'X';
#endif
}
