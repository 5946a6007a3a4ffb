/*
 * stackshot: run a program with the agent, load the agent into a running
 * JVM and stop it there, decode what the agent wrote. Subcommands: run.c,
 * attach.c (attach, stop), and the decoder of tools/stackshot-dump/
 * (`stackshot dump`).
 */
#include "tools/stackshot/stackshot.h"
#include "agent/version.h"

#include <stdio.h>
#include <string.h>

static const char help[] =
    "usage: stackshot COMMAND [options] ...\n"
    "Profile programs with the stackshot agent (see stackshot(1), keys in stackshot(7)).\n"
    "  run [options] [--] PROGRAM [ARGS...]   run a native program or a JVM with the agent\n"
    "  attach PID [options]                   load the agent into a running HotSpot JVM\n"
    "  dump [options] FILE...                 decode Qubership streams or Zorka bodies\n"
    "  stop PID                               stop the agent's sampling in a JVM (it runs on)\n"
    "  help [COMMAND], --help, --version\n"
    "`stackshot COMMAND --help` describes each command.\n";

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs("stackshot: a command is needed: run, attach, stop, dump (see stackshot --help)\n",
              stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") ||
        (!strcmp(cmd, "help") && argc == 2)) {
        fputs(help, stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V") || !strcmp(cmd, "version")) {
        printf("stackshot %s\n", SS_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help")) { /* help COMMAND: COMMAND --help */
        static char dash_help[] = "--help";
        static char *h[3];
        h[0] = argv[2];
        h[1] = dash_help;
        argc = 2;
        argv = h;
        cmd = h[0];
    } else {
        argc--;
        argv++;
    }
    if (!strcmp(cmd, "run"))
        return ss_cmd_run(argc, argv);
    if (!strcmp(cmd, "attach"))
        return ss_cmd_attach(argc, argv);
    if (!strcmp(cmd, "dump"))
        return ss_dump_main(argc, argv);
    if (!strcmp(cmd, "stop"))
        return ss_cmd_stop(argc, argv);
    fprintf(stderr, "stackshot: unknown command '%s' (see stackshot --help)\n", cmd);
    return 2;
}
