/* grpc_cpus.c: gRPC's thread pool sized for one call per interval.
 *
 * gRPC sizes its event engine's thread pool from the number of CPUs
 * (libgpr's gpr_cpu_num_cores: sysconf(_SC_NPROCESSORS_CONF), clamped to
 * 2..32) and starts those threads at its first call. On a 32-CPU server
 * the default exporter (otlp_logs over gRPC) added 36 threads to every
 * profiled process (32 "event_engine", 4 others), each counted against
 * the host's pids limit (RLIMIT_NPROC, a container's pids.max) and each
 * flushing TLBs at every fork of the host, for one call per interval.
 *
 * The module is opened RTLD_DEEPBIND (core/module_dl.c): the libraries it
 * brings (gRPC's, and libgpr among them) look symbols up in the module
 * before libc, so this sysconf is theirs. It answers 2 for the number of
 * CPUs (the pool's least) and passes every other name to libc. A process
 * that had gRPC loaded before the module keeps gRPC's own answer (its
 * libraries were bound already), as does a core opened without
 * RTLD_DEEPBIND. Exported by the module's version script
 * (grpc_module.map). */
#include <unistd.h>

/* libc's sysconf under its other exported name */
extern long __sysconf(int name);

#define GRPC_CPUS 2

__attribute__((visibility("default"))) long sysconf(int name) {
    if (name == _SC_NPROCESSORS_CONF || name == _SC_NPROCESSORS_ONLN) {
        long n = __sysconf(name);
        return n > GRPC_CPUS ? GRPC_CPUS : n;
    }
    return __sysconf(name);
}
