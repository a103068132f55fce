# probekit — build, fixtures, tests.
#
#   make demo       the main job: list and trace the system Python's USDT probes
#   make test       gofmt check, go vet, go test -race -p 1 ./...
#   make deps       install the Debian packages the build and tests need
#   make generate   rebuild the BPF objects (bpf2go, clang-19); output committed
#   make testdata   rebuild every fixture under testdata/; output committed
#   make testdata-system  the argument strings of installed system programs
#   make fuzz       run each fuzz target for FUZZTIME
#   make bench      run the Go benchmarks
#   make test-kernels  the kernel tests on Linux 5.10, 6.1 and 6.12 in VMs (qemu)
#   make test-kernel KVER=6.1 [KPKGS=./usdt,./uprobe] [KRUN=TestX]  one kernel

SHELL       := /bin/bash
GO          ?= go
CLANG       ?= clang-19
FUZZTIME    ?= 20s
BENCHTIME   ?= 1s

# Debian packages: build and test needs, the cross toolchains for fixtures,
# and the real USDT targets the tests and the demo read.
DEPS := systemtap-sdt-dev clang-19 llvm-19 libbpf-dev binutils file gcc g++ libc6-dev \
	gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
	gcc-arm-linux-gnueabihf libc6-dev-armhf-cross \
	gcc-i686-linux-gnu libc6-dev-i386-cross libc6-i386 \
	gcc-s390x-linux-gnu libc6-dev-s390x-cross \
	gcc-riscv64-linux-gnu libc6-dev-riscv64-cross \
	gcc-powerpc64le-linux-gnu libc6-dev-ppc64el-cross \
	gcc-powerpc64-linux-gnu libc6-dev-ppc64-cross \
	binutils-aarch64-linux-gnu linux-libc-dev \
	python3.11 openjdk-17-jre-headless openjdk-17-jdk-headless postgresql-15 libruby3.1 ruby3.1 php8.2-cli nodejs \
	util-linux prometheus \
	libc6-dbg elfutils debuginfod gdb bpftrace dwz \
	qemu-system-x86 qemu-user-static kmod xz-utils bpftool

.PHONY: all deps generate testdata testdata-system test fuzz bench demo build clean-testdata vmrun test-kernel test-kernels test-kernels-ci

all: build

build:
	$(GO) build ./...
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o bin/probekit ./cmd/probekit
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o bin/probekit-export ./cmd/probekit-export

