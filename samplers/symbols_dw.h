/* symbols_dw.h: the libdw and libelf functions the resolver calls
 * (samplers/symbols*.c), through the table of the module that links those
 * libraries, libstackshot-dw.so (samplers/symbols_dw_module.c).
 *
 * The core does not link libdw: libdw, libelf and the compression
 * libraries they need (lzma, bz2: about 20 mappings) are mapped only while
 * the resolver holds libdw's tables. Every fork() of the host copies each
 * mapping of the process (about 1.5 us apiece, docs/safety/guest.md), and a
 * resolver whose addresses all hit its cache needs none of them: it
 * releases its tables after a while without a miss (symbols.c), and the
 * module is closed then (symbols_dw.c). The static core of tests and
 * benchmarks has the module linked in.
 *
 * After the libraries' own headers, each function's name stands for the
 * table's entry, so the resolver's code reads as plain libdw calls; it
 * must hold the module (ss_dw_hold) around them. A file that calls libdw
 * itself (the module, tests) defines SS_DW_DIRECT first. */
#ifndef SS_SYMBOLS_DW_H
#define SS_SYMBOLS_DW_H

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdint.h>

#define SS_DW_FUNCTIONS \
    SS_DW_FN(dwarf_attr) \
    SS_DW_FN(dwarf_attr_integrate) \
    SS_DW_FN(dwarf_child) \
    SS_DW_FN(dwarf_diename) \
    SS_DW_FN(dwarf_filesrc) \
    SS_DW_FN(dwarf_formref_die) \
    SS_DW_FN(dwarf_formstring) \
    SS_DW_FN(dwarf_formudata) \
    SS_DW_FN(dwarf_getelf) \
    SS_DW_FN(dwarf_getscopes_die) \
    SS_DW_FN(dwarf_getsrc_die) \
    SS_DW_FN(dwarf_getsrcfiles) \
    SS_DW_FN(dwarf_getsrclines) \
    SS_DW_FN(dwarf_haspc) \
    SS_DW_FN(dwarf_lineaddr) \
    SS_DW_FN(dwarf_lineendsequence) \
    SS_DW_FN(dwarf_lineno) \
    SS_DW_FN(dwarf_linesrc) \
    SS_DW_FN(dwarf_nextcu) \
    SS_DW_FN(dwarf_offdie) \
    SS_DW_FN(dwarf_onesrcline) \
    SS_DW_FN(dwarf_ranges) \
    SS_DW_FN(dwarf_siblingof) \
    SS_DW_FN(dwarf_srclang) \
    SS_DW_FN(dwarf_tag) \
    SS_DW_FN(dwelf_elf_gnu_build_id) \
    SS_DW_FN(dwfl_addrmodule) \
    SS_DW_FN(dwfl_begin) \
    SS_DW_FN(dwfl_end) \
    SS_DW_FN(dwfl_errmsg) \
    SS_DW_FN(dwfl_getmodules) \
    SS_DW_FN(dwfl_linux_proc_find_elf) \
    SS_DW_FN(dwfl_module_addrdie) \
    SS_DW_FN(dwfl_module_addrinfo) \
    SS_DW_FN(dwfl_module_build_id) \
    SS_DW_FN(dwfl_module_getdwarf) \
    SS_DW_FN(dwfl_module_getelf) \
    SS_DW_FN(dwfl_module_getsym_info) \
    SS_DW_FN(dwfl_module_getsymtab) \
    SS_DW_FN(dwfl_module_info) \
    SS_DW_FN(dwfl_report_begin) \
    SS_DW_FN(dwfl_report_end) \
    SS_DW_FN(dwfl_report_module) \
    SS_DW_FN(elf_begin) \
    SS_DW_FN(elf_cntl) \
    SS_DW_FN(elf_end) \
    SS_DW_FN(elf_getdata) \
    SS_DW_FN(elf_getscn) \
    SS_DW_FN(elf_getshdrstrndx) \
    SS_DW_FN(elf_kind) \
    SS_DW_FN(elf_nextscn) \
    SS_DW_FN(elf_rawfile) \
    SS_DW_FN(elf_strptr) \
    SS_DW_FN(elf_version) \
    SS_DW_FN(gelf_getshdr) \

typedef struct ss_dw_api {
#define SS_DW_FN(f) __typeof__(f) *f;
    SS_DW_FUNCTIONS
#undef SS_DW_FN
} ss_dw_api;

/* The module's table while some resolver holds it; NULL otherwise. */
extern const ss_dw_api *ss_dw;

