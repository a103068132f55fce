/* usdt_sample: probekit's main USDT fixture.
 *
 * Every probe is in provider "sample". The program knows the values it
 * passes and prints them per hit (see fixture_driver.h), so kernel tests
 * compare what their BPF program read with what was passed. Values depend
 * on the round number so that hits of different rounds differ.
 *
 *   zero      no argument
 *   sizes     8 arguments: every size (1, 2, 4, 8), signed and unsigned
 *   consts    constants, including negative and beyond INT64_MAX
 *   twelve    12 arguments, the maximum
 *   mem       memory operands with and without displacement
 *   sib       an array element: base + index * scale at -O2
 *   global    a global variable: PC-relative with a symbol on x86-64
 *   sema      gated by a semaphore (usdt_sample_sema.c)
 *   inlined   one probe name at three call sites
 *   loop      4 arguments, for per-hit overhead ("--loop loop N")
 *
 * Built for seven architectures (Makefile "testdata"); only the x86-64
 * builds are run.
 */
#include <stdint.h>
#include <sys/sdt.h>

#include "fixture_driver.h"

#define V(x) ((long long)(x))

struct record {
	int64_t wide;
	int32_t word;
	int16_t half;
	int8_t byte;
};

/* Globals the probes read in place (PC-relative operands on x86-64). */
volatile int32_t sample_global_counter = 0;
volatile uint64_t sample_global_wide = 0;

int sample_sema_fire(long round, int verbose); /* usdt_sample_sema.c */

/* Keeps values in registers or memory as the compiler chooses, but stops
 * it from folding them into constants. */
static long opaque(long x)
{
	__asm__ __volatile__("" : "+r"(x));
	return x;
}

static __attribute__((noinline)) void fire_sizes(long r, int verbose)
{
	int8_t s1 = (int8_t)(-5 - r);
	uint8_t u1 = (uint8_t)(250 + r);
	int16_t s2 = (int16_t)(-1234 - r);
	uint16_t u2 = (uint16_t)(60000 + r);
	int32_t s4 = (int32_t)(-123456 - r);
	uint32_t u4 = (uint32_t)(4000000000u + (uint32_t)r);
	int64_t s8 = (int64_t)(-1234567890123LL - r);
	uint64_t u8 = (uint64_t)(18446744073709551000ULL + (uint64_t)r);

	s1 = (int8_t)opaque(s1);
	u1 = (uint8_t)opaque(u1);
	s2 = (int16_t)opaque(s2);
	u2 = (uint16_t)opaque(u2);
	s4 = (int32_t)opaque(s4);
	u4 = (uint32_t)opaque(u4);
	s8 = (int64_t)opaque(s8);
	u8 = (uint64_t)opaque(u8);
	STAP_PROBE8(sample, sizes, s1, u1, s2, u2, s4, u4, s8, u8);
	if (verbose) {
		long long v[] = {V(s1), V(u1), V(s2), V(u2), V(s4), V(u4), V(s8), V(u8)};
		report("sizes", 8, v);
	}
}

static __attribute__((noinline)) void fire_consts(int verbose)
{
	STAP_PROBE5(sample, consts, 5, -9, (int8_t)-1, (uint16_t)65535, 0x7fffffffffffffffLL);
	if (verbose) {
		long long v[] = {5, -9, -1, 65535, 0x7fffffffffffffffLL};
		report("consts", 5, v);
	}
}

static __attribute__((noinline)) void fire_twelve(long r, int verbose)
{
	long a[12];

	for (int i = 0; i < 12; i++)
		a[i] = opaque((i + 1) * 1000 + r);
	STAP_PROBE12(sample, twelve, a[0], a[1], a[2], a[3], a[4], a[5],
		     a[6], a[7], a[8], a[9], a[10], a[11]);
	if (verbose) {
		long long v[12];
		for (int i = 0; i < 12; i++)
			v[i] = a[i];
		report("twelve", 12, v);
	}
}

static __attribute__((noinline)) void probe_mem(const volatile struct record *p)
{
	/* p stays in a register: the operands are (%reg) and disp(%reg). */
	STAP_PROBE4(sample, mem, p->wide, p->word, p->half, p->byte);
}

static void fire_mem(long r, int verbose)
{
	struct record rec = {
		.wide = -9000000000LL - r,
		.word = 70000 + (int32_t)r,
		.half = (int16_t)(-300 - r),
		.byte = (int8_t)(-7 - r),
	};

	probe_mem(&rec);
	if (verbose) {
		long long v[] = {rec.wide, rec.word, rec.half, rec.byte};
		report("mem", 4, v);
	}
}

static __attribute__((noinline)) void probe_sib(const int32_t *arr, long i)
{
	/* At -O2: -4@(%rdi,%rsi,4) on x86-64. */
	STAP_PROBE2(sample, sib, arr[i], i);
}

static void fire_sib(long r, int verbose)
{
	int32_t arr[8];
	long i = r % 8;

	for (int k = 0; k < 8; k++)
		arr[k] = -100 * (k + 1);
	probe_sib(arr, i);
	if (verbose) {
		long long v[] = {arr[i], i};
		report("sib", 2, v);
	}
}

static __attribute__((noinline)) void fire_global(long r, int verbose)
{
	sample_global_counter = (int32_t)(-42 - r);
	sample_global_wide = 0xfedcba9876543210ULL + (uint64_t)r;
	STAP_PROBE2(sample, global, sample_global_counter, sample_global_wide);
	if (verbose) {
		long long v[] = {sample_global_counter, (long long)sample_global_wide};
		report("global", 2, v);
	}
}

/* Inlined into three call sites: one probe, three locations. */
static inline __attribute__((always_inline)) void probe_inlined(long site, long r)
{
	STAP_PROBE2(sample, inlined, site, r);
}

static __attribute__((noinline)) void fire_inlined(long r, int verbose)
{
	probe_inlined(opaque(1), r);
	probe_inlined(opaque(2), r);
	probe_inlined(opaque(3), r);
	if (verbose) {
		for (long site = 1; site <= 3; site++) {
			long long v[] = {site, r};
			report("inlined", 2, v);
		}
	}
}

static __attribute__((noinline)) void fire_loop(long r)
{
	STAP_PROBE4(sample, loop, r, r + 1, -r, (int32_t)r);
}

static int fire(const char *probe, long r, int verbose)
{
	if (!strcmp(probe, "zero")) {
		STAP_PROBE(sample, zero);
		if (verbose)
			report("zero", 0, NULL);
	} else if (!strcmp(probe, "sizes")) {
		fire_sizes(r, verbose);
	} else if (!strcmp(probe, "consts")) {
		fire_consts(verbose);
	} else if (!strcmp(probe, "twelve")) {
		fire_twelve(r, verbose);
	} else if (!strcmp(probe, "mem")) {
		fire_mem(r, verbose);
	} else if (!strcmp(probe, "sib")) {
		fire_sib(r, verbose);
	} else if (!strcmp(probe, "global")) {
		fire_global(r, verbose);
	} else if (!strcmp(probe, "inlined")) {
		fire_inlined(r, verbose);
	} else if (!strcmp(probe, "sema")) {
		sample_sema_fire(r, verbose);
	} else if (!strcmp(probe, "loop")) {
		fire_loop(r);
	} else {
		return -1;
	}
	return 0;
}
