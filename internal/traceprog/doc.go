// Package traceprog is the generic BPF program behind `probekit trace`:
// attached to any USDT location with usdt.bpf.h's spec maps filled in, it
// reports every hit as an Event carrying the location's usdt cookie, the
// process and thread, and the value of each argument (with a bit per
// argument that could not be read).
//
// Typical use with the usdt attacher:
//
//	spec, _ := traceprog.Spec()
//	_ = usdt.Prepare(spec) // cookie flag and attach type for this kernel
//	objs, _ := traceprog.LoadSpec(spec)
//	defer objs.Close()
//	// attach objs.Program with an Attacher built on objs.Specs and
//	// objs.IPToSpecID, then read objs.Events with cilium's ringbuf reader
//	// and Event.UnmarshalBinary.
//
// The object is built for x86-64 and arm64 (gen.go).
package traceprog