/* Take a hold on the module, opening it if none is held: true when its
 * functions may be called (until the matching ss_dw_drop). A module that
 * cannot be opened is said once (an error line) and asked for again no
 * more often than every 10 s. */
bool ss_dw_hold(void);
/* Give a hold back; the last one closes the module (once nothing of
 * libdw's is in use: the caller ended its Dwfl). */
void ss_dw_drop(void);
/* Changes to the dynamic loader's list made by opening and closing the
 * module (dl_phdr_info's dlpi_adds and dlpi_subs count them too): the
 * resolver's cache is not flushed for its own changes. */
void ss_dw_own_changes(unsigned long long *adds, unsigned long long *subs);

#ifndef SS_DW_DIRECT
#define dwarf_attr (ss_dw->dwarf_attr)
#define dwarf_attr_integrate (ss_dw->dwarf_attr_integrate)
#define dwarf_child (ss_dw->dwarf_child)
#define dwarf_diename (ss_dw->dwarf_diename)
#define dwarf_filesrc (ss_dw->dwarf_filesrc)
#define dwarf_formref_die (ss_dw->dwarf_formref_die)
#define dwarf_formstring (ss_dw->dwarf_formstring)
#define dwarf_formudata (ss_dw->dwarf_formudata)
#define dwarf_getelf (ss_dw->dwarf_getelf)
#define dwarf_getscopes_die (ss_dw->dwarf_getscopes_die)
#define dwarf_getsrc_die (ss_dw->dwarf_getsrc_die)
#define dwarf_getsrcfiles (ss_dw->dwarf_getsrcfiles)
#define dwarf_getsrclines (ss_dw->dwarf_getsrclines)
#define dwarf_haspc (ss_dw->dwarf_haspc)
#define dwarf_lineaddr (ss_dw->dwarf_lineaddr)
#define dwarf_lineendsequence (ss_dw->dwarf_lineendsequence)
#define dwarf_lineno (ss_dw->dwarf_lineno)
#define dwarf_linesrc (ss_dw->dwarf_linesrc)
#define dwarf_nextcu (ss_dw->dwarf_nextcu)
#define dwarf_offdie (ss_dw->dwarf_offdie)
#define dwarf_onesrcline (ss_dw->dwarf_onesrcline)
#define dwarf_ranges (ss_dw->dwarf_ranges)
#define dwarf_siblingof (ss_dw->dwarf_siblingof)
#define dwarf_srclang (ss_dw->dwarf_srclang)
#define dwarf_tag (ss_dw->dwarf_tag)
#define dwelf_elf_gnu_build_id (ss_dw->dwelf_elf_gnu_build_id)
#define dwfl_addrmodule (ss_dw->dwfl_addrmodule)
#define dwfl_begin (ss_dw->dwfl_begin)
#define dwfl_end (ss_dw->dwfl_end)
#define dwfl_errmsg (ss_dw->dwfl_errmsg)
#define dwfl_getmodules (ss_dw->dwfl_getmodules)
#define dwfl_linux_proc_find_elf (ss_dw->dwfl_linux_proc_find_elf)
#define dwfl_module_addrdie (ss_dw->dwfl_module_addrdie)
#define dwfl_module_addrinfo (ss_dw->dwfl_module_addrinfo)
#define dwfl_module_build_id (ss_dw->dwfl_module_build_id)
#define dwfl_module_getdwarf (ss_dw->dwfl_module_getdwarf)
#define dwfl_module_getelf (ss_dw->dwfl_module_getelf)
#define dwfl_module_getsym_info (ss_dw->dwfl_module_getsym_info)
#define dwfl_module_getsymtab (ss_dw->dwfl_module_getsymtab)
#define dwfl_module_info (ss_dw->dwfl_module_info)
#define dwfl_report_begin (ss_dw->dwfl_report_begin)
#define dwfl_report_end (ss_dw->dwfl_report_end)
#define dwfl_report_module (ss_dw->dwfl_report_module)
#define elf_begin (ss_dw->elf_begin)
#define elf_cntl (ss_dw->elf_cntl)
#define elf_end (ss_dw->elf_end)
#define elf_getdata (ss_dw->elf_getdata)
#define elf_getscn (ss_dw->elf_getscn)
#define elf_getshdrstrndx (ss_dw->elf_getshdrstrndx)
#define elf_kind (ss_dw->elf_kind)
#define elf_nextscn (ss_dw->elf_nextscn)
#define elf_rawfile (ss_dw->elf_rawfile)
#define elf_strptr (ss_dw->elf_strptr)
#define elf_version (ss_dw->elf_version)
#define gelf_getshdr (ss_dw->gelf_getshdr)
#endif

#endif /* SS_SYMBOLS_DW_H */
