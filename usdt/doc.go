// Package usdt reads USDT probes (the .note.stapsdt probes of sys/sdt.h,
// DTrace-style providers and runtimes such as CPython, OpenJDK, PostgreSQL
// and Ruby) from ELF files and attaches BPF programs to them.
package usdt
