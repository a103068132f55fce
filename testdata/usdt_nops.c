/* usdt_nops: probes whose instruction is another x86 NOP than the 1-byte
 * "nop" sys/sdt.h emits, as producers that define their own NOP place them
 * (libbpf's usdt.h takes USDT_NOP from the user).
 *
 * Every probe is in provider "nops" and passes two arguments, the round
 * and a value derived from it (see fixture_driver.h):
 *
 *   nop1      90                              sys/sdt.h's own
 *   xchg      66 90                           xchg %ax,%ax
 *   nop3      0f 1f 00                        nopl (%rax)
 *   nop5      0f 1f 44 00 00                  nopl 0x0(%rax,%rax,1), alone
 *   nop9      66 0f 1f 84 00 00 00 00 00      nopw 0x0(%rax,%rax,1)
 *   nop_nop5  90 0f 1f 44 00 00               libbpf/usdt's earlier pair
 *   nop_nop10 90 66 2e 0f 1f 84 00 00 00 00 00  libbpf/usdt's pair
 *
 * sys/sdt.h places _SDT_NOP at the probe's label and defines it without
 * #ifndef, so it is redefined before each probe. ".nops N" makes gas
 * (binutils 2.31 and later) emit N bytes of NOP, as one instruction up to
 * 11 bytes on x86-64 (binutils 2.40 emits the encodings above). From 10
 * bytes on, gas adds a %cs prefix, on which the kernel places no uprobe:
 * 9 is the longest single NOP here. x86-64 only (Makefile "testdata").
 */
#include <sys/sdt.h>

#include "fixture_driver.h"

#define DEFINE_FIRE(fn, probe)                                         \
	static __attribute__((noinline)) void fn(long r, int verbose)  \
	{                                                              \
		int derived = (int)(-7 - r * 3);                       \
		STAP_PROBE2(nops, probe, r, derived);                  \
		if (verbose) {                                         \
			long long v[] = {r, derived};                  \
			report(#probe, 2, v);                          \
		}                                                      \
	}

DEFINE_FIRE(fire_nop1, nop1)

#undef _SDT_NOP
#define _SDT_NOP .nops 2
DEFINE_FIRE(fire_xchg, xchg)

#undef _SDT_NOP
#define _SDT_NOP .nops 3
DEFINE_FIRE(fire_nop3, nop3)

#undef _SDT_NOP
#define _SDT_NOP .nops 5
DEFINE_FIRE(fire_nop5, nop5)

#undef _SDT_NOP
#define _SDT_NOP .nops 9
DEFINE_FIRE(fire_nop9, nop9)

#undef _SDT_NOP
#define _SDT_NOP nop; .nops 5
DEFINE_FIRE(fire_nop_nop5, nop_nop5)

#undef _SDT_NOP
#define _SDT_NOP nop; .nops 10
DEFINE_FIRE(fire_nop_nop10, nop_nop10)

static const struct {
	const char *name;
	void (*fire)(long, int);
} probes[] = {
	{"nop1", fire_nop1},
	{"xchg", fire_xchg},
	{"nop3", fire_nop3},
	{"nop5", fire_nop5},
	{"nop9", fire_nop9},
	{"nop_nop5", fire_nop_nop5},
	{"nop_nop10", fire_nop_nop10},
};

static int fire(const char *probe, long r, int verbose)
{
	for (unsigned i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
		if (!strcmp(probe, probes[i].name)) {
			probes[i].fire(r, verbose);
			return 0;
		}
	}
	return -1;
}
