// Package bpftest holds BPF programs written with usdt.bpf.h for probekit's
// own tests and benchmarks, compiled by bpf2go (gen.go; `make generate`)
// with the generated Go and objects committed:
//
//   - Args (args.c): on each hit, sends a hit record with bpf_usdt_cookie,
//     bpf_usdt_arg_cnt, and for n in 0..12 the result and value of
//     bpf_usdt_arg and the result of bpf_usdt_arg_size, plus PT_REGS_IP and
//     the process id. The kernel tests of the header and of the Go spec
//     encoder (usdt/spec_test.go) compare it with what the fixture passed.
//     args_macro sends the same record from BPF_USDT's named arguments.
//   - ArgsPre17: the same program built against libbpf's pre-1.7 spec
//     layout (usdt_pre17.h), to prove that objects built with an older
//     usdt.bpf.h are filled correctly.
//   - Count (count.c): count_hits only counts hits; count_args4 also reads
//     four arguments. Baselines for per-hit cost benchmarks.
//   - Layout (layout.c): the header built for big-endian s390x, read only
//     for its BTF (bitfield placement on the other byte order).
//
// Objects are built for x86-64 (Layout: s390x). No test here needs the
// attacher: tests fill __bpf_usdt_specs themselves.
package bpftest
