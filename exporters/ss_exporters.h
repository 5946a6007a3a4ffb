/*
 * ss_exporters.h: what exporters/ offers the rest of the agent and its
 * tests.
 *
 *   - the exporter table (ss_exporter_table, declared in agent/exporter.h, filled
 *     in registry.c): one row per exporter;
 *   - the shared pieces of exporters/common/ (common.h): the thread-dump
 *     text of one thread, safe local output files, gzip.
 *
 * Layers, each using only the ones below it: common/ (gzip, protobuf
 * writer, output files, text format, the profile aggregate and pprof),
 * otlp/ (OTLP endpoint, transport, retry, resource), and one folder per
 * exporter (text/, otlp_logs/, profiles/, qubership/), which never include
 * one another.
 */
#ifndef SS_EXPORTERS_H
#define SS_EXPORTERS_H

#include "exporters/common/common.h"

#endif /* SS_EXPORTERS_H */
