// Package safeelf reads the parts of an ELF file that probekit needs (the
// header, the program headers, the section headers and their names)
// without trusting any field of the file: every offset and size is checked
// against the file, allocations grow with the bytes actually read and
// never with a count or size taken from a header, and no input makes it
// panic. It also wraps debug/elf, which says it is not hardened against
// hostile input, so that a panic there becomes an error.
//
// A tracer runs as root over binaries that other users control; this
// package is where that promise is kept. It is not API.
package safeelf
