// Package traceprog is the generic BPF program behind `probekit trace`:
// attached to any USDT location with usdt.bpf.h's spec maps filled in, it
// reports every hit as a record carrying the location's usdt cookie, the
// process and thread, and the value of each argument (with a bit per
// argument that could not be read), some of them also read as strings.
//
// A record is as long as what it carries: a 32-byte header, 8 bytes per
// value, then each string with its NUL (Event, Decode). The kind byte of
// the header says what the values are; the layout leaves room for function
// probes (8 argument registers and a return value, up to 4 strings).
//
// Typical use with the usdt attacher:
//
//	spec, _ := traceprog.Spec()
//	_ = usdt.Prepare(spec) // cookie flag and attach type for this kernel
//	_ = traceprog.SetRingSize(spec, traceprog.DefaultRingSize, os.Getpagesize())
//	objs, _ := traceprog.LoadSpec(spec)
//	defer objs.Close()
//	// attach objs.Program with an Attacher built on objs.Specs and
//	// objs.IPToSpecID, then read objs.Events with cilium's ringbuf
//	// reader (ReadInto, with a deadline: after SetRingSize the program
//	// wakes the reader only when a quarter of the ring is unread) and
//	// Event.Decode.
//
// The object is built for x86-64 and arm64 (gen.go).
package traceprog