# Idempotent and quiet: only packages that are missing are installed.
deps:
	@missing=$$(for p in $(DEPS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq >/dev/null && \
		apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

generate:
	BPF_CLANG=$(CLANG) BPF_STRIP=llvm-strip-19 $(GO) generate ./...

# -p 1: packages are tested one after another. Uprobes are the kernel's,
# per file and offset: one package's test that plants a bare uprobe on a
# semaphore-gated USDT site (to prove the semaphore matters, or to provoke
# a ref_ctr conflict) makes another package's attach with the semaphore at
# that site fail at the same moment.
test: deps
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -race -p 1 ./...

# --- the kernel matrix ----------------------------------------------------
#
# vmrun (internal/test/tools/vmrun) boots Debian's kernels under qemu's
# software emulation with this machine's root shared read-only, runs each
# package's test binary as root with PROBEKIT_REQUIRE_KERNEL=1 and prints a
# kernel x package table. The kernels are downloaded on first use into
# $$XDG_CACHE_HOME/probekit/kernels (~/.cache/probekit/kernels).
#
# In the VMs a test runs or skips naming the kernel feature it lacks
# (testkit.SkipOnOldKernel: vmrun fails a run with any other skip), so
# each package leaves out (!REGEXP, go test -skip) the tests that are
# helper processes of others, and those -short skips (a load test, the
# Go build-mode and objdump comparisons); the host runs them.
KERNEL_CORE := ./attach,./internal/features,./internal/test/bpftest,./record,./uprobe!^(TestGoLoad|TestGoBuildModes)$$,./usdt!^TestHelperTracer$$,./usdt/bpf,./bpfunwind,./follow,./tracer,./semaphore,./exporter,./symbolize,./unwind,./profile,./examples/...
# cmd/probekit's helper processes.
KERNEL_CMD_HELPERS := TestExportHelperProcess|TestListAllUnreadableHelper
KERNEL_CMD := ./cmd/probekit!^($(KERNEL_CMD_HELPERS))$$
KVER  ?= 6.1
KPKGS ?= ./...
KRUN  ?=

vmrun:
	CGO_ENABLED=0 $(GO) build -o bin/vmrun ./internal/test/tools/vmrun

test-kernel: deps vmrun
	./bin/vmrun -run '$(KRUN)' '$(KVER)=$(KPKGS)'

# make test-kernels: every package with kernel tests, all of each, on
# every kernel, with -short (vmrun). Each kernel boots two VMs, run two at
# a time on the two cores, longest first: the packages but cmd/probekit,
# and cmd/probekit (-pkg-timeout: on 5.10 under emulation its tests
# took 20 minutes without those CI's matrix leaves out, which add about
# 15 more).
# docs/kernels.md has the figures.
test-kernels: deps vmrun
	./bin/vmrun -j 2 -pkg-timeout 60m -timeout 70m '5.10/cmd=$(KERNEL_CMD)' '6.1/cmd=$(KERNEL_CMD)' \
		'5.10/core=$(KERNEL_CORE)' '6.1/core=$(KERNEL_CORE)' '6.12/cmd=$(KERNEL_CMD)' '6.12/core=$(KERNEL_CORE)'

# CI's matrix (.ci/run): the same packages on the same kernels, but for
# the tests of cmd/probekit that exercise nothing kernel-dependent their
# neighbours do not and cost minutes under emulation, and the other
# packages' tests with no kernel in them (docs/kernels.md lists them with
# their times; make test-kernels runs them, the host always). Six VMs,
# two at a time, longest first (6.1's packages about 19 minutes,
# cmd/probekit 17 on 5.10 and on 6.1, 5.10's packages 16, 6.12's 12, its
# cmd/probekit about 9), so that both cores stay busy: about 46 minutes.
KERNEL_CMD_OUT := TestCflagsBpf2go|TestVersion|TestExportNotLinked|TestREADMECommands|TestDocCommands|TestExampleCommands|TestListFunctionsNm|TestRuntimeJava|TestRuntimePHP|TestTraceLatencyPostgres|TestTraceFollowPostgres|TestTraceStackPostgres|TestExportPostgreSQL|TestTraceFollowManyProcesses|TestTraceFollowManyProcessesNoCookie
# No kernel in these either (objdump, addr2line and clang comparisons, an
# arm64 unwind of a recorded stack), 1.5 minutes per kernel.
KERNEL_CORE_CI := ./attach,./internal/features,./internal/test/bpftest,./record,./uprobe!^(TestGoLoad|TestGoBuildModes|TestReturnSitesObjdump|TestGoStackCheckEndObjdump|TestInstructionBoundariesObjdump)$$,./usdt!^TestHelperTracer$$,./usdt/bpf!^TestHeaderCompiles$$,./bpfunwind,./follow,./tracer,./semaphore,./exporter!^TestLibraryDeps$$,./symbolize!^(TestSymbolizeAgreesWithAddr2line|TestLineIndexFrames)$$,./unwind!^TestUnwindArm64$$,./profile!^TestPprofTool$$,./examples/...
KERNEL_CMD_CI := ./cmd/probekit!^($(KERNEL_CMD_HELPERS)|$(KERNEL_CMD_OUT))$$

test-kernels-ci: deps vmrun
	./bin/vmrun -j 2 '6.1/core=$(KERNEL_CORE_CI)' '5.10/cmd=$(KERNEL_CMD_CI)' '6.1/cmd=$(KERNEL_CMD_CI)' \
		'5.10/core=$(KERNEL_CORE_CI)' '6.12/core=$(KERNEL_CORE_CI)' '6.12/cmd=$(KERNEL_CMD_CI)'

# Every Fuzz target of every package, each for FUZZTIME, with its rate;
# a failure does not stop the others (internal/test/tools/fuzz.sh).
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) sh internal/test/tools/fuzz.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./...

# --- fixtures -------------------------------------------------------------

TD        := testdata
BIN       := $(TD)/bin
SDTINC    := $(TD)/.sdtinc
SAMPLE    := $(TD)/usdt_sample.c $(TD)/usdt_sample_sema.c
CFLAGS_FX := -O2 -g0 -Wall -Wextra -I$(SDTINC)
CROSS     := aarch64:aarch64-linux-gnu armhf:arm-linux-gnueabihf i386:i686-linux-gnu \
	s390x:s390x-linux-gnu riscv64:riscv64-linux-gnu ppc64le:powerpc64le-linux-gnu \
	ppc64:powerpc64-linux-gnu

# sys/sdt.h sits in the host's multiarch directory; the cross compilers get
# a directory holding only it (and its config), not the host's other headers.
$(SDTINC)/sys/sdt.h:
	mkdir -p $(SDTINC)/sys
	ln -sf /usr/include/x86_64-linux-gnu/sys/sdt.h $(SDTINC)/sys/sdt.h
	ln -sf /usr/include/x86_64-linux-gnu/sys/sdt-config.h $(SDTINC)/sys/sdt-config.h

testdata: deps $(SDTINC)/sys/sdt.h
	mkdir -p $(BIN)
	gcc $(CFLAGS_FX) -o $(BIN)/usdt_sample $(SAMPLE)
	gcc $(CFLAGS_FX) -O0 -o $(BIN)/usdt_sample_O0 $(SAMPLE)
	strip -o $(BIN)/usdt_sample_stripped $(BIN)/usdt_sample
	$(GO) run ./internal/test/tools/noshdr $(BIN)/usdt_sample $(BIN)/usdt_sample_noshdr
	set -e; for pair in $(CROSS); do \
		arch=$${pair%%:*}; cc=$${pair#*:}-gcc; \
		$$cc $(CFLAGS_FX) -o $(BIN)/usdt_sample_$$arch $(SAMPLE); \
	done
	gcc $(CFLAGS_FX) -fPIC -shared -o $(BIN)/libusdt_lib.so $(TD)/usdt_lib.c
	gcc $(CFLAGS_FX) -o $(BIN)/usdt_lib_user $(TD)/usdt_lib_user.c -L$(BIN) -lusdt_lib -Wl,-rpath,'$$ORIGIN'
	gcc $(CFLAGS_FX) -o $(BIN)/usdt_nops $(TD)/usdt_nops.c
	gcc $(CFLAGS_FX) -o $(BIN)/func_args $(TD)/func_args.c
	gcc $(CFLAGS_FX) -o $(BIN)/follow_ticker $(TD)/follow_ticker.c
	gcc $(CFLAGS_FX) -o $(BIN)/lock_entry $(TD)/lock_entry.c
	gcc $(CFLAGS_FX) -o $(BIN)/follow_fork $(TD)/follow_fork.c
	gcc $(CFLAGS_FX) -fno-omit-frame-pointer -fno-inline -fno-optimize-sibling-calls -o $(BIN)/stack_chain $(TD)/stack_chain.c
	gcc $(CFLAGS_FX) -fomit-frame-pointer -fno-inline -fno-optimize-sibling-calls -o $(BIN)/stack_chain_nofp $(TD)/stack_chain.c
	gcc $(CFLAGS_FX) -fomit-frame-pointer -fno-inline -fno-optimize-sibling-calls -o $(BIN)/stack_signal $(TD)/stack_signal.c
	gcc $(CFLAGS_FX) -fomit-frame-pointer -fno-inline -fno-optimize-sibling-calls -o $(BIN)/stack_jit $(TD)/stack_jit.c
	gcc $(CFLAGS_FX) -o $(BIN)/recurse $(TD)/recurse.c
	gcc $(CFLAGS_FX) -fno-optimize-sibling-calls -o $(BIN)/latency $(TD)/latency.c
	gcc $(CFLAGS_FX) -fomit-frame-pointer -fno-inline -fPIC -shared -o $(BIN)/libstack_mid.so $(TD)/stack_mid.c
	gcc $(CFLAGS_FX) -fno-omit-frame-pointer -fno-inline -fno-optimize-sibling-calls -o $(BIN)/stack_paths $(TD)/stack_paths.c -L$(BIN) -lstack_mid -Wl,-rpath,'$$ORIGIN'
	gcc $(CFLAGS_FX) -fno-omit-frame-pointer -fno-inline -fno-optimize-sibling-calls -o $(BIN)/stack_mixed $(TD)/stack_mixed.c -L$(BIN) -lstack_mid -Wl,-rpath,'$$ORIGIN'
	gcc $(CFLAGS_FX) -fno-omit-frame-pointer -fno-inline -fno-optimize-sibling-calls -o $(BIN)/stack_dlopen $(TD)/stack_dlopen.c
	gcc $(CFLAGS_FX) -fPIC -shared -fno-omit-frame-pointer -fno-optimize-sibling-calls -o $(BIN)/libpyfix.so $(TD)/pyfix.c
	@if [ -x $(TD)/goprog/build.sh ]; then $(TD)/goprog/build.sh; fi
	@if [ -x $(TD)/cfix/build.sh ]; then $(TD)/cfix/build.sh; fi
	$(TD)/debuginfo/build.sh
	$(TD)/lines/build.sh
	$(TD)/params/build.sh
	$(GO) run ./internal/test/tools/golden -o $(TD)/golden $(BIN)/*
	argspec/testdata/regen.sh
	file $(BIN)/* | sed 's/, BuildID[^,]*//'

# The argument strings of installed system programs (argspec's real-data
# tests): they follow the Debian packages, not this tree.
testdata-system: deps
	argspec/testdata/regen.sh system

# --- the main job ---------------------------------------------------------

PYTHON ?= /usr/bin/python3.11

# CPython 3.11 fires function__entry only while a profile or trace
# function is set, hence the sys.setprofile in the traced script.
DEMO_SCRIPT := import sys; sys.setprofile(lambda *a: None)\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\nprint("fib(5) =", fib(5))

demo: deps
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o bin/probekit ./cmd/probekit
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o bin/probekit-export ./cmd/probekit-export
	@echo "== USDT probes of $(PYTHON)"
	./bin/probekit list $(PYTHON)
	@echo
	@echo "== every Python function entry of a small program (probekit trace, launched and attached before it runs)"
	./bin/probekit trace --str 1,2 $(PYTHON):python:function__entry -- $(PYTHON) -c "$$(printf '$(DEMO_SCRIPT)')"
